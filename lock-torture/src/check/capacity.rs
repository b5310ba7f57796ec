//! Rule `capacity`: a semaphore's number of permits is stored with it, and a request that
//! asks for another while the semaphore is in use is refused with `CapacityMismatch`.
//!
//! One client in four asks for one permit more than the others (`client.rs`), so the
//! stored number changes whenever the semaphore falls idle and a request of the other kind
//! comes first. Two checks, both on the trusted intervals ([`Acq::trusted_until`]):
//!
//! - a grant: every permit of the name still trusted at that moment asked for the same
//!   number ([`check_grant`], called from the `permits` sweep, which counts the holders
//!   against that number: the stored one, since the grant was let in);
//! - a refusal: a request whose whole call lay within the trusted interval of a permit that
//!   asked for another number (the semaphore was in use, with that number stored, when its
//!   attempt ran) must have failed with `CapacityMismatch` naming that number, at once:
//!   not refused as busy or full, nor timed out before its deadline ([`check`]). A request
//!   that timed out at its deadline is not judged: with a wait of a few milliseconds the
//!   deadline can pass before the server's answer arrives.
//!
//! A server restarted empty forgets its holders and the stored number: grants are excused as
//! in `permits`, and requests that met a fault (or the settling after it, as in rule
//! `liveness`) are not judged.

use super::liveness::CLAIM_WINDOW;
use super::{Acq, Report, Violation};
use crate::clock::Nanos;
use crate::event::{Capacity, Event, FailKind, HoldKind};

/// A grant of `next` while the permits of `trusted` (those the server still remembers) were
/// trusted: each must have asked for the number `next` asked for.
pub(super) fn check_grant(name: &str, next: &Acq, trusted: &[&Acq], report: &mut Report) {
    for other in trusted.iter().filter(|a| a.a.permits != next.a.permits) {
        report.violations.push(Violation {
            rule: "capacity",
            name: name.to_owned(),
            detail: format!(
                "{} asking for {} permits was granted at {} while {} asking for {} was trusted (until {}): the semaphore was in use with another number stored",
                next.a.id,
                shown(next.a.permits),
                next.a.acquired,
                other.a.id,
                shown(other.a.permits),
                other.trusted_until(),
            ),
        });
    }
}

fn shown(permits: Option<u64>) -> String {
    permits.map_or_else(|| "an unknown number of".to_owned(), |n| n.to_string())
}

/// Judges every refused semaphore request against the trusted permits of `acqs`.
pub(super) fn check(events: &[Event], acqs: &[Acq], report: &mut Report) {
    let ttl = acqs
        .iter()
        .map(|a| a.a.ttl_ms.saturating_mul(1_000_000))
        .max()
        .unwrap_or(0);
    let margin = CLAIM_WINDOW + 2 * ttl;
    let faults: Vec<(Nanos, Nanos)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fault { t_start, t_end, .. }
            | Event::Down { t_start, t_end, .. }
            | Event::Foreign { t_start, t_end, .. } => Some((*t_start, *t_end + margin)),
            Event::Failover(f) => Some((f.t_start, f.t_end + margin)),
            _ => None,
        })
        .collect();
    for event in events {
        let Event::AcquireFailed {
            client,
            name,
            t_start,
            t_end,
            kind,
            wait_ms,
            hold: HoldKind::Permit,
            capacity: Some(Capacity { asked, stored, .. }),
            ..
        } = event
        else {
            continue;
        };
        // Timed out at its deadline: the deadline may have passed before any answer came
        // (a wait of a few ms), so what the server would have said is unknown.
        let wait = wait_ms.unwrap_or(0).saturating_mul(1_000_000);
        let timed_out =
            *kind == FailKind::Contention && wait > 0 && t_end.saturating_sub(*t_start) >= wait;
        if let (FailKind::Mismatch, Some(stored)) = (kind, stored) {
            if stored == asked {
                report.violations.push(Violation {
                    rule: "capacity",
                    name: name.clone(),
                    detail: format!("client {client}'s request ({t_start}..{t_end}) asking for {asked} permits was refused as a mismatch with {stored} stored"),
                });
            }
        }
        if timed_out || faults.iter().any(|&(s, e)| s <= *t_end && *t_start <= e) {
            continue;
        }
        // A permit of another number trusted over the whole call.
        let Some(held) = acqs.iter().find(|a| {
            a.a.kind == HoldKind::Permit
                && a.a.name == *name
                && a.a.permits.is_some_and(|n| n != *asked)
                && a.a.acquired <= *t_start
                && *t_end <= a.trusted_until()
        }) else {
            continue;
        };
        if *kind == FailKind::Mismatch && *stored == held.a.permits {
            continue;
        }
        report.violations.push(Violation {
            rule: "capacity",
            name: name.clone(),
            detail: format!(
                "client {client}'s request ({t_start}..{t_end}) asking for {asked} permits failed as {kind:?}{} while {} asking for {} was trusted ({}..{}): it must be refused as a mismatch with {} stored",
                stored.map_or_else(String::new, |s| format!(" ({s} stored)")),
                held.a.id,
                shown(held.a.permits),
                held.a.acquired,
                held.trusted_until(),
                shown(held.a.permits),
            ),
        });
    }
}
