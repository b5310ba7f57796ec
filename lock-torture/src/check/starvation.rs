//! Rule `starvation`: a client that keeps waiting for a lock is not passed over again and
//! again by clients that asked after it.
//!
//! A lock's waiters stand in one queue, served in the order they joined it (on Redlock,
//! every master orders them by the same tickets). So while a client waits for a name
//! without interruption and is granted nothing, the name goes to other clients only on
//! requests that were in line before it, or that took it in a moment when it was free and
//! reserved for nobody. A Locker stands in line once for all its tasks; a task that waited
//! behind its sibling joins the line when the sibling is served, so each other client can
//! pass a waiter about twice (with two tasks) before the waiter's turn. A client passed
//! over more than [`PASSED_OVER_PER_CLIENT`] times per client of the run (12 with the
//! default 4 clients) by requests made after it began waiting is being starved: its
//! requests are ordered behind every other one (a Redlock client whose clock runs ahead,
//! with tickets taken on its own clock, never got the lock while the others kept it
//! busy: every grant of its wait went past it).
//!
//! What counts as waiting: a lock request with a wait (not a try, not a multi-lock) that
//! ended granted or timed out, from its call to its end; the client's uninterrupted
//! stretches of waiting for one name, cut at each of its own grants of that name. Not
//! counted: time under a fault or soon after it (the same windows as `liveness`: a
//! stopped, killed or cut-off client or server legitimately holds up a queue), and time
//! in which the waiting client did not run (its hiccups). Each client and name is
//! reported once, with its worst stretch; [`Report::most_passed_over`] says how close the
//! run came.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::liveness::{CLAIM_WINDOW, REPLICATED_SETTLE};
use super::{Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::{Event, FailKind, HoldKind};

/// How many grants to requests made after a client began waiting it may see before one of
/// its own, per client of the run (the limit is this times the clients): half again what
/// a fair queue allows (about twice per other client, and a grant of a lock free and
/// reserved for nobody now and then), and far below what a queue that orders a client
/// behind everybody does (every grant of its wait goes to the others: 20 to 30 in a
/// 2-second `clock-skew` run).
pub const PASSED_OVER_PER_CLIENT: u64 = 3;

/// A grant of a lock: to whom, when it was asked for, when it was granted.
struct Grant {
    client: u32,
    call: Nanos,
    at: Nanos,
}

/// Checks every client's waits for each name against the grants to the other clients.
pub(super) fn check(events: &[Event], report: &mut Report) {
    let mut ttl: Nanos = 0;
    let mut offsets: HashMap<u32, i64> = HashMap::new();
    let mut clients: HashSet<u32> = HashSet::new();
    let mut excluded: Vec<(Nanos, Nanos)> = Vec::new();
    let mut faults: Vec<(Nanos, Nanos)> = Vec::new();
    let mut hiccups: HashMap<u32, Vec<(Nanos, Nanos)>> = HashMap::new();
    // (client, name) -> spans of waiting requests; name -> grants.
    let mut waits: BTreeMap<(u32, &str), Vec<(Nanos, Nanos)>> = BTreeMap::new();
    let mut grants: HashMap<&str, Vec<Grant>> = HashMap::new();
    let replicated = events.iter().any(|e| {
        matches!(e, Event::Topology { topology, .. } if topology == "cluster" || topology == "sentinel")
    });
    for event in events {
        match event {
            Event::Start {
                client,
                clock_offset_ms,
                ..
            } => {
                offsets.insert(*client, *clock_offset_ms);
                clients.insert(*client);
            }
            Event::Fault { t_start, t_end, .. }
            | Event::Down { t_start, t_end, .. }
            | Event::Foreign { t_start, t_end, .. } => faults.push((*t_start, *t_end)),
            Event::Failover(f) => faults.push((f.t_start, f.t_end.max(f.t_whole.unwrap_or(0)))),
            Event::Hiccup {
                client,
                t_start,
                t_end,
            } => hiccups.entry(*client).or_default().push((*t_start, *t_end)),
            Event::Acquired(a) if a.kind == HoldKind::Lock && a.set.is_none() => {
                ttl = ttl.max(a.ttl_ms.saturating_mul(1_000_000));
                clients.insert(a.client);
                grants.entry(a.name.as_str()).or_default().push(Grant {
                    client: a.client,
                    call: a.call_start,
                    at: a.acquired,
                });
                if a.wait_ms.unwrap_or(0) > 0 {
                    waits
                        .entry((a.client, a.name.as_str()))
                        .or_default()
                        .push((a.call_start, a.acquired));
                }
            }
            Event::AcquireFailed {
                client,
                name,
                t_start,
                t_end,
                kind: FailKind::Contention,
                wait_ms: Some(wait),
                hold: HoldKind::Lock,
                set: None,
                ..
            } if *wait > 0 => {
                clients.insert(*client);
                waits
                    .entry((*client, name.as_str()))
                    .or_default()
                    .push((*t_start, *t_end));
            }
            _ => {}
        }
    }
    let margin = if replicated {
        (CLAIM_WINDOW + 2 * ttl).max(REPLICATED_SETTLE)
    } else {
        CLAIM_WINDOW + 2 * ttl
    };
    excluded.extend(
        faults
            .iter()
            .map(|&(start, end)| (start, end.saturating_add(margin))),
    );
    let limit = PASSED_OVER_PER_CLIENT * clients.len() as u64;
    let none = Vec::new();
    for ((client, name), spans) in &waits {
        let Some(all) = grants.get(name) else {
            continue;
        };
        let mut own: Vec<Nanos> = all
            .iter()
            .filter(|g| g.client == *client)
            .map(|g| g.at)
            .collect();
        own.sort_unstable();
        let mut blocked = excluded.clone();
        blocked.extend(hiccups.get(client).unwrap_or(&none).iter().copied());
        let mut worst: Option<(u64, Nanos, Nanos, u64)> = None;
        for (start, end) in stretches(spans, &own, blocked) {
            let passed = all
                .iter()
                .filter(|g| g.client != *client && g.call >= start && g.at > start && g.at < end)
                .count() as u64;
            report.most_passed_over = report.most_passed_over.max(passed);
            if worst.is_none_or(|(n, ..)| passed > n) {
                let asked = spans.iter().filter(|&&(s, e)| s < end && e > start).count() as u64;
                worst = Some((passed, start, end, asked));
            }
        }
        let Some((passed, start, end, asked)) = worst else {
            continue;
        };
        if passed <= limit {
            continue;
        }
        let offset = match offsets.get(client).copied().unwrap_or(0) {
            0 => String::new(),
            off => format!(", its clock {off:+} ms off"),
        };
        report.violations.push(Violation {
            rule: "starvation",
            name: (*name).to_owned(),
            detail: format!(
                "client {client}{offset} waited for `{name}` from {start} to {end} ({}, {asked} requests) and was granted nothing, while other clients were granted it {passed} times on requests made after it began waiting (more than {limit}: {PASSED_OVER_PER_CLIENT} per client of the run)",
                ms(end - start),
            ),
        });
    }
}

/// The client's uninterrupted stretches of waiting: the union of `spans`, less `blocked`,
/// cut at each of its own grants (`own`, sorted).
fn stretches(
    spans: &[(Nanos, Nanos)],
    own: &[Nanos],
    mut blocked: Vec<(Nanos, Nanos)>,
) -> Vec<(Nanos, Nanos)> {
    let mut spans = spans.to_vec();
    spans.sort_unstable();
    blocked.sort_unstable();
    // The union of the waits.
    let mut union: Vec<(Nanos, Nanos)> = Vec::new();
    for (s, e) in spans {
        match union.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => union.push((s, e)),
        }
    }
    let mut out = Vec::new();
    for (s, e) in union {
        // Less what is blocked.
        let mut at = s;
        let mut free = Vec::new();
        for &(bs, be) in &blocked {
            if be <= at || bs >= e {
                continue;
            }
            if bs > at {
                free.push((at, bs));
            }
            at = at.max(be);
        }
        if at < e {
            free.push((at, e));
        }
        // Cut at the client's own grants.
        for (fs, fe) in free {
            let mut from = fs;
            for &g in own.iter().filter(|&&g| g > fs && g < fe) {
                out.push((from, g));
                from = g;
            }
            out.push((from, fe));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::{acq, failed, rules, run};

    const MS: Nanos = 1_000_000;

    fn start(client: u32, clock_offset_ms: i64) -> Event {
        Event::Start {
            client,
            pid: client + 100,
            t: 0,
            protocol: "scripts".into(),
            command_timeout_ms: 1000,
            clock_offset_ms,
        }
    }

    /// Grant `seq` of name `n` to `client`: asked for at `call_ms` with a 2 s wait,
    /// granted at `at_ms`, trusted for 18 ms.
    fn grant(seq: u64, client: u32, call_ms: u64, at_ms: u64) -> Event {
        let Event::Acquired(mut a) = acq(&format!("c{client}.t0.{seq}"), "n", seq, at_ms - 1, 19)
        else {
            unreachable!()
        };
        a.client = client;
        a.call_start = call_ms * MS;
        a.wait_ms = Some(2000);
        Event::Acquired(a)
    }

    /// Four clients, client 0's clock 5 s ahead; the lock changes hands every 20 ms from
    /// 20 ms on, among clients 1 to 3, each asking again the moment it let go; client 0
    /// waits from 0 to 1000 ms (two requests, each timed out) and, if `served_at` says so,
    /// is granted once.
    fn history(served_at: Option<u64>) -> Vec<Event> {
        let mut events: Vec<Event> = [(0, 5_000), (1, -5_000), (2, 0), (3, 2_000)]
            .into_iter()
            .map(|(c, off)| start(c, off))
            .collect();
        events.push(failed(0, 0, 500, 2000));
        events.push(failed(0, 500, 1000, 2000));
        let mut seq = 0;
        for slot in 1..50u64 {
            seq += 1;
            let at = slot * 20;
            if Some(at) == served_at {
                events.push(grant(seq, 0, 0, at));
                continue;
            }
            let client = (slot % 3) as u32 + 1;
            // Asked when its previous lease ended (three slots before), or at 5 ms.
            let call = if slot > 3 { at - 42 } else { 5 };
            events.push(grant(seq, client, call, at));
        }
        events
    }

    #[test]
    fn a_waiter_passed_over_again_and_again_is_starved() {
        let report = run(history(None), &[]);
        assert_eq!(rules(&report), ["starvation"], "{:?}", report.violations);
        let detail = &report.violations[0].detail;
        assert!(
            detail.contains("client 0, its clock +5000 ms off"),
            "{detail}"
        );
        assert!(detail.contains("2 requests"), "{detail}");
        // All 49 grants went to requests made after client 0 began waiting.
        assert_eq!(report.most_passed_over, 49, "{detail}");
    }

    #[test]
    fn a_waiter_served_in_its_turn_is_not() {
        // Served once, at 100 ms: the rest of its wait, from 100 to 1000 ms, is a stretch
        // of its own, and it is still passed over 42 times.
        let report = run(history(Some(100)), &[]);
        assert_eq!(rules(&report), ["starvation"], "{:?}", report.violations);
        // Served every fourth slot: never passed over more than 3 times in a row.
        let mut fair = history(None);
        fair.retain(|e| !matches!(e, Event::Acquired(_)));
        for slot in 1..50u64 {
            let at = slot * 20;
            let client = (slot % 4) as u32;
            fair.push(grant(slot, client, at.saturating_sub(62).max(1), at));
        }
        let report = run(fair, &[]);
        assert!(report.passed(), "{:?}", report.violations);
        assert!(report.most_passed_over <= 3, "{}", report.most_passed_over);
    }

    #[test]
    fn waits_under_a_fault_or_a_hiccup_are_not_judged() {
        let mut faulted = history(None);
        faulted.push(Event::Fault {
            kind: "partition".into(),
            target: "client0".into(),
            t_start: 300 * MS,
            t_end: 400 * MS,
        });
        // Judged from 0 to 300 ms (14 passes: more than 12, the limit with 4 clients) and
        // from 900 ms (400 ms, then a claim window and two TTLs) to 1000 (4 passes).
        let report = run(faulted.clone(), &[]);
        assert_eq!(rules(&report), ["starvation"], "{:?}", report.violations);
        assert_eq!(report.most_passed_over, 14);
        // Client 0 not running from 150 to 160 ms: 7 passes before, 4 after.
        faulted.push(Event::Hiccup {
            client: 0,
            t_start: 150 * MS,
            t_end: 160 * MS,
        });
        let report = run(faulted, &[]);
        assert!(report.passed(), "{:?}", report.violations);
    }

    #[test]
    fn stretches_are_the_waits_less_the_blocked_time_cut_at_grants() {
        let spans = [(0, 100), (50, 300), (400, 500)];
        assert_eq!(
            stretches(&spans, &[200], vec![(250, 260)]),
            vec![(0, 200), (200, 250), (260, 300), (400, 500)]
        );
        assert_eq!(stretches(&spans, &[], vec![(0, 1000)]), vec![]);
    }
}
