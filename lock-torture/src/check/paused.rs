//! The GC-pause scenario's counts: holders stopped (SIGSTOP) past the end of their
//! validity, whether they were told, and whether fencing refused their writes.

use std::collections::HashSet;

use super::writes::WriteRow;
use super::{Acq, Report};
use crate::clock::Nanos;
use crate::event::WriteOutcome;

/// The GC-pause scenario: holders stopped past the end of their validity.
pub(super) fn count_paused_holders(
    acqs: &[Acq],
    pauses: &[(u32, Nanos, Nanos)],
    writes: &[WriteRow],
    report: &mut Report,
) {
    let rejected: HashSet<&str> = writes
        .iter()
        .filter(|w| w.outcome == WriteOutcome::Rejected)
        .map(|w| w.id.as_str())
        .collect();
    for acq in acqs {
        let paused = pauses.iter().any(|&(client, start, end)| {
            client == acq.a.client
                && acq.a.acquired <= start
                && start < acq.trusted_until()
                && end > acq.claim_end
        });
        if !paused {
            continue;
        }
        report.paused_holders += 1;
        // Told: the loss signal or an extension said so, or `is_lost()` at the release
        // (an annotated round's only look after its hold).
        if acq.lost_at.is_some() || acq.release.is_some_and(|(_, _, lost)| lost) {
            report.paused_holders_told_lost += 1;
        }
        if rejected.contains(acq.a.id.as_str()) {
            report.paused_writes_rejected += 1;
        }
    }
}
