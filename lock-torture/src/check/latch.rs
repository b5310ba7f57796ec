//! Rules of countdown latches (`--primitive latch`, `client/latch.rs`).
//!
//! A round is known by its arm (its id, count and TTL, the call's stamps). The server
//! opened or expired it between its arm and the next round's: a count-down that returned
//! 0 (an *opener*) within that span may have opened it; one whose whole call lies inside
//! it *certainly* counted it. Rules:
//!
//! - `latch-once`: a round opens exactly once: no two openers certainly of one round; the
//!   count-downs certainly of one round return different counts, each below the round's
//!   count; an opener had the round's count of count-downs that may have counted it; and
//!   round ids increase from one arm to the next.
//! - `latch-rearm`: a round is not replaced while it still counts: a new round was armed
//!   before the previous one could have opened (no opener sent before) or expired (its
//!   TTL not over).
//! - `latch-early` (no allowance): a wait that returned `Ok` ended after an opener of a
//!   round it could have waited for (one current when it began, or armed since) was sent.
//! - For a waiter whose round is known: the round current when it began, with no next
//!   round armed and its key alive within [`LOOK`] (plus the waiter's hiccups) of its
//!   start, where the wait makes its first look:
//!   - `latch-late`: its round opened (one opener) before its own deadline, and it was not
//!     told (`Ok`) within [`BOUND`] of the opener's answer (or of its start), plus its
//!     hiccups; or it returned `Ok` before the opener was sent (`latch-early`).
//!   - `latch-expired`: its round never opened (no count-down reached 0: abandoned, or its
//!     counter killed) and outlived its deadline, and it was not told `LatchExpired`
//!     within [`BOUND`] of the round's end (or was told before the round could end).
//!   - `latch-wrong-round`: its round never opened, yet it returned `Ok` (woken by another
//!     round's opening).
//!
//! The rounds live on one server that no fault touches (`Primitive::runs_in`); a waiter
//! whose own client was stopped is covered by its hiccups.

use std::collections::{BTreeMap, HashMap};

use super::liveness::THRESHOLD;
use super::{Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::{Event, LatchArm, LatchCount, LatchWait, WaitOutcome};

const MS: Nanos = 1_000_000;

/// How long after its start a wait is taken to make its first look (a subscription on
/// the shared connection and one script), plus its client's hiccups.
pub const LOOK: Nanos = 50 * MS;

/// How long after its round opened or expired a waiter may still wait: the allowance of
/// rule `liveness` (a message's delivery and a look on a loaded 2-core machine running
/// debug builds), plus the waiter's hiccups.
pub const BOUND: Nanos = THRESHOLD;

/// A round's TTL is judged by the server's clock (milliseconds) and the waiter's expiry
/// look by its own: the rounding between them.
const CLOCKS: Nanos = 5 * MS;

/// How long before a client was killed a count-down it never logged may have been sent
/// (the clients' command timeout).
const KILLED_IN_FLIGHT: Nanos = 1_000 * MS;

/// The latch workload's figures, for the summary line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatchStats {
    /// Rounds armed.
    pub rounds: u64,
    /// Rounds with an opener.
    pub opened: u64,
    /// Waits, and how many ended open, expired, timed out.
    pub waits: u64,
    /// Waits that returned `Ok`.
    pub woken: u64,
    /// Waits told `LatchExpired`.
    pub expired: u64,
    /// Waits whose round was known (judged by `latch-late`, `latch-expired`,
    /// `latch-wrong-round`).
    pub judged: u64,
    /// Of the judged waiters woken, the largest delay from the opener's answer to the
    /// waiter's return, in ms.
    pub wake_max_ms: f64,
}

struct Round<'a> {
    arm: &'a LatchArm,
    id: u64,
    ttl: Nanos,
    /// The next round's arm.
    next: Option<&'a LatchArm>,
}

impl Round<'_> {
    /// Whether a count-down may have counted this round.
    fn may_hold(&self, c: &LatchCount) -> bool {
        c.t_reply > self.arm.t_sent && self.next.is_none_or(|n| c.t_sent < n.t_reply)
    }

    /// Whether a count-down certainly counted this round (if it counted at all).
    fn holds(&self, c: &LatchCount) -> bool {
        c.t_sent >= self.arm.t_reply && self.next.is_none_or(|n| c.t_reply <= n.t_sent)
    }
}

fn opener(c: &LatchCount) -> bool {
    c.left == Some(0)
}

