//! Rule `nested-on-lost`: a nested `#[redis_locked]` call never runs its body on a lease
//! that is no longer trusted.
//!
//! A nested call for the lock its enclosing annotated function holds does not acquire
//! again (reentrancy); the library promises that it first makes sure the enclosing lease is
//! still held, and returns `Err(Lost)` without running the body otherwise. If the call began
//! after the enclosing lease's trust had ended (its validity ran out, or its holder had been
//! told it was lost), another client may hold the lock by then: a body that ran anyway ran
//! beside it. The check uses the moment of the call, not of the body: a lease that was
//! still valid when the library looked may run out while the body starts, as any critical
//! section may outlive its lease.

use std::collections::{BTreeMap, HashMap};

use super::{Acq, Down, Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::Event;

/// Checks every nested call, and counts how many ran and how many were refused.
pub(super) fn check(
    events: &[Event],
    index: &HashMap<String, usize>,
    acqs: &[Acq],
    downs: &[Down],
    report: &mut Report,
) {
    for event in events {
        let Event::Nested {
            id,
            t_call,
            t_body,
            outcome,
            sibling,
            ..
        } = event
        else {
            continue;
        };
        if sibling.as_deref() == Some(SPAWNED) {
            spawned(id, *t_body, index, acqs, downs, report);
            continue;
        }
        if outcome == "lost" {
            report.nested_refused += 1;
        }
        let Some(t_body) = t_body else {
            continue;
        };
        report.nested_ran += 1;
        let Some(acq) = index.get(id).map(|&i| &acqs[i]) else {
            continue;
        };
        let trusted_until = acq.trusted_until();
        if *t_call > trusted_until {
            report.violations.push(Violation {
                rule: "nested-on-lost",
                name: acq.a.name.clone(),
                detail: format!(
                    "{}'s nested call began at {t_call}, {} after its lease stopped being trusted, and its body ran at {t_body}",
                    acq.a.id,
                    ms(t_call - trusted_until)
                ),
            });
        }
    }
}

/// How a sibling run in a task of its own is labelled: not a nested call (a spawned task
/// does not inherit the enclosing lease) but a request of its own for the same lock.
const SPAWNED: &str = "spawned";

/// Rule `spawned-beside-holder`: a sibling spawned from inside a `#[redis_locked]` body is
/// another task, so it must be refused while the enclosing lease is trusted; once that
/// lease has ended it may take the lock anew (its body then runs under a lease of its own,
/// not on the enclosing one, which is why `nested-on-lost` does not judge it). A server
/// that restarted empty between the enclosing lease's attempt and the sibling's body forgot
/// that lease, so the sibling's grant beside it is the restart's, as two holders are for
/// `overlap`: counted as expected (`spawned-beside-holder/restart`), not as a violation.
fn spawned(
    id: &str,
    t_body: Option<Nanos>,
    index: &HashMap<String, usize>,
    acqs: &[Acq],
    downs: &[Down],
    report: &mut Report,
) {
    let (Some(t_body), Some(acq)) = (t_body, index.get(id).map(|&i| &acqs[i])) else {
        return;
    };
    let trusted_until = acq.trusted_until();
    if t_body < trusted_until {
        let restart = downs
            .iter()
            .any(|d| acq.a.attempt_start <= d.start && d.start <= t_body && d.end < trusted_until);
        if restart {
            report.expected_restart_overlaps += 1;
            report.expect("spawned-beside-holder", "restart");
            return;
        }
        report.violations.push(Violation {
            rule: "spawned-beside-holder",
            name: acq.a.name.clone(),
            detail: format!(
                "a sibling spawned inside {}'s locked body (another task) ran its body at {t_body}, {} before the enclosing lease stopped being trusted",
                acq.a.id,
                ms(trusted_until - t_body)
            ),
        });
    }
}

/// Rule `sibling-overlap`: concurrent sibling calls of one key inside a `#[redis_locked]`
/// body (`join!`, `select!`, a spawned task) may reuse the enclosing lease one at a time,
/// but two of their bodies never run at once: the attribute promises that no two bodies of
/// one key overlap.
pub(super) fn check_siblings(
    events: &[Event],
    index: &HashMap<String, usize>,
    acqs: &[Acq],
    report: &mut Report,
) {
    let mut bodies: BTreeMap<&str, Vec<(Nanos, Nanos, &str)>> = BTreeMap::new();
    for event in events {
        if let Event::Nested {
            id,
            t_body: Some(start),
            t_body_end,
            t_return,
            sibling: Some(how),
            ..
        } = event
        {
            bodies.entry(id.as_str()).or_default().push((
                *start,
                t_body_end.unwrap_or(*t_return),
                how.as_str(),
            ));
        }
    }
    for (id, mut list) in bodies {
        list.sort_unstable();
        for pair in list.windows(2) {
            let ((s1, e1, how), (s2, _, _)) = (pair[0], pair[1]);
            if s2 < e1 {
                let name = index.get(id).map_or(id, |&i| acqs[i].a.name.as_str());
                report.violations.push(Violation {
                    rule: "sibling-overlap",
                    name: name.to_owned(),
                    detail: format!(
                        "two sibling calls ({how}) of one key inside {id}'s locked body ran at once: one from {s1} to {e1}, the other from {s2} ({} before the first ended)",
                        ms(e1 - s2)
                    ),
                });
            }
        }
    }
}
