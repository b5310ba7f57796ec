//! The deadlock workload's rules (`--primitive deadlock`, [`crate::waits::Waited`]):
//!
//! - `deadlock-real`: every `Deadlock` the library reported was a real cycle in the
//!   history: each holder it names (but the last, the victim itself) had a wait of its own
//!   for the next name of the cycle, while holding its own, that was still going on at some
//!   point of the victim's wait; and the last name is one the victim held.
//! - `deadlock-chain-real`: every `WaitChainTooLong` the library reported refused a wait
//!   behind a chain of waiters longer than [`MAX_WAIT_CHAIN`] in the history: from the name
//!   the victim asked for, waits going on at some point of the victim's wait, each holding
//!   the name the one before asks for, through at least [`MAX_WAIT_CHAIN`] names of others.
//! - `deadlock-persists`: no cycle of waits, of any length (each member holding the name
//!   the one before it waits for, every member's wait going on), lasted longer than
//!   [`DETECTION_BOUND`]: one member of a cycle is told (`Deadlock`, or `WaitChainTooLong`
//!   past the limit) within the library's recheck period and a few round trips, however
//!   the cycle formed. (The workload stops no client: every member is alive.)

use std::collections::{BTreeMap, BTreeSet};

use lock_core::MAX_WAIT_CHAIN;

use super::{Report, Violation};
use crate::clock::{ms, nanos, Nanos};
use crate::event::Event;
use crate::waits::{client_of, Waited};

/// How long a cycle of waiters may last before one of them is told: the library checks a
/// recorded wait again every 200 ms; the rest is room for round trips and a loaded machine.
pub const DETECTION_BOUND: std::time::Duration = std::time::Duration::from_millis(1000);

/// The rules, on the `Waited` events of the history.
pub(super) fn check(events: &[Event], report: &mut Report) {
    let waits: Vec<&Waited> = events
        .iter()
        .filter_map(|event| match event {
            Event::Waited(waited) => Some(waited),
            _ => None,
        })
        .collect();
    if waits.is_empty() {
        return;
    }
    let told = waits.iter().filter(|w| w.outcome == "deadlock").count() as u64;
    *report
        .expected
        .entry("deadlock/reported".to_owned())
        .or_default() += told;
    let refused = waits
        .iter()
        .filter(|w| w.outcome == "chain-too-long")
        .count() as u64;
    *report
        .expected
        .entry("deadlock/chain-refused".to_owned())
        .or_default() += refused;
    for victim in waits.iter().filter(|w| w.outcome == "deadlock") {
        if let Some(why) = unreal(victim, &waits) {
            report.violations.push(Violation {
                rule: "deadlock-real",
                name: victim.wants.clone(),
                detail: format!(
                    "client {} was told Deadlock at {} (waiting since {}), cycle {:?}: {why}",
                    victim.client,
                    ms(victim.t_end),
                    ms(victim.t_start),
                    victim.cycle
                ),
            });
        }
    }
    for victim in waits.iter().filter(|w| w.outcome == "chain-too-long") {
        let chain = chain_behind(victim, &waits);
        if chain < MAX_WAIT_CHAIN {
            report.violations.push(Violation {
                rule: "deadlock-chain-real",
                name: victim.wants.clone(),
                detail: format!(
                    "client {} holding {:?} was refused WaitChainTooLong at {} (waiting since {}) for {}, behind a chain of {chain} names of others in the history, not more than {MAX_WAIT_CHAIN} with its own",
                    victim.client,
                    victim.holding,
                    ms(victim.t_end),
                    ms(victim.t_start),
                    victim.wants,
                ),
            });
        }
    }
    persisting(&waits, report);
}

/// How many names of others the chain of waiters ahead of `victim` counts in the history:
/// from the name it asked for, each held by a wait going on at some point of the victim's
/// wait, which asks for the next; up to a name the victim holds (a ring) or the first
/// name nobody waiting holds.
fn chain_behind(victim: &Waited, waits: &[&Waited]) -> usize {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut name = victim.wants.as_str();
    while !victim.holding.iter().any(|held| held == name) && seen.insert(name) {
        let next = waits.iter().find(|w| {
            !std::ptr::eq(**w, victim)
                && w.holding.iter().any(|held| held == name)
                && w.t_start <= victim.t_end
                && w.t_end >= victim.t_start
        });
        match next {
            Some(w) => name = w.wants.as_str(),
            None => break,
        }
    }
    seen.len()
}