/// A count-down whose outcome is unknown (an error: it may have counted).
fn unknown(c: &LatchCount) -> bool {
    !matches!(c.outcome.as_str(), "counted" | "below_zero" | "not_found")
}

/// Whether any latch event is in the history.
pub(super) fn present(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::LatchArm(_) | Event::LatchWait(_)))
}

/// Whether a wait ended open after `t` (locking resumed after the faults).
pub(super) fn opened_after(events: &[Event], t: Nanos) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::LatchWait(w) if w.outcome == WaitOutcome::Open && w.t_end > t))
}

/// Checks every latch of the history.
pub(super) fn check(events: &[Event], report: &mut Report) {
    if !present(events) {
        return;
    }
    let mut arms: BTreeMap<&str, Vec<&LatchArm>> = BTreeMap::new();
    let mut counts: HashMap<&str, Vec<&LatchCount>> = HashMap::new();
    let mut waits: Vec<&LatchWait> = Vec::new();
    let mut hiccups: HashMap<u32, Vec<(Nanos, Nanos)>> = HashMap::new();
    for event in events {
        match event {
            Event::LatchArm(a) if a.round.is_some() => {
                arms.entry(a.name.as_str()).or_default().push(a);
            }
            Event::LatchCount(c) => counts.entry(c.name.as_str()).or_default().push(c),
            Event::LatchWait(w) => waits.push(w),
            Event::Hiccup {
                client,
                t_start,
                t_end,
            } => hiccups.entry(*client).or_default().push((*t_start, *t_end)),
            _ => {}
        }
    }
    // A client killed by `kill-counter` may have counted down without living to log it:
    // each kill stands for a count-down of unknown outcome on every name, sent up to a
    // command timeout before it, and after the last count-down the client logged (its
    // one counting task logs each before it sends the next).
    let mut killed: Vec<LatchCount> = Vec::new();
    for event in events {
        if let Event::Fault {
            kind,
            target,
            t_start,
            t_end,
        } = event
        {
            if kind != "kill-counter" {
                continue;
            }
            let client = target
                .strip_prefix("client")
                .and_then(|c| c.parse().ok())
                .unwrap_or(u32::MAX);
            let logged = counts
                .values()
                .flatten()
                .filter(|c| c.client == client && c.t_reply <= *t_start)
                .map(|c| c.t_reply)
                .max()
                .unwrap_or(0);
            for name in arms.keys() {
                killed.push(LatchCount {
                    client,
                    name: (*name).to_owned(),
                    t_sent: t_start.saturating_sub(KILLED_IN_FLIGHT).max(logged),
                    t_reply: *t_end,
                    round_seen: None,
                    left: None,
                    outcome: "killed".to_owned(),
                });
            }
        }
    }
    for c in &killed {
        if let Some(list) = counts.get_mut(c.name.as_str()) {
            list.push(c);
        } else if let Some((name, _)) = arms.get_key_value(c.name.as_str()) {
            counts.insert(name, vec![c]);
        }
    }
    let mut stats = LatchStats::default();
    let mut rounds: HashMap<&str, Vec<Round<'_>>> = HashMap::new();
    for (name, list) in &mut arms {
        list.sort_by_key(|a| a.round);
        let mut out = Vec::new();
        for (i, arm) in list.iter().enumerate() {
            out.push(Round {
                arm,
                id: arm.round.unwrap_or(0),
                ttl: arm.ttl_ms.saturating_mul(MS),
                next: list.get(i + 1).copied(),
            });
        }
        rounds.insert(name, out);
    }
    let none = Vec::new();
    for (name, list) in &rounds {
        let counts = counts.get(name).unwrap_or(&none);
        stats.rounds += list.len() as u64;
        for r in list {
            rounds_rules(name, r, counts, &mut stats, report);
        }
    }
    for w in waits {
        stats.waits += 1;
        match w.outcome {
            WaitOutcome::Open => stats.woken += 1,
            WaitOutcome::Expired => stats.expired += 1,
            _ => {}
        }
        let list = rounds.get(w.name.as_str()).map_or(&[][..], Vec::as_slice);
        let counts = counts.get(w.name.as_str()).unwrap_or(&none);
        let hiccup = hiccups
            .get(&w.client)
            .map_or(0, |h| overlap(h, w.t_start, w.t_end));
        waiter_rules(w, list, counts, hiccup, &mut stats, report);
    }
    report.latch = Some(stats);
}

