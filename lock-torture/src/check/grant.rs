//! The rules judged on each grant alone: `acquired-while-down`,
//! `acquired-over-foreign-value`, `stamp-order` and `validity-claim`.

use super::{Acq, Down, Report, Violation};
use crate::clock::{self, ms, Nanos};

/// Rules `acquired-while-down`, `acquired-over-foreign-value`, `validity-claim`.
pub(super) fn check_grant(
    acq: &Acq,
    nodes: usize,
    downs: &[Down],
    foreign: &[(String, Nanos, Nanos)],
    report: &mut Report,
) {
    let a = &acq.a;
    if nodes == 1 {
        if let Some(d) = downs
            .iter()
            .find(|d| d.start <= a.attempt_start && a.acquired <= d.end)
        {
            report.violations.push(Violation {
                rule: "acquired-while-down",
                name: a.name.clone(),
                detail: format!(
                    "{}'s attempt ran from {} to {}, inside the outage {}..{}",
                    a.id, a.attempt_start, a.acquired, d.start, d.end
                ),
            });
        }
    }
    if let Some((_, start, end)) = foreign
        .iter()
        .find(|(n, s, e)| *n == a.name && *s <= a.attempt_start && a.acquired <= *e)
    {
        report.violations.push(Violation {
            rule: "acquired-over-foreign-value",
            name: a.name.clone(),
            detail: format!(
                "{} was granted at {} while a hash sat on the key ({start}..{end})",
                a.id, a.acquired
            ),
        });
    }
    // The library says when the successful attempt began (`acquired_at`): inside the call,
    // before the grant. Outside that, either it or the harness's stamps are wrong, and every
    // rule that reads them is unsound.
    if a.attempt_start.saturating_add(clock::SETTLED) < a.call_start
        || a.acquired.saturating_add(clock::SETTLED) < a.attempt_start
    {
        report.violations.push(Violation {
            rule: "stamp-order",
            name: a.name.clone(),
            detail: format!(
                "{}: call at {}, attempt at {}, granted at {}: the attempt is stamped outside its call",
                a.id, a.call_start, a.attempt_start, a.acquired
            ),
        });
    }
    let ttl = a.ttl_ms.saturating_mul(1_000_000);
    // A leadership is logged after the campaign announced it, a round trip after the
    // grant, and a renewal may have moved its validity meanwhile: not judged.
    if a.kind == crate::event::HoldKind::Leader {
        return;
    }
    // A lease handed over with no validity left (a reply slower than the TTL) claims
    // nothing; its stamp is merely the moment it was looked at.
    if a.valid_until > a.acquired && a.valid_until > a.attempt_start.saturating_add(ttl) {
        report.violations.push(Violation {
            rule: "validity-claim",
            name: a.name.clone(),
            detail: format!(
                "{} reported validity until {}, {} past attempt start + TTL",
                a.id,
                a.valid_until,
                ms(a.valid_until - a.attempt_start - ttl)
            ),
        });
    }
}
