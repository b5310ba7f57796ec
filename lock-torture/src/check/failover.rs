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

use std::collections::HashMap;

use super::Acq;
use crate::clock::Nanos;
use crate::event::{Event, Failover};

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
}

impl<'a> Replication<'a> {
    /// Collects the failovers and grants of a history.
    pub(super) fn new(events: &'a [Event]) -> Replication<'a> {
        let mut replication = Replication::default();
        for event in events {
            match event {
                Event::Failover(f) => replication.failovers.push(f),
                Event::Granted { node, t, token } => replication
                    .granted
                    .entry(token.as_str())
                    .or_default()
                    .push((*node, *t)),
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
                                        c.token.as_deref() != Some(earlier.a.token.as_str())
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

    /// For a violation's detail: which server granted each of `acqs` (nothing when the run
    /// recorded no grants: not a replicated deployment).
    pub(super) fn origins(&self, acqs: &[&Acq]) -> String {
        if self.granted.is_empty() {
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
