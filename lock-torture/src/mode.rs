//! The fault modes: what a run injects. Which of them apply to which deployment is
//! [`crate::topology::Topology::modes`].

/// What to inject during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Mode {
    /// No faults: the baseline.
    None,
    /// SIGKILL a lock server and restart it empty at once, within the TTL (single node:
    /// mutual exclusion is not guaranteed across this; see RELIABILITY.md).
    Kill,
    /// SIGKILL a lock server and restart it empty after two TTLs (the delayed-restart
    /// rule: safety must hold).
    KillDelayed,
    /// SIGSTOP a client for two to three TTLs, then SIGCONT (a GC pause).
    Pause,
    /// Add latency (a quarter to one and a half TTL) between some clients and Redis.
    Latency,
    /// Cut every connection of a client to Redis.
    Drop,
    /// Partition some clients from Redis for one to two seconds (a blackhole).
    Partition,
    /// `SCRIPT FLUSH` on the lock servers (the NOSCRIPT path).
    ScriptFlush,
    /// `CLIENT KILL` of every client connection on a lock server.
    ClientKill,
    /// Pool size 1 and sixteen tasks per client, with bursts of latency.
    Pool,
    /// A foreign hash written on a free lock key for a while (with Redlock, half the time
    /// on one node only).
    WrongType,
    /// `DEBUG SLEEP` on a lock server (with Redlock, one node or all) for a fifth to four
    /// fifths of a TTL, again and again: renewals, extensions, releases and acquires pile up
    /// in flight and are answered together.
    Stall,
    /// SIGSTOP of a client that stands in a lock's Redis-side waiter queue (not the holder)
    /// for two to three TTLs, then SIGCONT: its turn comes while it is frozen, nobody claims
    /// it, and the queue must move on without it (and without two holders when it wakes).
    PauseWaiter,
    /// SIGKILL of a client that stands in a lock's waiter queue (a new client process takes
    /// its place): its entry stays in the queue until it expires, and the queue must skip it.
    KillWaiter,
    /// SIGKILL of the queue's head the moment its turn is announced (the lock is reserved
    /// for it): nobody claims the reservation, or its fresh lease is never released.
    KillWokenHead,
    /// Redlock: some clients each cut from a minority of the nodes for one to two seconds.
    PartitionMinority,
    /// Redlock: one node slow for every client (latency around the node timeout).
    SlowNode,
    /// Cluster, Sentinel: SIGKILL of a master; a replica is promoted, and the old master
    /// is restarted empty and comes back as a replica.
    KillMaster,
    /// Cluster: a coordinated `CLUSTER FAILOVER` on a replica (it catches up first).
    Failover,
    /// Cluster: the slot of a lock name moved to another master and back, keys migrated
    /// ten at a time, while clients use it (MIGRATING/IMPORTING, ASK and TRYAGAIN). Judged
    /// by every rule, `liveness` and `unexplained-error` included: a slot's migration is
    /// no excuse for a stalled waiter or a Redis error.
    Reshard,
    /// Cluster, Sentinel: SIGSTOP of a master. Cluster: a short pause (a stall) or one past
    /// the failover; Sentinel: until a replica is promoted. Then SIGCONT: the old master
    /// comes back as a replica.
    PauseMaster,
    /// Sentinel: SIGSTOP of the replicas for one to two seconds, then SIGCONT. The master
    /// keeps them connected; grants wait for them in vain (refused, `NotReplicated`), and
    /// answers that need no replica (a busy lock) must not wait at all (rule
    /// `busy-delayed`).
    PauseReplica,
    /// Sentinel: SIGKILL of the master and of one of its two replicas at once, neither ever
    /// restarted: the Sentinels promote the other replica, which has no replica of its own.
    /// Locking must resume on it (a run that never grants again fails). Once per run.
    LoseMaster,
    /// Redlock: the client processes' clocks are off, each by its own amount
    /// ([`CLOCK_OFFSETS_MS`], by slot: 5 s ahead, 5 s behind, right, 2 s ahead) for the
    /// whole run, where lock-core reads a client's wall clock (the waiters' tickets that
    /// order every master's queue). No fault is injected: the offsets are the fault, and
    /// every rule is judged throughout, `liveness` and `starvation` included. Not on one
    /// server, a Cluster or Sentinel, whose queues are ordered by the server's clock: an
    /// offset changes nothing there.
    ClockSkew,
    /// Client-side cancellation: one request in three is dropped at a random point (a
    /// timeout around it, or two tasks sharing one Locker aborted together), and one
    /// release and one extension in three is dropped after one to three polls (its
    /// command unsent, or sent and unanswered), for every primitive; nothing may be left
    /// behind (rules `ghost-grant`, `liveness`: a hold whose release was dropped counts as
    /// ended when it was sent). On one server and on Redlock (where no probe follows a
    /// cancelled request: it would read one master); not drawn by `mixed`.
    Cancel,
    /// One server: the lock key of a held lock deleted (`DEL`) or overwritten (`SET` to a
    /// foreign value, with a TTL) by the orchestrator, at random moments, as an operator's
    /// `DEL`, an eviction or a `FLUSHDB` would. Every client runs on scripts with key
    /// tracking on (unless `--track-keys off`), and every holder listens for `lost()`
    /// while it holds: each robbed lease must be told within the bound (rule
    /// `steal-untold`), and none told while its key was untouched (rule `false-loss`).
    Steal,
    /// `--primitive latch`: SIGKILL of a client other than client 0 (which arms the
    /// rounds), at once replaced by a new process: the counts it still owed are missing,
    /// and the rounds waiting for them must expire with their waiters told
    /// (`LatchExpired`), not hang.
    KillCounter,
    /// A random mix of the faults of the deployment, with delayed restarts.
    Mixed,
    /// Every mode of the deployment in turn, one run each.
    All,
}

