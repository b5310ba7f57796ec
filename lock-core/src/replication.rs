//! [`ReplicaSync`]: whether a grant counts only once replicas acknowledged it (a leaf).

use std::time::Duration;

/// Whether an acquisition (and an extension) counts only once Redis replicas acknowledged
/// the write, checked with `WAIT numreplicas timeout` right after it. It covers every
/// write a holder relies on: locks, semaphore permits, read-write leases and multi-locks,
/// on Lua scripts and on `Protocol::Transactions`. Redlock does not apply it: its nodes
/// are independent masters, and its safety rests on a majority of them, not on replicas.
///
/// Redis replicates asynchronously: a master that grants a lock and fails before the write
/// reached a replica loses the grant in the failover, and the promoted replica grants the
/// same lock to someone else. A master that was paused or partitioned and comes back still
/// believing it is the master grants locks of its own until it is demoted. With the check,
/// a write that fewer than the required replicas acknowledged within the sync timeout is
/// undone and the attempt counts as failed: retried within the request's `wait`, then
/// [`LockError::NotReplicated`](crate::LockError::NotReplicated). A deposed master, whose
/// replicas follow the new master, therefore grants nothing.
///
/// What it does not guarantee: an acknowledged write is on that many replicas' memory, not
/// on disk, and it is lost if every replica that has it fails (or a replica without it is
/// promoted, which Sentinel and Cluster avoid by choosing the most up-to-date replica but do
/// not forbid); Redis's `WAIT` documentation says the same. It is not a consensus protocol.
///
/// ```
/// use lock_core::{Locker, ReplicaSync};
/// use std::time::Duration;
///
/// let locker = Locker::builder()
///     .url("redis://127.0.0.1:6379/")
///     .replica_sync(ReplicaSync::Required { replicas: 2 })
///     .sync_timeout(Duration::from_millis(200))
///     .build()?;
/// # drop(locker);
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicaSync {
    /// The default: `replicas` acknowledgements (1 by default) are required as soon as the
    /// master is seen with a connected replica (a replica that stops must not turn the
    /// check off when it matters most: its master still has it connected, and grants are
    /// refused). A master without replicas is not asked (it is checked again every few
    /// seconds). Sentinel, Cluster and a single master with replicas therefore check; a
    /// lone Redis does not.
    ///
    /// After a failover to a replica that has no replica of its own (a master and one
    /// replica, the master lost), the grants of the promoted master count without
    /// acknowledgements, until a replica is connected to it: nothing could be promoted
    /// with them, and waiting would stop locking until an operator attaches a replica. A
    /// failure of that master too loses them. The locker logs a warning each time a
    /// master enters or leaves this state, and counts the masters in it (the
    /// `lock_masters_without_replica` gauge). A master this locker saw with replicas and
    /// that has none now (a deposed master whose replicas follow the new master, or one
    /// whose replicas all failed) is not trusted so: its grants are refused. For no grant
    /// ever without acknowledgements, use [`ReplicaSync::Required`].
    ///
    /// Decided per master: on a Cluster, per key slot (the first write in a slot asks
    /// its master with `INFO`), so a master with replicas is checked and one without is
    /// not, whichever the locker met first; the decision stays with the slot through a
    /// failover. Behind Sentinel it stays through failovers too.
    Auto {
        /// Acknowledgements required.
        replicas: u32,
    },
    /// Always `replicas` acknowledgements, whatever the master reports: a master without
    /// replicas grants nothing, a promoted replica without replicas of its own included
    /// (the strict mode: locking stops after such a failover until a replica attaches).
    Required {
        /// Acknowledgements required (at least 1).
        replicas: u32,
    },
    /// No check: a grant counts once the master wrote it (the behaviour before the check;
    /// a failover can lose it).
    Off,
}

impl Default for ReplicaSync {
    fn default() -> Self {
        ReplicaSync::Auto { replicas: 1 }
    }
}

/// How long the check waits for the acknowledgements by default (clamped to half the
/// command timeout).
pub(crate) const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_millis(500);

/// What the backend needs of the setting: how many, for how long, and whether only once
/// replicas were seen.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncRule {
    pub replicas: u32,
    pub timeout: Duration,
    /// Only once the master was seen with a connected replica.
    pub when_replicated: bool,
}

impl ReplicaSync {
    /// The rule for a backend, or none when the check is off.
    pub(crate) fn rule(self, timeout: Duration) -> Option<SyncRule> {
        match self {
            ReplicaSync::Off
            | ReplicaSync::Auto { replicas: 0 }
            | ReplicaSync::Required { replicas: 0 } => None,
            ReplicaSync::Auto { replicas } => Some(SyncRule {
                replicas,
                timeout,
                when_replicated: true,
            }),
            ReplicaSync::Required { replicas } => Some(SyncRule {
                replicas,
                timeout,
                when_replicated: false,
            }),
        }
    }
}
