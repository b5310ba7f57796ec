//! Rules of the weighted semaphore (`--primitive weighted`): permits taken by weight
//! (`acquire_many`) while the capacity is changed in use (`set_capacity`).
//!
//! - `weight`: the weights of the permits trusted at a grant, the grant's own included,
//!   add up to no more than the capacity in force when it was granted. The grant happened
//!   on the server between the start of its successful attempt and its hand-over, and
//!   every permit trusted at the hand-over was held then too (the last grant among them
//!   lies in that span), so the bound is the largest capacity that may have been in force
//!   at some moment of it: the one set last before it, and any set (or possibly set, when
//!   the call's answer was lost) during it. Before the first change, the number every
//!   client asks for ([`WEIGHTED_CAPACITY`]).
//!   Holders kept over a lowering count: nothing may be granted until they fit under it.
//! - `revoked`: a holder trusted while the capacity was lowered keeps its permit: it is
//!   not told it lost it (`lost()`, `is_lost()`, an extension) before the validity it was
//!   told, and its release sent within that validity does not find it gone.
//! - `weight-starved`: a large request ([`LARGE_WEIGHT`]) that waited, granted or timed
//!   out, saw no more than [`PASSED_OVER_PER_CLIENT`] grants per client of the run to
//!   requests made after it began waiting: the line is FIFO by weight, and a request that
//!   does not fit stops the smaller ones behind it. Not judged under a fault or within a
//!   claim window and two TTLs after it (as `liveness`).

use std::collections::HashMap;

use super::liveness::CLAIM_WINDOW;
use super::permits::sweep;
use super::starvation::PASSED_OVER_PER_CLIENT;
use super::{Acq, Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::{Event, FailKind, HoldKind, ReleaseOutcome};
use crate::primitive::{LARGE_WEIGHT, WEIGHTED_CAPACITY};

const MS: Nanos = 1_000_000;

/// The weighted workload's figures, for the summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WeightStats {
    /// The most weight of one name trusted at once.
    pub peak_weight: u64,
    /// Capacity changes that were applied (`ok`).
    pub capacity_sets: u64,
    /// Of them, lowerings under holders.
    pub lowered_under_holders: u64,
    /// Permits held across a lowering (judged by `revoked`).
    pub held_across_lowering: u64,
    /// Large requests granted.
    pub large_granted: u64,
    /// The longest wait of a granted large request, in ms.
    pub large_wait_max_ms: f64,
    /// The most grants to later requests a large request saw while it waited.
    pub large_passed_max: u64,
}

/// A change of capacity, in the order the changer made them.
#[derive(Debug, Clone, Copy)]
struct Change {
    sent: Nanos,
    reply: Nanos,
    permits: u64,
    /// Applied for sure (`ok`); otherwise it may have been (an error's answer lost).
    known: bool,
    before: Option<u64>,
}

/// Every name's capacity changes.
pub(super) struct Capacities {
    by_name: HashMap<String, Vec<Change>>,
}

impl Capacities {
    pub(super) fn new(events: &[Event]) -> Capacities {
        let mut by_name: HashMap<String, Vec<Change>> = HashMap::new();
        for event in events {
            if let Event::CapacitySet(c) = event {
                if c.outcome == "refused" {
                    continue; // LockError::Config: nothing changed
                }
                by_name.entry(c.name.clone()).or_default().push(Change {
                    sent: c.t_sent,
                    reply: c.t_reply,
                    permits: c.permits,
                    known: c.outcome == "ok",
                    before: c.before,
                });
            }
        }
        for list in by_name.values_mut() {
            list.sort_by_key(|c| c.sent);
        }
        Capacities { by_name }
    }

    /// The largest capacity that may have been in force at some moment of `[from, to]`:
    /// `initial` until the first change applied.
    fn most(&self, name: &str, initial: u64, from: Nanos, to: Nanos) -> u64 {
        let Some(list) = self.by_name.get(name) else {
            return initial;
        };
        let mut best = list
            .iter()
            .rev()
            .find(|c| c.known && c.reply <= from)
            .map_or(initial, |c| c.permits);
        for (i, c) in list.iter().enumerate() {
            if c.sent > to {
                break;
            }
            let during = c.reply >= from;
            // A call whose answer was lost may have been applied at any moment until a
            // later change is known to have replaced it.
            let maybe = !c.known
                && list[i + 1..]
                    .iter()
                    .find(|n| n.known && n.sent > c.reply)
                    .is_none_or(|n| n.reply >= from);
            if during || maybe {
                best = best.max(c.permits);
            }
        }
        best
    }
}

/// Rule `weight` for one name's weighted permits (sorted by grant).
pub(super) fn check_weights(name: &str, list: &[&Acq], caps: &Capacities, report: &mut Report) {
    sweep(list, |next, active| {
        let weight = next.a.weight.unwrap_or(1);
        let held: u64 = active.iter().map(|a| a.a.weight.unwrap_or(1)).sum();
        let stats = report.weights.get_or_insert_with(WeightStats::default);
        stats.peak_weight = stats.peak_weight.max(held + weight);
        let initial = next.a.permits.unwrap_or(WEIGHTED_CAPACITY);
        let bound = caps.most(name, initial, next.a.attempt_start, next.a.acquired);
        if held + weight <= bound {
            return;
        }
        let ids: Vec<String> = active
            .iter()
            .map(|a| {
                format!(
                    "{} ({} until {})",
                    a.a.id,
                    a.a.weight.unwrap_or(1),
                    a.trusted_until()
                )
            })
            .collect();
        report.violations.push(Violation {
            rule: "weight",
            name: name.to_owned(),
            detail: format!(
                "{} asking for {weight} was granted (attempt from {} to {}) while {held} permits were trusted, above the capacity of at most {bound} in force then: {}",
                next.a.id,
                next.a.attempt_start,
                next.a.acquired,
                ids.join(", "),
            ),
        });
    });
}

