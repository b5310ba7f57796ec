//! Rule `fence-order`: fencing tokens follow real time, within each stretch between
//! restarts of a single server or a Redlock node, and never go backward across one (such a
//! regression is a violation, also counted as `fence_resets`: lock-core draws a lost
//! counter's next token from the server's clock); across a Cluster or Sentinel failover,
//! an anomaly is excused only where the replication evidence explains it
//! ([`super::failover`]).

use std::collections::{BTreeMap, HashSet};

use super::failover::{Anomaly, Replication};
use super::{Acq, Down, Report, Violation};
use crate::clock::Nanos;

/// The names under which a family's token rules are reported.
#[derive(Debug, Clone, Copy)]
pub(super) struct FenceRules {
    /// One token handed out twice.
    pub(super) twice: &'static str,
    /// A token not larger than one granted before the acquisition began.
    pub(super) order: &'static str,
    /// What the token is called in a violation's text.
    pub(super) token: &'static str,
}

/// A lock's fencing tokens: both `fence-order`.
pub(super) const LOCK_FENCES: FenceRules = FenceRules {
    twice: "fence-order",
    order: "fence-order",
    token: "fencing token",
};

/// Which stretch between restarts an instant falls in.
fn epoch(downs: &[Down], t: Nanos) -> usize {
    downs.partition_point(|d| d.start <= t)
}

/// Rule `fence-order` (or, for an election's terms, `rules`' names), within each stretch
/// between restarts, and across restarts (a regression there is also counted in
/// `fence_resets`).
pub(super) fn check_fences<'a>(
    rules: FenceRules,
    name: &str,
    list: &[&'a Acq],
    downs: &[Down],
    replication: &Replication<'_>,
    reset: &mut HashSet<&'a str>,
    report: &mut Report,
) {
    let mut epochs: BTreeMap<usize, Vec<(&'a Acq, u64)>> = BTreeMap::new();
    for &acq in list {
        if acq.a.set.is_some() {
            continue; // a multi-lock draws no fencing token
        }
        let Some(fence) = acq.a.fence else {
            report.violations.push(Violation {
                rule: rules.order,
                name: name.to_owned(),
                detail: format!(
                    "{} asked for fencing and got no token{}",
                    acq.a.id,
                    replication.origins(&[acq])
                ),
            });
            continue;
        };
        let (from, to) = (
            epoch(downs, acq.a.attempt_start),
            epoch(downs, acq.a.acquired),
        );
        if from == to {
            epochs.entry(from).or_default().push((acq, fence));
        }
    }
    let mut max_before: Option<u64> = None;
    for group in epochs.values_mut() {
        if let Some(previous) = max_before {
            for (acq, fence) in group.iter().filter(|(_, f)| *f <= previous) {
                // lock-core draws tokens from the server's clock when the counter is lost
                // (issue 40): a token that went backward across a restart is a violation.
                report.fence_resets += 1;
                reset.insert(acq.a.id.as_str());
                report.violations.push(Violation {
                    rule: rules.order,
                    name: name.to_owned(),
                    detail: format!(
                        "{} drew {} {fence} after a server restarted, not above the {previous} granted before the restart{}",
                        acq.a.id,
                        rules.token,
                        replication.origins(&[acq])
                    ),
                });
            }
        }
        let group_max = group.iter().map(|(_, f)| *f).max();
        max_before = max_before.max(group_max);
        // Descending tokens; among acquisitions with larger tokens, the earliest grant.
        group.sort_by_key(|&(_, fence)| std::cmp::Reverse(fence));
        let mut earliest_larger: Option<&Acq> = None;
        let mut i = 0;
        while i < group.len() {
            let fence = group[i].1;
            let mut j = i;
            while j < group.len() && group[j].1 == fence {
                j += 1;
            }
            if j - i > 1 {
                let same = &group[i..j];
                let first = same.iter().map(|(a, _)| *a).min_by_key(|a| a.a.acquired);
                let whys: Vec<Option<&str>> = same
                    .iter()
                    .filter(|(a, _)| first.is_some_and(|f| f.a.id != a.a.id))
                    .map(|(a, _)| {
                        first.and_then(|f| replication.explain(Anomaly::Fence, name, f, a))
                    })
                    .collect();
                if let Some(why) = whys
                    .first()
                    .copied()
                    .flatten()
                    .filter(|_| whys.iter().all(Option::is_some))
                {
                    report.expect(rules.twice, why);
                } else {
                    let ids: Vec<&str> = same.iter().map(|(a, _)| a.a.id.as_str()).collect();
                    let acqs: Vec<&Acq> = same.iter().map(|(a, _)| *a).collect();
                    report.violations.push(Violation {
                        rule: rules.twice,
                        name: name.to_owned(),
                        detail: format!(
                            "{} {fence} was handed out twice: {ids:?}{}",
                            rules.token,
                            replication.origins(&acqs)
                        ),
                    });
                }
            }
            for (acq, _) in &group[i..j] {
                if let Some(larger) = earliest_larger {
                    if larger.a.acquired < acq.a.attempt_start {
                        if let Some(why) = replication.explain(Anomaly::Fence, name, larger, acq) {
                            report.expect(rules.order, why);
                            continue;
                        }
                        report.violations.push(Violation {
                            rule: rules.order,
                            name: name.to_owned(),
                            detail: format!(
                                "{} began at {} after {} was granted at {} with {} {}, yet drew the smaller {} {}{}",
                                acq.a.id,
                                acq.a.attempt_start,
                                larger.a.id,
                                larger.a.acquired,
                                rules.token,
                                larger.a.fence.unwrap_or(0),
                                rules.token,
                                fence,
                                replication.origins(&[larger, acq])
                            ),
                        });
                    }
                }
            }
            for (acq, _) in &group[i..j] {
                if earliest_larger.is_none_or(|e| acq.a.acquired < e.a.acquired) {
                    earliest_larger = Some(acq);
                }
            }
            i = j;
        }
    }
}
