//! Rule `revived-lease`: loss is final.
//!
//! Once a holder has been told its lease is lost (`lost()` fired, `is_lost()` said true, an
//! extension or a nested call answered `Lost`), nothing may make the lease valid again: an
//! extension or a renewal answered after that moment must be refused, and `is_lost()` must
//! keep saying true. A holder that was told to stop and is then told it may go on could
//! resume work beside the next holder. Judged purely by the order of one task's own
//! stamps, so no timing allowance is needed.

use std::collections::HashMap;

use super::{Acq, Report, Violation};
use crate::clock::ms;
use crate::event::Event;

/// Checks every look an acquisition's holder took after it was first told of the loss.
pub(super) fn check(
    events: &[Event],
    index: &HashMap<String, usize>,
    acqs: &[Acq],
    report: &mut Report,
) {
    for event in events {
        // (acquisition, when the holder looked, what it was told)
        let (id, t, what) = match event {
            Event::Extended {
                id,
                t_reply,
                valid_until: Some(_),
                ..
            } => (id, *t_reply, "an extension succeeded"),
            Event::Observed { id, t, .. } => (id, *t, "the lease reported validity left"),
            Event::Write {
                id,
                t_sent,
                lost_reported: false,
                ..
            } => (id, *t_sent, "is_lost() said false before a write"),
            Event::Release {
                id,
                t_sent,
                lost_reported: false,
                ..
            } => (id, *t_sent, "is_lost() said false before the release"),
            Event::Work {
                id,
                t,
                lost_reported: false,
                ..
            } => (id, *t, "is_lost() said false before its work"),
            _ => continue,
        };
        let Some(acq) = index.get(id).map(|&i| &acqs[i]) else {
            continue;
        };
        let Some(lost_at) = acq.lost_at.filter(|&lost| lost < t) else {
            continue;
        };
        report.violations.push(Violation {
            rule: "revived-lease",
            name: acq.a.name.clone(),
            detail: format!(
                "{} was told at {lost_at} that its lease was lost, yet {} later {what}",
                acq.a.id,
                ms(t - lost_at)
            ),
        });
    }
}
