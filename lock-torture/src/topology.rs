//! The deployments a run can torture, and which fault modes apply to each.

use crate::mode::Mode;

/// Which Redis deployment the clients lock on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Topology {
    /// One Redis server (behind a proxy per client).
    Single,
    /// Redlock over `--nodes` independent servers (each behind a proxy per client).
    Redlock,
    /// A Redis Cluster: three masters with a replica each (clients connect directly:
    /// the cluster hands out its nodes' own addresses).
    Cluster,
    /// A master, two replicas and three Sentinels (quorum two); clients follow the master
    /// the Sentinels name.
    Sentinel,
}

impl Topology {
    /// The name used on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Redlock => "redlock",
            Topology::Cluster => "cluster",
            Topology::Sentinel => "sentinel",
        }
    }

    /// Parses [`Topology::name`].
    pub fn from_name(name: &str) -> Option<Topology> {
        [
            Topology::Single,
            Topology::Redlock,
            Topology::Cluster,
            Topology::Sentinel,
        ]
        .into_iter()
        .find(|t| t.name() == name)
    }

    /// Whether clients reach the lock servers through the per-client proxies (and so can
    /// be slowed, cut or partitioned).
    pub fn proxied(self) -> bool {
        matches!(self, Topology::Single | Topology::Redlock)
    }

    /// Whether waiting requests stand in a Redis-side queue (one server, a Cluster, or
    /// every Redlock master, on scripts; the Sentinel locker polls). On Redlock the faults
    /// read the first master's queue, whose head is every master's.
    pub fn has_queue(self) -> bool {
        matches!(
            self,
            Topology::Single | Topology::Cluster | Topology::Redlock
        )
    }

    /// The modes `--mode all` runs, one run each.
    pub fn modes(self) -> &'static [Mode] {
        match self {
            Topology::Single => &[
                Mode::None,
                Mode::Kill,
                Mode::KillDelayed,
                Mode::Pause,
                Mode::Latency,
                Mode::Drop,
                Mode::Partition,
                Mode::ScriptFlush,
                Mode::ClientKill,
                Mode::Pool,
                Mode::WrongType,
                Mode::Stall,
                Mode::PauseWaiter,
                Mode::KillWaiter,
                Mode::KillWokenHead,
                Mode::Cancel,
                Mode::Steal,
                Mode::KillCounter,
                Mode::Mixed,
            ],
            Topology::Redlock => &[
                Mode::None,
                Mode::Kill,
                Mode::KillDelayed,
                Mode::Pause,
                Mode::Latency,
                Mode::Drop,
                Mode::Partition,
                Mode::PartitionMinority,
                Mode::SlowNode,
                Mode::ScriptFlush,
                Mode::ClientKill,
                Mode::Pool,
                Mode::WrongType,
                Mode::Stall,
                Mode::PauseWaiter,
                Mode::KillWaiter,
                Mode::KillWokenHead,
                Mode::ClockSkew,
                Mode::Cancel,
                Mode::Mixed,
            ],
            Topology::Cluster => &[
                Mode::None,
                Mode::KillMaster,
                Mode::Failover,
                Mode::Reshard,
                Mode::PauseMaster,
                Mode::Pause,
                Mode::PauseWaiter,
                Mode::KillWaiter,
                Mode::KillWokenHead,
                Mode::Mixed,
            ],
            Topology::Sentinel => &[
                Mode::None,
                Mode::KillMaster,
                Mode::PauseMaster,
                Mode::Pause,
                Mode::PauseReplica,
                Mode::LoseMaster,
                Mode::Mixed,
            ],
        }
    }

    /// The faults `--mode mixed` picks from (restarts of a single server or a Redlock node
    /// are delayed ones: the mix stays within what the deployment promises).
    pub fn mixed(self) -> &'static [Mode] {
        match self {
            Topology::Single => &[
                Mode::KillDelayed,
                Mode::Pause,
                Mode::Latency,
                Mode::Drop,
                Mode::Partition,
                Mode::ScriptFlush,
                Mode::ClientKill,
                Mode::WrongType,
                Mode::Stall,
                Mode::PauseWaiter,
                Mode::KillWaiter,
                Mode::KillWokenHead,
            ],
            Topology::Redlock => &[
                Mode::KillDelayed,
                Mode::Pause,
                Mode::Latency,
                Mode::Drop,
                Mode::Partition,
                Mode::PartitionMinority,
                Mode::SlowNode,
                Mode::ScriptFlush,
                Mode::ClientKill,
                Mode::WrongType,
                Mode::Stall,
            ],
            Topology::Cluster => &[
                Mode::KillMaster,
                Mode::Failover,
                Mode::Reshard,
                Mode::PauseMaster,
                Mode::Pause,
                Mode::PauseWaiter,
                Mode::KillWaiter,
                Mode::KillWokenHead,
            ],
            Topology::Sentinel => &[Mode::KillMaster, Mode::PauseMaster, Mode::Pause],
        }
    }
}