impl Mode {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Kill => "kill",
            Mode::KillDelayed => "kill-delayed",
            Mode::Pause => "pause",
            Mode::Latency => "latency",
            Mode::Drop => "drop",
            Mode::Partition => "partition",
            Mode::ScriptFlush => "script-flush",
            Mode::ClientKill => "client-kill",
            Mode::Pool => "pool",
            Mode::WrongType => "wrong-type",
            Mode::Stall => "stall",
            Mode::PauseWaiter => "pause-waiter",
            Mode::KillWaiter => "kill-waiter",
            Mode::KillWokenHead => "kill-woken-head",
            Mode::PartitionMinority => "partition-minority",
            Mode::SlowNode => "slow-node",
            Mode::KillMaster => "kill-master",
            Mode::Failover => "failover",
            Mode::Reshard => "reshard",
            Mode::PauseMaster => "pause-master",
            Mode::PauseReplica => "pause-replica",
            Mode::LoseMaster => "lose-master",
            Mode::ClockSkew => "clock-skew",
            Mode::Cancel => "cancel",
            Mode::Steal => "steal",
            Mode::KillCounter => "kill-counter",
            Mode::Mixed => "mixed",
            Mode::All => "all",
        }
    }
}

/// `--mode clock-skew`: how far each client slot's clock is off, in milliseconds (ahead
/// when positive), the slots taking these in turn. A client 5 s ahead queued behind every
/// other waiter for good with tickets on its own clock, one 5 s behind ahead of all of
/// them; one 2 s ahead sits between them and a right one.
pub const CLOCK_OFFSETS_MS: [i64; 4] = [5_000, -5_000, 0, 2_000];

/// The clock offset of client `slot` in `mode` (0 outside `clock-skew`).
pub fn clock_offset_ms(mode: Mode, slot: u32) -> i64 {
    if mode != Mode::ClockSkew {
        return 0;
    }
    let slot = usize::try_from(slot).unwrap_or(0);
    CLOCK_OFFSETS_MS[slot % CLOCK_OFFSETS_MS.len()]
}
