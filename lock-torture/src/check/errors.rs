//! Rule `unexplained-error`: an acquire failed with a Redis error reply (or an error the
//! harness cannot classify) while no fault was under way.
//!
//! The other rules judge what holders did; a request that fails breaks none of them. So a
//! library that cannot take a lock at all (every acquisition of a name refused with
//! `CROSSSLOT`, say, because its keys fall into different Cluster slots) passed every run
//! with `acquire_errors=redis:222`. Faults explain errors (a server killed, a failover, a
//! foreign value): a failure of kind `redis` or `other` is a violation unless it
//! came back during a fault, or within [`SETTLE`] after one ended. Connection errors,
//! timeouts, missing quorums and refused replica acknowledgements are left alone: a loaded
//! machine or a slow network explains them. A Cluster's slot migration (`reshard`) explains
//! nothing: the library must retry through it.

use super::{Report, Violation};
use crate::clock::Nanos;
use crate::event::{Event, FailKind};

/// How long after a fault ends its errors may still come back (a Cluster's slots settle,
/// a Sentinel's clients move to the new master).
pub const SETTLE: Nanos = 5_000_000_000;

/// Checks every failed acquire against the run's fault windows.
pub(super) fn check(events: &[Event], report: &mut Report) {
    let mut windows: Vec<(Nanos, Nanos)> = Vec::new();
    for event in events {
        match event {
            // A slot's migration explains no error: the library retries through it.
            Event::Fault { kind, .. } if kind == super::liveness::RESHARD => {}
            Event::Fault { t_start, t_end, .. } | Event::Down { t_start, t_end, .. } => {
                windows.push((*t_start, *t_end));
            }
            Event::Failover(failover) => windows.push((failover.t_start, failover.t_end)),
            Event::Foreign { t_start, t_end, .. } => windows.push((*t_start, *t_end)),
            _ => {}
        }
    }
    let explained = |start: Nanos, end: Nanos| {
        windows
            .iter()
            .any(|&(from, to)| start <= to.saturating_add(SETTLE) && from <= end)
    };
    for event in events {
        let Event::AcquireFailed {
            client,
            name,
            t_start,
            t_end,
            kind,
            message,
            ..
        } = event
        else {
            continue;
        };
        if !matches!(kind, FailKind::Redis | FailKind::Other) || explained(*t_start, *t_end) {
            continue;
        }
        report.violations.push(Violation {
            rule: "unexplained-error",
            name: name.clone(),
            detail: format!(
                "client {client}'s request for `{name}` ({t_start}..{t_end}) failed with a {kind:?} error while no fault was under way: {message}"
            ),
        });
    }
}
