//! Rules `permits` and `write-overlap`: the lock's `overlap` rule for a semaphore and a
//! read-write lock, on the same trusted intervals ([`Acq::trusted_until`]).
//!
//! - `permits`: at no moment are more than N acquisitions of a semaphore's name trusted at
//!   once (N: the permits the grant that makes them N + 1 asked to share, the number stored
//!   with the semaphore then; rule `capacity` checks that the others asked for it too).
//!   Intervals are half-open, so the count can only rise at a grant, and each grant is
//!   judged against the intervals still trusted at that moment.
//! - `write-overlap`: a trusted write interval of a read-write lock meets no other trusted
//!   interval of the name, read or write; reads may overlap reads.
//!
//! The same restart rule as the lock's: a server killed and restarted empty forgets its
//! holders, so a holder whose attempt began before a kill, that still trusted its lease when
//! the server came back, does not count against a grant made after the kill. A grant that
//! is over the limit only with such forgotten holders is counted as `<rule>/restart` in the
//! expected anomalies (and in `expected_restart_overlaps`); beyond them it is a violation.

use super::capacity;
use super::failover::{Anomaly, Replication};
use super::{Acq, Down, Report, Violation};
use crate::clock::ms;
use crate::event::HoldKind;

/// Whether the server forgot `earlier` (a restart began after its attempt and ended while
/// it still trusted its lease) by the time `later` was granted, or the replication evidence
/// explains the two together.
fn forgotten(
    earlier: &Acq,
    later: &Acq,
    downs: &[Down],
    replication: &Replication<'_>,
    name: &str,
) -> Option<&'static str> {
    let restart = downs.iter().any(|d| {
        earlier.a.attempt_start <= d.start
            && d.start <= later.a.acquired
            && d.end < earlier.trusted_until()
    });
    if restart {
        return Some("restart");
    }
    replication.explain(Anomaly::Overlap, name, earlier, later)
}

/// The intervals of `list` (sorted by grant) still trusted when `next` is granted, after
/// dropping those that ended; `next` joins them afterwards.
pub(super) fn sweep<'a>(list: &[&'a Acq], mut judge: impl FnMut(&'a Acq, &[&'a Acq])) {
    let mut active: Vec<&'a Acq> = Vec::new();
    for &next in list {
        if next.trusted_until() <= next.a.acquired {
            continue; // already invalid when handed over (a reply slower than the TTL)
        }
        active.retain(|a| a.trusted_until() > next.a.acquired);
        judge(next, &active);
        active.push(next);
    }
}

/// Rule `permits`.
pub(super) fn check_permits(
    name: &str,
    list: &[&Acq],
    downs: &[Down],
    replication: &Replication<'_>,
    report: &mut Report,
) {
    sweep(list, |next, active| {
        let peak = report.peak_permits.get_or_insert(0);
        *peak = (*peak).max(active.len() as u64 + 1);
        // The grant's own number: the one stored with the semaphore when it was let in
        // (rule `capacity` checks that every trusted permit asked for it too).
        let Some(limit) = next.a.permits else {
            report.violations.push(Violation {
                rule: "permits",
                name: name.to_owned(),
                detail: format!("{} holds a permit of an unknown limit", next.a.id),
            });
            return;
        };
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let mut why = None;
        let remembered: Vec<&Acq> = active
            .iter()
            .copied()
            .filter(|a| match forgotten(a, next, downs, replication, name) {
                Some(reason) => {
                    why = Some(reason);
                    false
                }
                None => true,
            })
            .collect();
        capacity::check_grant(name, next, &remembered, report);
        if remembered.len() < limit {
            if let Some(why) = why {
                if why == "restart" {
                    report.expected_restart_overlaps += 1;
                }
                report.expect("permits", why);
            }
            return;
        }
        let ids: Vec<String> = remembered
            .iter()
            .map(|a| format!("{} (until {})", a.a.id, a.trusted_until()))
            .collect();
        report.violations.push(Violation {
            rule: "permits",
            name: name.to_owned(),
            detail: format!(
                "{} was granted at {} while {} of {limit} permits were trusted: {}",
                next.a.id,
                next.a.acquired,
                remembered.len(),
                ids.join(", "),
            ),
        });
    });
}

/// Rule `write-overlap`.
pub(super) fn check_rw(
    name: &str,
    list: &[&Acq],
    downs: &[Down],
    replication: &Replication<'_>,
    report: &mut Report,
) {
    sweep(list, |next, active| {
        let (peak, writes) = report.peak_readers.get_or_insert((0, 0));
        if next.a.kind == HoldKind::Write {
            *writes += 1;
        } else {
            let readers = active.iter().filter(|a| a.a.kind == HoldKind::Read).count();
            *peak = (*peak).max(readers as u64 + 1);
        }
        let conflicts = active
            .iter()
            .copied()
            .filter(|a| excludes(a.a.kind, next.a.kind));
        let mut why = None;
        let mut unexplained = Vec::new();
        for earlier in conflicts {
            match forgotten(earlier, next, downs, replication, name) {
                Some(reason) => why = Some(reason),
                None => unexplained.push(earlier),
            }
        }
        if unexplained.is_empty() {
            if let Some(why) = why {
                if why == "restart" {
                    report.expected_restart_overlaps += 1;
                }
                report.expect("write-overlap", why);
            }
            return;
        }
        for earlier in unexplained {
            // A downgraded lease's parts: rule `downgrade` (no writer between its write
            // and its read part, readers with its read part only).
            let rule = if earlier.downgraded || next.downgraded {
                "downgrade"
            } else {
                "write-overlap"
            };
            report.violations.push(Violation {
                rule,
                name: name.to_owned(),
                detail: format!(
                    "{} ({}) trusted its lease from {} to {} but {} ({}) was granted at {} ({} before the first one's trust ended)",
                    earlier.a.id,
                    side(earlier.a.kind),
                    earlier.a.acquired,
                    earlier.trusted_until(),
                    next.a.id,
                    side(next.a.kind),
                    next.a.acquired,
                    ms(earlier.trusted_until() - next.a.acquired),
                ),
            });
        }
    });
}

/// Whether two holds of one name may not be trusted at once: the lock's are exclusive,
/// a write side excludes every other side, permits exclude nothing by themselves (their
/// limit is counted by [`check_permits`]).
pub(super) fn excludes(a: HoldKind, b: HoldKind) -> bool {
    matches!(
        (a, b),
        (HoldKind::Lock, HoldKind::Lock)
            | (HoldKind::Leader, HoldKind::Leader)
            | (HoldKind::Write, HoldKind::Read | HoldKind::Write)
            | (HoldKind::Read, HoldKind::Write)
    )
}

fn side(kind: HoldKind) -> &'static str {
    match kind {
        HoldKind::Write => "write",
        HoldKind::Read => "read",
        HoldKind::Permit => "permit",
        HoldKind::Lock => "lock",
        HoldKind::Leader => "leadership",
    }
}