/// How much of `[start, end]` the spans cover.
fn overlap(spans: &[(Nanos, Nanos)], start: Nanos, end: Nanos) -> Nanos {
    spans
        .iter()
        .map(|&(s, e)| e.min(end).saturating_sub(s.max(start)))
        .sum()
}

fn violation(report: &mut Report, rule: &'static str, name: &str, detail: String) {
    report.violations.push(Violation {
        rule,
        name: name.to_owned(),
        detail,
    });
}

/// `latch-once` and `latch-rearm` for one round.
fn rounds_rules(
    name: &str,
    r: &Round<'_>,
    counts: &[&LatchCount],
    stats: &mut LatchStats,
    report: &mut Report,
) {
    let certain: Vec<&LatchCount> = counts
        .iter()
        .copied()
        .filter(|c| r.holds(c) && c.left.is_some())
        .collect();
    let possible_openers: Vec<&LatchCount> = counts
        .iter()
        .copied()
        .filter(|c| r.may_hold(c) && (opener(c) || unknown(c)))
        .collect();
    if possible_openers.iter().any(|c| opener(c)) {
        stats.opened += 1;
    }
    let openers: Vec<&&LatchCount> = certain.iter().filter(|c| opener(c)).collect();
    if openers.len() > 1 {
        let at: Vec<String> = openers
            .iter()
            .map(|c| format!("client {} at {}..{}", c.client, c.t_sent, c.t_reply))
            .collect();
        violation(
            report,
            "latch-once",
            name,
            format!(
                "round {} (armed {}..{} with a count of {}) was opened {} times: {}",
                r.id,
                r.arm.t_sent,
                r.arm.t_reply,
                r.arm.count,
                openers.len(),
                at.join(", ")
            ),
        );
    }
    let mut seen: HashMap<u64, &LatchCount> = HashMap::new();
    for c in &certain {
        let left = c.left.unwrap_or(0);
        if left >= r.arm.count {
            violation(
                report,
                "latch-once",
                name,
                format!(
                    "a count-down of round {} (count {}) by client {} at {}..{} left {left}",
                    r.id, r.arm.count, c.client, c.t_sent, c.t_reply
                ),
            );
        }
        if let Some(other) = seen.insert(left, c) {
            violation(
                report,
                "latch-once",
                name,
                format!(
                    "two count-downs of round {} left {left}: client {} at {}..{} and client {} at {}..{}",
                    r.id, other.client, other.t_sent, other.t_reply, c.client, c.t_sent, c.t_reply
                ),
            );
        }
    }
    for o in &openers {
        let before = counts
            .iter()
            .filter(|c| r.may_hold(c) && (c.left.is_some() || unknown(c)) && c.t_sent < o.t_reply)
            .count() as u64;
        if before < r.arm.count {
            violation(
                report,
                "latch-once",
                name,
                format!(
                    "round {} (count {}) was opened by client {}'s count-down at {}..{} after only {before} count-downs could have counted it",
                    r.id, r.arm.count, o.client, o.t_sent, o.t_reply
                ),
            );
        }
    }
    let Some(next) = r.next else {
        return;
    };
    if next.t_reply <= r.arm.t_sent {
        violation(
            report,
            "latch-once",
            name,
            format!(
                "round {} was armed at {}..{}, after round {} had been armed at {}..{}: round ids must increase",
                next.round.unwrap_or(0), next.t_sent, next.t_reply, r.id, r.arm.t_sent, r.arm.t_reply
            ),
        );
        return;
    }
    let could_open = possible_openers.iter().any(|c| c.t_sent < next.t_reply);
    let could_expire = next.t_reply + CLOCKS >= r.arm.t_sent + r.ttl;
    if !could_open && !could_expire {
        violation(
            report,
            "latch-rearm",
            name,
            format!(
                "round {} was armed at {}..{} while round {} (armed {}..{}, count {}, TTL {}) still counted: no count-down had reached 0 and its TTL was not over",
                next.round.unwrap_or(0),
                next.t_sent,
                next.t_reply,
                r.id,
                r.arm.t_sent,
                r.arm.t_reply,
                r.arm.count,
                ms(r.ttl)
            ),
        );
    }
}

