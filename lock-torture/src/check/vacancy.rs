//! Rule `vacancy-unseen`: a leader that stops renewing with nobody to take over is seen to
//! be gone. In the election workload every client leads an election of its own
//! (`lonely-<client>`) that no other client campaigns for, and its partner client
//! (`client ^ 1`) observes it. When the `pause` fault stops a client for two TTLs or more,
//! its lease runs out during the pause; an observer that saw it elected and was not
//! stopped itself must be told `Expired` (or of a later term) within the lease plus
//! [`ALLOWANCE`] of the pause's start.

use std::collections::HashMap;

use super::{Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::Event;

/// After the lease: the library's slack (100 ms) and scheduling on a loaded machine.
pub(super) const ALLOWANCE: Nanos = 1_000_000_000;

/// A change an observer was told of: (when, term, elected).
type Told = (Nanos, u64, bool);

/// Checks every pause of a client against the observers of its own election.
pub(super) fn check(events: &[Event], report: &mut Report) {
    let ttl = events
        .iter()
        .find_map(|e| match e {
            Event::Acquired(a) => Some(a.ttl_ms.saturating_mul(1_000_000)),
            _ => None,
        })
        .unwrap_or(200_000_000);
    let pauses: Vec<(u32, Nanos, Nanos)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fault {
                kind,
                target,
                t_start,
                t_end,
            } if kind == "pause" => target
                .strip_prefix("client")
                .and_then(|n| n.parse().ok())
                .map(|c| (c, *t_start, *t_end)),
            _ => None,
        })
        .collect();
    // What each client's observers were told of each election: (when, term, elected).
    let mut seen: HashMap<(u32, &str), Vec<Told>> = HashMap::new();
    for event in events {
        if let Event::LeaderSeen {
            client,
            name,
            t,
            term,
            elected,
            ..
        } = event
        {
            seen.entry((*client, name.as_str()))
                .or_default()
                .push((*t, *term, *elected));
        }
    }
    for list in seen.values_mut() {
        list.sort_unstable();
    }
    for &(leader, start, end) in &pauses {
        // The lease runs out during the pause only if the pause outlasts it.
        if end.saturating_sub(start) <= ttl + ALLOWANCE / 4 {
            continue;
        }
        let observer = leader ^ 1;
        let name = crate::names::lonely_election(leader);
        let Some(list) = seen.get(&(observer, name.as_str())) else {
            continue;
        };
        let deadline = start + ttl + ALLOWANCE;
        // The observer itself stopped meanwhile: nothing to judge.
        if pauses
            .iter()
            .any(|&(c, s, e)| c == observer && s < deadline && start < e)
        {
            continue;
        }
        // It believed someone led when the pause began.
        let Some(&(_, term, true)) = list.iter().rev().find(|&&(t, _, _)| t <= start) else {
            continue;
        };
        let told = list.iter().any(|&(t, seen_term, elected)| {
            t > start && t <= deadline && (!elected || seen_term > term)
        });
        if !told {
            report.violations.push(Violation {
                rule: "vacancy-unseen",
                name,
                detail: format!(
                    "client {leader}, alone in its election, was stopped at {start} for {}; its term {term} ran out unrenewed, and client {observer}'s observer was not told by {} (lease {} plus {})",
                    ms(end - start),
                    deadline,
                    ms(ttl),
                    ms(ALLOWANCE)
                ),
            });
        }
    }
}