/// Rules `revoked` and `weight-starved`, and the figures.
pub(super) fn check(events: &[Event], acqs: &[Acq], report: &mut Report) {
    let weighted: Vec<&Acq> = acqs.iter().filter(|a| a.a.weight.is_some()).collect();
    if weighted.is_empty() {
        return;
    }
    let caps = Capacities::new(events);
    let mut stats = report.weights.unwrap_or_default();
    // Lowerings: applied changes to fewer permits than were stored.
    let mut lowerings: Vec<(&str, Nanos, Nanos, u64, u64)> = Vec::new();
    for (name, list) in &caps.by_name {
        for c in list.iter().filter(|c| c.known) {
            stats.capacity_sets += 1;
            if let Some(before) = c.before.filter(|&b| b > c.permits) {
                lowerings.push((name.as_str(), c.sent, c.reply, before, c.permits));
            }
        }
    }
    let mut under = std::collections::HashSet::new();
    for acq in &weighted {
        let Some(&(_, sent, reply, before, after)) =
            lowerings.iter().find(|(n, _, reply, _, _)| {
                *n == acq.a.name && acq.a.acquired < *reply && *reply < acq.trusted_until()
            })
        else {
            continue;
        };
        under.insert((acq.a.name.as_str(), sent));
        stats.held_across_lowering += 1;
        let early = |t: Nanos| t + MS < acq.claim_end;
        let told = acq.lost_at.filter(|&t| early(t));
        let gone = acq
            .release
            .filter(|&(t, outcome, _)| outcome == ReleaseOutcome::NotHeld && early(t));
        if told.is_none() && gone.is_none() {
            continue;
        }
        report.violations.push(Violation {
            rule: "revoked",
            name: acq.a.name.clone(),
            detail: format!(
                "{} (weight {}) held from {} and valid until {} was {} after the capacity was lowered from {before} to {after} ({sent}..{reply}): lowering must take no permit",
                acq.a.id,
                acq.a.weight.unwrap_or(1),
                acq.a.acquired,
                acq.claim_end,
                match (told, gone) {
                    (Some(t), _) => format!("told it was lost at {t}"),
                    (None, Some((t, _, _))) => format!("found gone by its release at {t}"),
                    (None, None) => String::new(),
                },
            ),
        });
    }
    stats.lowered_under_holders = under.len() as u64;
    starved(events, &weighted, &mut stats, report);
    report.weights = Some(stats);
}

/// Rule `weight-starved`.
fn starved(events: &[Event], weighted: &[&Acq], stats: &mut WeightStats, report: &mut Report) {
    let ttl = weighted
        .iter()
        .map(|a| a.a.ttl_ms.saturating_mul(MS))
        .max()
        .unwrap_or(0);
    let margin = CLAIM_WINDOW + 2 * ttl;
    let mut clients = std::collections::HashSet::new();
    let mut faults: Vec<(Nanos, Nanos)> = Vec::new();
    let mut large: Vec<(String, u32, &str, Nanos, Nanos, bool)> = Vec::new();
    for event in events {
        match event {
            Event::Start { client, .. } => {
                clients.insert(*client);
            }
            Event::Fault { t_start, t_end, .. } | Event::Down { t_start, t_end, .. } => {
                faults.push((*t_start, t_end.saturating_add(margin)));
            }
            Event::AcquireFailed {
                client,
                name,
                t_start,
                t_end,
                kind: FailKind::Contention,
                wait_ms: Some(wait),
                hold: HoldKind::Permit,
                capacity: Some(c),
                ..
            } if *wait > 0 && c.weight == Some(LARGE_WEIGHT) => {
                large.push((
                    format!("client {client}'s request"),
                    *client,
                    name.as_str(),
                    *t_start,
                    *t_end,
                    false,
                ));
            }
            _ => {}
        }
    }
    for acq in weighted
        .iter()
        .filter(|a| a.a.weight == Some(LARGE_WEIGHT) && a.a.wait_ms.unwrap_or(0) > 0)
    {
        stats.large_granted += 1;
        let waited = acq.a.acquired.saturating_sub(acq.a.call_start);
        stats.large_wait_max_ms = stats.large_wait_max_ms.max(waited as f64 / 1e6);
        large.push((
            acq.a.id.clone(),
            acq.a.client,
            acq.a.name.as_str(),
            acq.a.call_start,
            acq.a.acquired,
            true,
        ));
    }
    let limit = PASSED_OVER_PER_CLIENT * clients.len().max(1) as u64;
    for (label, client, name, start, end, granted) in large {
        if faults.iter().any(|&(s, e)| s <= end && start <= e) {
            continue;
        }
        let passed: Vec<&Acq> = weighted
            .iter()
            .copied()
            .filter(|a| a.a.name == name && a.a.call_start > start && a.a.acquired < end)
            .collect();
        let n = passed.len() as u64;
        stats.large_passed_max = stats.large_passed_max.max(n);
        if n <= limit {
            continue;
        }
        report.violations.push(Violation {
            rule: "weight-starved",
            name: name.to_owned(),
            detail: format!(
                "{label} (client {client}) for {LARGE_WEIGHT} permits waited from {start} to {end} ({}, {}) while {n} requests made after it were granted (at most {limit}): {}",
                ms(end - start),
                if granted { "granted" } else { "timed out" },
                passed
                    .iter()
                    .take(6)
                    .map(|a| format!("{} ({})", a.a.id, a.a.weight.unwrap_or(1)))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        });
    }
}