/// Why the cycle `victim` was told of is not in the history, if it is not.
fn unreal(victim: &Waited, waits: &[&Waited]) -> Option<String> {
    let cycle = &victim.cycle;
    let (Some(first), Some(last)) = (cycle.first(), cycle.last()) else {
        return Some("an empty cycle".to_owned());
    };
    if first.0 != victim.wants {
        return Some(format!(
            "the cycle starts at {}, not at the name waited for",
            first.0
        ));
    }
    if !victim.holding.contains(&last.0) {
        return Some(format!(
            "the cycle ends at {}, which the victim did not hold",
            last.0
        ));
    }
    if last.1.as_deref().and_then(client_of) != Some(victim.client) {
        return Some(format!(
            "the cycle ends at a holder other than the victim: {:?}",
            last.1
        ));
    }
    for (at, (name, holder)) in cycle.iter().enumerate().take(cycle.len() - 1) {
        let Some(client) = holder.as_deref().and_then(client_of) else {
            return Some(format!("no client named by holder {holder:?} of {name}"));
        };
        let next = &cycle[at + 1].0;
        let waited = waits.iter().any(|w| {
            w.client == client
                && w.wants == *next
                && w.holding.contains(name)
                && w.t_start <= victim.t_end
                && w.t_end >= victim.t_start
        });
        if !waited {
            return Some(format!(
                "client {client} had no wait for {next} while holding {name} during the victim's wait"
            ));
        }
    }
    None
}

/// Rule `deadlock-persists`: cycles of waits, of any length, whose waits all went on
/// together for longer than the bound. The history is swept from one start or end of a
/// wait to the next: between two, the waits going on are fixed, and so is the graph "w
/// waits behind v" (v holds what w asks for); a cycle is a strongly connected part of it
/// of two waits or more, going on since the latest start among its members.
fn persisting(waits: &[&Waited], report: &mut Report) {
    let bound: Nanos = nanos(DETECTION_BOUND);
    let mut points: Vec<Nanos> = waits.iter().flat_map(|w| [w.t_start, w.t_end]).collect();
    points.sort_unstable();
    points.dedup();
    let mut by_start: Vec<usize> = (0..waits.len()).collect();
    by_start.sort_by_key(|&i| waits[i].t_start);
    let mut next_start = 0;
    let mut active: Vec<usize> = Vec::new();
    let mut reported: BTreeSet<Vec<usize>> = BTreeSet::new();
    for pair in points.windows(2) {
        let (at, until) = (pair[0], pair[1]);
        while next_start < by_start.len() && waits[by_start[next_start]].t_start <= at {
            active.push(by_start[next_start]);
            next_start += 1;
        }
        active.retain(|&i| waits[i].t_end > at);
        if active.len() < 2 {
            continue;
        }
        let mut holders: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (at, &i) in active.iter().enumerate() {
            for name in &waits[i].holding {
                holders.entry(name.as_str()).or_default().push(at);
            }
        }
        let edges: Vec<Vec<usize>> = active
            .iter()
            .enumerate()
            .map(|(at, &i)| {
                holders
                    .get(waits[i].wants.as_str())
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|&other| other != at)
                    .collect()
            })
            .collect();
        for part in strongly_connected(&edges) {
            if part.len() < 2 {
                continue;
            }
            let mut members: Vec<usize> = part.iter().map(|&at| active[at]).collect();
            members.sort_unstable();
            let since = members
                .iter()
                .map(|&i| waits[i].t_start)
                .max()
                .unwrap_or(at);
            let lasted = until.saturating_sub(since);
            if lasted > bound && reported.len() <= 20 && reported.insert(members.clone()) {
                let members: Vec<&Waited> = members.iter().map(|&i| waits[i]).collect();
                report.violations.push(cycle_violation(&members, lasted));
            }
        }
    }
}

