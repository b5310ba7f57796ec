//! Rule `silent-release`: a release that returned `true` when the lease had run out
//! unreported, or when another holder had been granted what it excludes meanwhile.

use super::failover::{Anomaly, Replication};
use super::{permits, Acq, Report, Violation};
use crate::clock::ms;
use crate::event::ReleaseOutcome;

/// Rule `silent-release` (one family and name: a lock's, a semaphore's or a read-write
/// lock's acquisitions).
pub(super) fn check_releases(
    name: &str,
    list: &[&Acq],
    replication: &Replication<'_>,
    report: &mut Report,
) {
    for (pos, acq) in list.iter().enumerate() {
        let Some((sent, outcome, lost_reported)) = acq.release else {
            continue;
        };
        if outcome != ReleaseOutcome::Released {
            continue;
        }
        if sent > acq.claim_end && !lost_reported {
            report.violations.push(Violation {
                rule: "silent-release",
                name: name.to_owned(),
                detail: format!(
                    "{} released at {}, {} after its validity ended, with release() == true and is_lost() == false",
                    acq.a.id,
                    sent,
                    ms(sent - acq.claim_end)
                ),
            });
        }
        // `list` is sorted by grant time: later grants before our release was sent.
        for other in &list[pos + 1..] {
            if other.a.acquired >= sent {
                break;
            }
            if !permits::excludes(acq.a.kind, other.a.kind) {
                continue; // permits, and readers among themselves, may be granted meanwhile
            }
            if other.a.attempt_start > acq.a.acquired {
                if let Some(why) = replication.explain(Anomaly::Overlap, name, acq, other) {
                    report.expect("silent-release", why);
                    continue;
                }
                report.violations.push(Violation {
                    rule: "silent-release",
                    name: name.to_owned(),
                    detail: format!(
                        "{} was granted at {} (attempt from {}) after {} was granted at {}, yet {}'s release at {} returned true",
                        other.a.id, other.a.acquired, other.a.attempt_start, acq.a.id, acq.a.acquired, acq.a.id, sent
                    ),
                });
            }
        }
    }
}
