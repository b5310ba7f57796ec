//! What asynchronous replication explains, and what it does not.
//!
//! A Cluster or Sentinel master acknowledges a write before its replicas have it. When the
//! master fails and a replica takes its place, the lock's state is whatever the replica
//! had: README's table of deployments says so, and no client library can do better. Two
//! ways this shows in a history, and nothing else is excused:
//!
//! - `stale-master`: one of the two leases was granted by the old master *after* it failed
//!   (it was paused, or killed and restarted empty) and *before* it was seen as a replica
//!   again, while a replica had been promoted in its place: for a while there were two
//!   masters. The other lease was granted by another server, or (the old master restarted
//!   empty) by the old master before the kill.
//! - `unreplicated`: the earlier lease was granted by the old master before it failed, the
//!   later one by another server after the failure began, and the copy of the lock that
//!   server held right after the failure (read by the orchestrator) did not have the
//!   earlier lease (another token, or it expired before the earlier holder stopped
//!   trusting it), or, for a fencing anomaly, had a smaller fencing counter than the
//!   earlier token.
//!
//! Both need evidence from the run: which server granted each lease (its `MONITOR`
//! stream, [`Event::Granted`]), a failover of the lock's master that the orchestrator
//! caused and timed ([`Event::Failover`], kind `kill` or `pause`, with a replica
//! promoted), and the replica's copy. A coordinated `CLUSTER FAILOVER` (kind `manual`)
//! excuses nothing: the replica has caught up before it takes over. A lease whose granting
//! server is unknown is never excused.

use std::collections::{BTreeMap, HashMap};

use super::{Acq, Report, Violation};
use crate::clock::Nanos;
use crate::event::{lease_token, Event, Failover};

/// Which anomaly is being explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Anomaly {
    /// Both leases trusted at once (or a release that succeeded over a later grant).
    Overlap,
    /// The later lease drew a fencing token not above the earlier one's.
    Fence,
}

/// The replication evidence of a run.
#[derive(Debug, Default)]
pub(super) struct Replication<'a> {
    failovers: Vec<&'a Failover>,
    /// Lease token -> (server port, when it executed the grant).
    granted: HashMap<&'a str, Vec<(u16, Nanos)>>,
    /// Whether the servers' grants were watched (a replicated deployment): then every lease
    /// must have been seen granted, and every anomaly's message names its servers.
    watched: bool,
}

impl<'a> Replication<'a> {
    /// Collects the failovers and grants of a history.
    pub(super) fn new(events: &'a [Event]) -> Replication<'a> {
        let mut replication = Replication::default();
        for event in events {
            match event {
                Event::Failover(f) => replication.failovers.push(f),
                Event::Granted { node, t, token, .. } => {
                    replication.watched = true;
                    replication
                        .granted
                        .entry(lease_token(token))
                        .or_default()
                        .push((*node, *t));
                }
                Event::Topology { topology, .. } => {
                    replication.watched |= matches!(topology.as_str(), "cluster" | "sentinel");
                }
                _ => {}
            }
        }
        replication
    }

    /// The rule that explains `anomaly` between `earlier` (granted first) and `later` on
    /// `name`, or `None`.
    pub(super) fn explain(
        &self,
        anomaly: Anomaly,
        name: &str,
        earlier: &Acq,
        later: &Acq,
    ) -> Option<&'static str> {
        let ga = self.granted.get(earlier.a.token.as_str())?;
        let gb = self.granted.get(later.a.token.as_str())?;
        let crashes = self.failovers.iter().filter(|f| {
            matches!(f.kind.as_str(), "kill" | "pause")
                && f.new.is_some()
                && f.names.iter().any(|n| n == name)
        });
        for f in crashes {
            let stale = |&(node, t): &(u16, Nanos)| node == f.old && f.t_start <= t && t <= f.t_end;
            for a in ga {
                for b in gb {
                    if stale(a) || stale(b) {
                        let (g, o) = if stale(b) { (b, a) } else { (a, b) };
                        // The other grant came from another server, or from the old master
                        // before it was killed (it came back empty). A paused master kept
                        // its keys: it granting both is no replication matter.
                        let before_kill = f.kind == "kill" && o.1 < f.t_start;
                        if o.0 != g.0 || before_kill {
                            return Some("stale-master");
                        }
                    }
                    if a.0 == f.old && a.1 < f.t_start && b.0 != f.old && b.1 >= f.t_start {
                        let lost = f.copies.iter().any(|c| {
                            c.node == b.0
                                && c.name == name
                                && match anomaly {
                                    Anomaly::Overlap => {
                                        c.token.as_deref().map(lease_token)
                                            != Some(earlier.a.token.as_str())
                                            || c.expires.is_none_or(|e| e < earlier.trusted_until())
                                    }
                                    Anomaly::Fence => {
                                        earlier.a.fence.is_some_and(|fence| c.fence < fence)
                                    }
                                }
                        });
                        if lost {
                            return Some("unreplicated");
                        }
                    }
                }
            }
        }
        None
    }

