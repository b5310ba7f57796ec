//! The deadlock workload's rules (`--primitive deadlock`, [`crate::waits::Waited`]):
//!
//! - `deadlock-real`: every `Deadlock` the library reported was a real cycle in the
//!   history: each holder it names (but the last, the victim itself) had a wait of its own
//!   for the next name of the cycle, while holding its own, that was still going on at some
//!   point of the victim's wait; and the last name is one the victim held.
//! - `deadlock-persists`: no cycle of waits (each member holding the name the one before
//!   it waits for, every member's wait going on) lasted longer than [`DETECTION_BOUND`]:
//!   one member of a cycle is told, within the library's recheck period and a few round
//!   trips, however the cycle formed. (The workload stops no client: every member is
//!   alive.)

use std::collections::BTreeMap;

use super::{Report, Violation};
use crate::clock::{ms, nanos, Nanos};
use crate::event::Event;
use crate::waits::{client_of, Waited};

/// How long a cycle of waiters may last before one of them is told: the library checks a
/// recorded wait again every 200 ms; the rest is room for round trips and a loaded machine.
pub const DETECTION_BOUND: std::time::Duration = std::time::Duration::from_millis(1000);

/// Both rules, on the `Waited` events of the history.
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
    persisting(&waits, report);
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

/// Rule `deadlock-persists`: cycles of two and three waits of distinct clients whose waits
/// all went on together for longer than the bound.
fn persisting(waits: &[&Waited], report: &mut Report) {
    let bound: Nanos = nanos(DETECTION_BOUND);
    // Waits by the name whose holder they wait behind: a wait `w` waits behind `v` when `v`
    // holds what `w` wants.
    let mut holding: BTreeMap<&str, Vec<&Waited>> = BTreeMap::new();
    for w in waits {
        for name in &w.holding {
            holding.entry(name.as_str()).or_default().push(w);
        }
    }
    let overlap = |members: &[&Waited]| -> Nanos {
        let start = members.iter().map(|w| w.t_start).max().unwrap_or(0);
        let end = members.iter().map(|w| w.t_end).min().unwrap_or(0);
        end.saturating_sub(start)
    };
    let mut found = 0u64;
    for a in waits {
        for b in holding.get(a.wants.as_str()).into_iter().flatten() {
            if b.client == a.client {
                continue;
            }
            // Two: b waits for what a holds.
            if a.holding.contains(&b.wants) && a.client < b.client && overlap(&[a, b]) > bound {
                found += 1;
                report
                    .violations
                    .push(cycle_violation(&[a, b], overlap(&[a, b])));
            }
            // Three: b waits for what c holds, c for what a holds.
            for c in holding.get(b.wants.as_str()).into_iter().flatten() {
                let distinct = c.client != a.client && c.client != b.client;
                if distinct
                    && a.holding.contains(&c.wants)
                    && a.client < b.client.min(c.client)
                    && overlap(&[a, b, c]) > bound
                {
                    found += 1;
                    report
                        .violations
                        .push(cycle_violation(&[a, b, c], overlap(&[a, b, c])));
                }
            }
        }
        if found > 20 {
            break; // enough to tell
        }
    }
}

fn cycle_violation(members: &[&Waited], lasted: Nanos) -> Violation {
    let text: Vec<String> = members
        .iter()
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
    Violation {
        rule: "deadlock-persists",
        name: members[0].wants.clone(),
        detail: format!(
            "a cycle of waiters lasted {} ms, longer than {:?}: {}",
            lasted / 1_000_000,
            DETECTION_BOUND,
            text.join("; ")
        ),
    }
}
