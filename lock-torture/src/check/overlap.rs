//! Rule `overlap` (an election's `leader-overlap`): two acquisitions of one lock trusted at
//! the same moment, unless a restart or the deployment's replication explains it.

use super::failover::{Anomaly, Replication};
use super::{Acq, Down, Report, Violation};
use crate::clock::ms;

/// Rule `overlap` (`rule`: an election's is `leader-overlap`): a sweep over trusted
/// intervals sorted by start.
pub(super) fn check_overlaps(
    rule: &'static str,
    name: &str,
    list: &[&Acq],
    downs: &[Down],
    replication: &Replication<'_>,
    report: &mut Report,
) {
    // The interval that reaches furthest so far.
    let mut reach: Option<&Acq> = None;
    for &next in list {
        if next.trusted_until() <= next.a.acquired {
            continue; // already invalid when handed over (a reply slower than the TTL)
        }
        if let Some(earlier) = reach {
            if next.a.acquired < earlier.trusted_until() {
                let restart = downs.iter().find(|d| {
                    earlier.a.attempt_start <= d.start
                        && d.start <= next.a.acquired
                        && d.end < earlier.trusted_until()
                });
                let explained = replication.explain(Anomaly::Overlap, name, earlier, next);
                // `--mode steal`: the earlier key was taken before this grant, and its
                // holder stopped trusting it by the deadline it had to be told by.
                let stolen = earlier.stolen.is_some_and(|st| {
                    st.sent <= next.a.acquired && earlier.trusted_until() <= st.deadline
                });
                if restart.is_some() {
                    report.expected_restart_overlaps += 1;
                    report.expect(rule, "restart");
                } else if stolen {
                    report.expect(rule, "steal");
                } else if let Some(why) = explained {
                    report.expect(rule, why);
                } else {
                    report.violations.push(Violation {
                        rule,
                        name: name.to_owned(),
                        detail: format!(
                            "{} trusted its lease from {} to {} but {} was granted at {} ({} before the first one's trust ended){}",
                            earlier.a.id,
                            earlier.a.acquired,
                            earlier.trusted_until(),
                            next.a.id,
                            next.a.acquired,
                            ms(earlier.trusted_until() - next.a.acquired),
                            replication.origins(&[earlier, next]),
                        ),
                    });
                }
            }
        }
        if reach.is_none_or(|r| next.trusted_until() > r.trusted_until()) {
            reach = Some(next);
        }
    }
}
