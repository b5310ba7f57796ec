//! Rule `busy-delayed`: while a replica is stopped (the `pause-replica` fault), an answer
//! that needs no replica is not held up by it. A request that does not wait (`wait(0)`)
//! and finds the lock busy gets its `Busy` within [`BUSY_BOUND`] (not counting time its
//! client did not run); it never ends with a connection error (a command timed out behind
//! a grant's `WAIT` for the stopped replica). Only a grant waits for replicas (and is
//! refused, `NotReplicated`, when they do not answer).

use std::collections::HashMap;

use super::{Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::{Event, FailKind};

/// How long a busy answer may take during a replica's stall: one round trip on the local
/// machine, and scheduling on a loaded two-core machine (debug builds included): half the
/// default sync timeout. A busy answer queued behind a grant's `WAIT` takes up to the sync
/// timeout (500 ms by default), or the command timeout.
pub(super) const BUSY_BOUND: Nanos = 250_000_000;

/// The fault's name in the history.
const FAULT: &str = "pause-replica";

/// Checks every no-wait request that overlapped a replica's stall.
pub(super) fn check(events: &[Event], report: &mut Report) {
    let stalls: Vec<(Nanos, Nanos)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fault {
                kind,
                t_start,
                t_end,
                ..
            } if kind == FAULT => Some((*t_start, *t_end)),
            _ => None,
        })
        .collect();
    if stalls.is_empty() {
        return;
    }
    let mut hiccups: HashMap<u32, Vec<(Nanos, Nanos)>> = HashMap::new();
    for event in events {
        if let Event::Hiccup {
            client,
            t_start,
            t_end,
        } = event
        {
            hiccups.entry(*client).or_default().push((*t_start, *t_end));
        }
    }
    for event in events {
        let Event::AcquireFailed {
            client,
            name,
            t_start,
            t_end,
            kind,
            wait_ms: Some(0),
            message,
            ..
        } = event
        else {
            continue;
        };
        // Wholly inside a stall: a request that began before it or ended after it may
        // have met other trouble (the fault's own start and end).
        if !stalls
            .iter()
            .any(|&(start, end)| start <= *t_start && *t_end <= end)
        {
            continue;
        }
        let stalled: Nanos = hiccups.get(client).map_or(0, |list| {
            list.iter()
                .map(|&(s, e)| e.min(*t_end).saturating_sub(s.max(*t_start)))
                .sum()
        });
        let took = t_end.saturating_sub(*t_start).saturating_sub(stalled);
        let detail = match kind {
            FailKind::Contention if took > BUSY_BOUND => format!(
                "client {client}'s try at {t_start} was answered busy {} later (client not running for {} of it) while a replica was stopped: more than {}",
                ms(took + stalled),
                ms(stalled),
                ms(BUSY_BOUND)
            ),
            FailKind::Connection => format!(
                "client {client}'s try at {t_start} failed with a connection error {} later while only a replica was stopped: {message}",
                ms(took + stalled)
            ),
            _ => continue,
        };
        report.violations.push(Violation {
            rule: "busy-delayed",
            name: name.clone(),
            detail,
        });
    }
}