    /// Rule `unseen-grant`: on a watched (replicated) run, counts the leases no server was
    /// seen granting, and reports them per name (with the first few ids).
    pub(super) fn check_seen(&self, acqs: &[Acq], report: &mut Report) {
        if !self.watched {
            return;
        }
        let mut unseen: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for acq in acqs {
            if !self.granted.contains_key(acq.a.token.as_str()) {
                unseen
                    .entry(acq.a.name.as_str())
                    .or_default()
                    .push(&acq.a.id);
            }
        }
        report.unseen_grants = Some(unseen.values().map(|ids| ids.len() as u64).sum());
        for (name, ids) in unseen {
            report.violations.push(Violation {
                rule: "unseen-grant",
                name: name.to_owned(),
                detail: format!(
                    "{} of the leases granted on this name were seen granted by no server's \
                     MONITOR stream (first: {:?}): the failover rules cannot judge them",
                    ids.len(),
                    &ids[..ids.len().min(5)]
                ),
            });
        }
    }

    /// For a violation's detail: which server granted each of `acqs` (nothing when the run
    /// did not watch its servers: not a replicated deployment).
    pub(super) fn origins(&self, acqs: &[&Acq]) -> String {
        if !self.watched {
            return String::new();
        }
        let each: Vec<String> = acqs
            .iter()
            .map(|acq| match self.granted.get(acq.a.token.as_str()) {
                Some(grants) => {
                    let at: Vec<String> = grants
                        .iter()
                        .map(|(node, t)| format!("port {node} at {t}"))
                        .collect();
                    format!("{} by {}", acq.a.id, at.join(" and "))
                }
                None => format!("{} by no server seen", acq.a.id),
            })
            .collect();
        format!("; granted: {}", each.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use crate::check::{check, History, Report};
    use crate::event::{Acquired, Event, Failover, ReplicaCopy};

    const MS: u64 = 1_000_000;
    const OLD: u16 = 7000;
    const NEW: u16 = 7001;

    fn acq(id: &str, fence: u64, start_ms: u64, valid_ms: u64) -> Event {
        Event::Acquired(Acquired {
            id: id.into(),
            client: 0,
            task: 0,
            name: "n".into(),
            token: format!("tok-{id}"),
            fence: Some(fence),
            call_start: start_ms * MS,
            attempt_start: start_ms * MS,
            acquired: (start_ms + 1) * MS,
            valid_until: (start_ms + valid_ms) * MS,
            ttl_ms: 200,
            auto_renew: false,
            wait_ms: None,
            annotated: false,
            kind: crate::event::HoldKind::Lock,
            permits: None,
            weight: None,
            set: None,
        })
    }

    fn granted(id: &str, node: u16, at_ms: u64) -> Event {
        Event::Granted {
            node,
            t: at_ms * MS,
            token: format!("tok-{id}"),
            key: None,
            until: None,
        }
    }

    /// The master OLD failed at 100 ms, NEW was promoted at 150, OLD was a replica again at
    /// 400; NEW's copy of `n` right after the failure: `copy`.
    fn failover(kind: &str, copy: Option<(&str, u64, u64)>) -> Event {
        Event::Failover(Failover {
            kind: kind.into(),
            old: OLD,
            new: Some(NEW),
            names: vec!["n".into()],
            t_start: 100 * MS,
            t_promoted: Some(150 * MS),
            t_end: 400 * MS,
            copies: copy
                .map(|(id, expires_ms, fence)| ReplicaCopy {
                    node: NEW,
                    name: "n".into(),
                    token: Some(format!("tok-{id}")),
                    expires: Some(expires_ms * MS),
                    fence,
                })
                .into_iter()
                .collect(),
            t_whole: None,
        })
    }

    fn run(events: Vec<Event>) -> Report {
        check(
            &History {
                events,
                ..History::default()
            },
            1,
        )
    }

    fn rules(report: &Report) -> Vec<&'static str> {
        report.violations.iter().map(|v| v.rule).collect()
    }

    /// `a` granted by NEW at 200 ms; `b` by the old master, resumed, at 250 ms.
    fn split_brain(kind: &str) -> Vec<Event> {
        vec![
            failover(kind, None),
            acq("a", 10, 199, 190),
            granted("a", NEW, 200),
            acq("b", 10, 249, 190),
            granted("b", OLD, 250),
        ]
    }

    #[test]
    fn a_grant_by_a_master_that_was_failed_over_is_expected() {
        let report = run(split_brain("pause"));
        assert!(report.passed(), "{:?}", report.violations);
        assert_eq!(report.expected.get("overlap/stale-master"), Some(&1));
        assert_eq!(report.expected.get("fence-order/stale-master"), Some(&1));
        let report = run(split_brain("kill"));
        assert!(report.passed(), "{:?}", report.violations);
    }

    #[test]
    fn without_evidence_an_overlap_stays_a_violation() {
        // A coordinated failover: the replica caught up before it took over.
        let report = run(split_brain("manual"));
        assert_eq!(rules(&report), ["overlap", "fence-order"]);
        // No failover at all.
        let report = run(split_brain("pause").split_off(1));
        assert_eq!(rules(&report), ["overlap", "fence-order"]);
        // Nobody saw which server granted `b`.
        let mut events = split_brain("pause");
        events.pop();
        let report = run(events);
        assert_eq!(rules(&report), ["overlap", "fence-order", "unseen-grant"]);
        assert!(report.violations[0].detail.contains("by no server seen"));
        assert_eq!(report.unseen_grants, Some(1));
        // The old master granted `b` after it was a replica again.
        let mut events = split_brain("pause");
        events.pop();
        events.push(granted("b", OLD, 450));
        assert_eq!(rules(&run(events)), ["overlap", "fence-order"]);
        // A failover of another name's master.
        let mut events = split_brain("pause");
        if let Event::Failover(f) = &mut events[0] {
            f.names = vec!["m".into()];
        }
        assert_eq!(rules(&run(events)), ["overlap", "fence-order"]);
    }

    #[test]
    fn a_paused_master_granting_twice_is_a_violation_a_restarted_one_is_not() {
        // Both before and after the failure on the old master.
        let events = |kind| {
            vec![
                failover(kind, None),
                acq("a", 10, 89, 190),
                granted("a", OLD, 90),
                acq("b", 10, 249, 190),
                granted("b", OLD, 250),
            ]
        };
        // The paused master still had `a`'s key: two grants by it are a defect.
        assert_eq!(rules(&run(events("pause"))), ["overlap", "fence-order"]);
        // The killed one came back empty.
        let report = run(events("kill"));
        assert!(report.passed(), "{:?}", report.violations);
        assert_eq!(report.expected.get("overlap/stale-master"), Some(&1));
    }

    /// lock-core marks a value `~<token>:<label>` while others are queued for the lock (a
    /// lease claimed by a queued waiter is written marked). Such grants and replica copies
    /// were read as the token `~<token>` and matched no lease (issue 25).
    fn marked(event: Event) -> Event {
        match event {
            Event::Granted {
                node,
                t,
                token,
                key,
                until,
            } => Event::Granted {
                node,
                t,
                token: format!("~{token}"),
                key,
                until,
            },
            Event::Failover(mut f) => {
                for c in &mut f.copies {
                    c.token = c.token.take().map(|t| format!("~{t}"));
                }
                Event::Failover(f)
            }
            other => other,
        }
    }

    #[test]
    fn a_marked_grant_or_copy_is_the_lease_it_marks() {
        // The split brain of a paused master, both grants recorded with the mark.
        let report = run(split_brain("pause").into_iter().map(marked).collect());
        assert!(report.passed(), "{:?}", report.violations);
        assert_eq!(report.expected.get("overlap/stale-master"), Some(&1));
        assert_eq!(report.unseen_grants, Some(0));
        // The promoted replica had `a` (marked), valid past `a`'s trust, and the counter:
        // nothing excuses the overlap (unmarked, the copy looked like another lease).
        let events = vec![
            acq("a", 10, 98, 190),
            granted("a", OLD, 99),
            marked(failover("kill", Some(("a", 400, 10)))),
            acq("b", 11, 199, 190),
            granted("b", NEW, 200),
        ];
        assert_eq!(rules(&run(events)), ["overlap"]);
    }

    #[test]
    fn a_replicated_run_must_see_every_grant() {
        let mut events = vec![Event::Topology {
            topology: "sentinel".into(),
            nodes: 1,
        }];
        events.extend(split_brain("pause"));
        let report = run(events.clone());
        assert!(report.passed(), "{:?}", report.violations);
        assert_eq!(report.unseen_grants, Some(0));
        // Nobody saw `b` granted: counted, and the run fails however it went otherwise.
        events.push(acq("c", 12, 500, 50));
        let report = run(events);
        assert_eq!(report.unseen_grants, Some(1));
        assert_eq!(rules(&report), ["unseen-grant"]);
        assert!(
            report.summary().contains("unseen_grants=1"),
            "{}",
            report.summary()
        );
        // A run on one server has no MONITOR: nothing is counted, nothing fails.
        let report = run(vec![acq("a", 1, 0, 50)]);
        assert_eq!(report.unseen_grants, None);
        assert!(report.passed());
        assert!(
            report.summary().contains("unseen_grants=-"),
            "{}",
            report.summary()
        );
    }

    #[test]
    fn a_fence_order_message_names_the_granting_servers() {
        // `b` began after `a` was granted and drew a smaller token: both origins named.
        let events = vec![
            Event::Topology {
                topology: "cluster".into(),
                nodes: 1,
            },
            acq("a", 10, 0, 50),
            granted("a", OLD, 1),
            acq("b", 9, 100, 50),
            granted("b", NEW, 101),
        ];
        let report = run(events);
        assert_eq!(rules(&report), ["fence-order"]);
        let detail = &report.violations[0].detail;
        assert!(
            detail.contains("a by port 7000") && detail.contains("b by port 7001"),
            "{detail}"
        );
    }

    #[test]
    fn a_lease_the_promoted_replica_never_had_is_expected() {
        // `a` granted by the old master just before it failed; `b` by the promoted replica.
        let events = |copy| {
            vec![
                acq("a", 10, 98, 190),
                granted("a", OLD, 99),
                failover("kill", copy),
                acq("b", 8, 199, 190),
                granted("b", NEW, 200),
            ]
        };
        // The replica had an older lease and counter: the grant and its INCR were lost.
        let report = run(events(Some(("old", 150, 7))));
        assert!(report.passed(), "{:?}", report.violations);
        assert_eq!(report.expected.get("overlap/unreplicated"), Some(&1));
        assert_eq!(report.expected.get("fence-order/unreplicated"), Some(&1));
        // The replica had `a`, valid past `a`'s trust, and the counter: no excuse.
        let report = run(events(Some(("a", 400, 10))));
        assert_eq!(rules(&report), ["overlap", "fence-order"]);
        // No copy was read from the server that granted `b`.
        assert_eq!(rules(&run(events(None))), ["overlap", "fence-order"]);
    }
}