/// `latch-early`, and for a waiter whose round is known `latch-late`, `latch-expired` and
/// `latch-wrong-round`.
fn waiter_rules(
    w: &LatchWait,
    rounds: &[Round<'_>],
    counts: &[&LatchCount],
    hiccup: Nanos,
    stats: &mut LatchStats,
    report: &mut Report,
) {
    let who = format!(
        "client {}'s wait ({}..{}, timeout {} ms, {:?})",
        w.client, w.t_start, w.t_end, w.timeout_ms, w.outcome
    );
    // The round current when the wait began, or a later one.
    let first = rounds.iter().rposition(|r| r.arm.t_reply <= w.t_start);
    if w.outcome == WaitOutcome::Open {
        let since = first.map_or(0, |i| rounds[i].arm.t_sent);
        let opened = counts
            .iter()
            .any(|c| (opener(c) || unknown(c)) && c.t_sent < w.t_end && c.t_reply > since);
        if !opened {
            violation(
                report,
                "latch-early",
                &w.name,
                format!("{who} returned Ok, but no count-down that could open a round it waited for (current at its start, or armed since) had been sent by then"),
            );
            return;
        }
    }
    let Some(i) = first else {
        return;
    };
    let r = &rounds[i];
    let look = (w.t_start + LOOK + hiccup).min(w.t_end);
    if r.next.is_some_and(|n| n.t_sent < look) || r.arm.t_sent + r.ttl <= look + CLOCKS {
        return; // its first look may have found another round, or none
    }
    let openers: Vec<&LatchCount> = counts
        .iter()
        .copied()
        .filter(|c| r.may_hold(c) && (opener(c) || unknown(c)))
        .collect();
    let deadline = w.t_start + w.timeout_ms.saturating_mul(MS);
    match openers.as_slice() {
        [] => {
            // Never opened: it expires at its TTL, by the server's clock.
            stats.judged += 1;
            let ends = r.arm.t_sent + r.ttl;
            let ended = r.arm.t_reply + r.ttl;
            if w.outcome == WaitOutcome::Open {
                violation(
                    report,
                    "latch-wrong-round",
                    &w.name,
                    format!("{who} returned Ok, but its round {} (armed {}..{}) never opened (no count-down reached 0 before round {:?} was armed)", r.id, r.arm.t_sent, r.arm.t_reply, r.next.map(|n| n.round)),
                );
                return;
            }
            if w.outcome == WaitOutcome::Expired && w.t_end + CLOCKS < ends {
                violation(
                    report,
                    "latch-expired",
                    &w.name,
                    format!("{who} was told its round {} expired, before the round's TTL could be over ({})", r.id, ends),
                );
                return;
            }
            if deadline <= ended + BOUND + hiccup || w.outcome == WaitOutcome::Error {
                return; // its own deadline came first, or about then
            }
            let by = w.t_start.max(ended) + BOUND + hiccup;
            if w.outcome != WaitOutcome::Expired || w.t_end > by {
                violation(
                    report,
                    "latch-expired",
                    &w.name,
                    format!("{who}: its round {} (armed {}..{}, count {}, TTL {}) never opened and expired by {ended}; the wait must be told LatchExpired by {by} (allowance {}, hiccups {})", r.id, r.arm.t_sent, r.arm.t_reply, r.arm.count, ms(r.ttl), ms(BOUND), ms(hiccup)),
                );
            }
        }
        [o] if opener(o) => {
            stats.judged += 1;
            if w.outcome == WaitOutcome::Open && w.t_end < o.t_sent {
                violation(
                    report,
                    "latch-early",
                    &w.name,
                    format!("{who} returned Ok before its round {} was opened (client {}'s count-down to 0 sent at {})", r.id, o.client, o.t_sent),
                );
                return;
            }
            if w.outcome == WaitOutcome::Open {
                let delay = w.t_end.saturating_sub(o.t_reply.max(w.t_start));
                stats.wake_max_ms = stats.wake_max_ms.max(delay as f64 / 1e6);
            }
            if deadline <= o.t_reply + BOUND + hiccup || w.outcome == WaitOutcome::Error {
                return;
            }
            let by = w.t_start.max(o.t_reply) + BOUND + hiccup;
            if w.outcome != WaitOutcome::Open || w.t_end > by {
                violation(
                    report,
                    "latch-late",
                    &w.name,
                    format!("{who}: its round {} (armed {}..{}) was opened by client {}'s count-down answered at {}; the wait must return Ok by {by} (allowance {}, hiccups {})", r.id, r.arm.t_sent, r.arm.t_reply, o.client, o.t_reply, ms(BOUND), ms(hiccup)),
                );
            }
        }
        _ => {} // several candidates, or an unknown one: not judged
    }
}
