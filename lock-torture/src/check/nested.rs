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

use std::collections::HashMap;

use super::{Acq, Report, Violation};
use crate::clock::ms;
use crate::event::Event;

/// Checks every nested call, and counts how many ran and how many were refused.
pub(super) fn check(
    events: &[Event],
    index: &HashMap<String, usize>,
    acqs: &[Acq],
    report: &mut Report,
) {
    for event in events {
        let Event::Nested {
            id,
            t_call,
            t_body,
            outcome,
            ..
        } = event
        else {
            continue;
        };
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