/// The strongly connected parts of a graph given by its edges (Tarjan's algorithm).
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        parts: Vec<Vec<usize>>,
    }
    fn visit(state: &mut State<'_>, node: usize) {
        state.index[node] = Some(state.next);
        state.low[node] = state.next;
        state.next += 1;
        state.stack.push(node);
        state.on_stack[node] = true;
        for &to in &state.edges[node] {
            match state.index[to] {
                None => {
                    visit(state, to);
                    state.low[node] = state.low[node].min(state.low[to]);
                }
                Some(index) if state.on_stack[to] => {
                    state.low[node] = state.low[node].min(index);
                }
                Some(_) => {}
            }
        }
        if Some(state.low[node]) == state.index[node] {
            let mut part = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack[top] = false;
                part.push(top);
                if top == node {
                    break;
                }
            }
            state.parts.push(part);
        }
    }
    let n = edges.len();
    let mut state = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        parts: Vec::new(),
    };
    for node in 0..n {
        if state.index[node].is_none() {
            visit(&mut state, node);
        }
    }
    state.parts
}

fn cycle_violation(members: &[&Waited], lasted: Nanos) -> Violation {
    let text: Vec<String> = members
        .iter()
        .take(8)
        .map(|w| {
            format!(
                "client {} holding {:?} waits for {} ({}..{}, {})",
                w.client,
                w.holding,
                w.wants,
                ms(w.t_start),
                ms(w.t_end),
                w.outcome
            )
        })
        .collect();
    let more = match members.len() {
        n if n > 8 => format!("; and {} more", n - 8),
        _ => String::new(),
    };
    Violation {
        rule: "deadlock-persists",
        name: members[0].wants.clone(),
        detail: format!(
            "a cycle of {} waiters lasted {} ms, longer than {:?}: {}{more}",
            members.len(),
            lasted / 1_000_000,
            DETECTION_BOUND,
            text.join("; ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(client: u32, holding: &str, wants: &str, t: (u64, u64), outcome: &str) -> Waited {
        Waited {
            client,
            holding: vec![holding.to_owned()],
            wants: wants.to_owned(),
            t_start: t.0 * 1_000_000,
            t_end: t.1 * 1_000_000,
            outcome: outcome.to_owned(),
            cycle: Vec::new(),
        }
    }

    fn ring(n: usize, t: (u64, u64), outcome: impl Fn(usize) -> &'static str) -> Vec<Waited> {
        (0..n)
            .map(|i| {
                let name = |i: usize| format!("r:{}", i % n);
                wait(i as u32, &name(i), &name(i + 1), t, outcome(i))
            })
            .collect()
    }

    fn rules(waits: &[Waited]) -> Vec<&'static str> {
        let events: Vec<Event> = waits.iter().cloned().map(Event::Waited).collect();
        let mut report = Report::default();
        check(&events, &mut report);
        report.violations.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_long_ring_that_stands_is_a_violation_and_one_told_at_once_is_not() {
        let stood = ring(10, (0, 3000), |_| "timeout");
        assert_eq!(rules(&stood), ["deadlock-persists"]);
        let mut told = ring(10, (0, 3000), |_| "granted");
        told[3].t_end = 5_000_000;
        told[3].outcome = "chain-too-long".to_owned();
        // Told at 5 ms, and refused for a chain of 9 names: not real.
        assert_eq!(rules(&told), ["deadlock-chain-real"]);
        let mut long = ring(MAX_WAIT_CHAIN + 1, (0, 3000), |_| "granted");
        long[7].t_end = 5_000_000;
        long[7].outcome = "chain-too-long".to_owned();
        assert!(rules(&long).is_empty(), "{:?}", rules(&long));
    }

    #[test]
    fn a_chain_is_no_cycle() {
        let mut chain = ring(5, (0, 3000), |_| "granted");
        chain.pop();
        assert!(rules(&chain).is_empty());
    }
}
