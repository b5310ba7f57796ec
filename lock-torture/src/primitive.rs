//! Which of lock-core's primitives a run tortures: the exclusive lock (the default), a
//! counting semaphore, or a read-write lock; and which deployments each of them runs on.
//!
//! A semaphore workload takes one of `--permits` permits of a name (rule `permits`: never
//! more than N trusted holders at once); a read-write workload takes the read side, or one
//! time in four the write side (rule `write-overlap`: a writer's trusted interval meets no
//! other trusted interval of the name). Both are judged from the same trusted intervals as
//! the lock's `overlap` rule (see [`crate::check`]).

use crate::mode::Mode;
use crate::topology::Topology;

/// A primitive of lock-core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Primitive {
    /// The exclusive lock (`Locker::lock`), with fencing tokens and annotated rounds.
    Mutex,
    /// A counting semaphore (`Locker::semaphore(name, permits)`).
    Semaphore,
    /// A read-write lock (`Locker::rwlock`): readers, and one writer in four.
    Rwlock,
    /// The multi-lock (`Locker::lock_all`): half the rounds take two or three of the names
    /// in a random order, the others one of the same names alone (with fencing); a pause of
    /// up to half a TTL between rounds leaves the names free now and then.
    Multi,
    /// Leader election (`Locker::election`): candidates campaign for one of the names,
    /// act as leader (fenced writes with their term) until they resign, drop the
    /// leadership or lose it; every client also observes one election. Rules
    /// `leader-term`, `term-order`, `leader-late-action`, `observer-order` ([`crate::check`]).
    Election,
    /// Scheduled runs (`LockRequest::run_once` with `hold_at_least`): every client is a
    /// replica firing each name's job on a shared tick schedule, each tick up to
    /// [`crate::cadence::Cadence::max_offset`] late. Rules `tick-once`, `tick-missed`.
    Schedule,
    /// Lock-order deadlocks: each client's task takes two or three of the names in a random
    /// order, nested (`using` or plain `lock()`), with pauses and cancellations; and ring
    /// rounds across the clients, up to and past lock-core's `MAX_WAIT_CHAIN`
    /// (`client/deadlock.rs`). Rules `deadlock-real`, `deadlock-chain-real`,
    /// `deadlock-persists` ([`crate::check`]).
    Deadlock,
    /// A semaphore of [`WEIGHTED_CAPACITY`] permits taken by weight (`acquire_many`: one,
    /// two, or [`LARGE_WEIGHT`] at once, the large ones waiting long), while client 0
    /// changes its capacity in use (`set_capacity`, between [`LARGE_WEIGHT`] and
    /// [`WEIGHTED_CAPACITY`]). Rules `weight`, `revoked`, `weight-starved`
    /// (`check/weights.rs`).
    Weighted,
    /// Countdown latches: client 0 arms rounds of each name (one in five with a count that
    /// is never reached: a counter that died), every client counts each round down once,
    /// and waiters wait on them. Rules `latch-once`, `latch-rearm`, `latch-early`,
    /// `latch-late`, `latch-expired`, `latch-wrong-round` (`check/latch.rs`).
    Latch,
    /// Every primitive in turn, one run each: the lock's four, leader election and
    /// scheduled runs (`deadlock` is asked for by name).
    All,
}

/// How many permits a semaphore workload shares per name, unless `--permits` says otherwise.
pub const DEFAULT_PERMITS: u64 = 3;

/// The permits of a weighted workload's semaphore (every client's handle asks for it; the
/// capacity set in use moves between [`LARGE_WEIGHT`] and it).
pub const WEIGHTED_CAPACITY: u64 = 5;

/// The weight of a weighted workload's large requests: the rule `weight-starved` follows
/// them.
pub const LARGE_WEIGHT: u64 = 3;

/// One request in this many of a read-write workload is for the write side.
pub const WRITER_ODDS: u8 = 4;

impl Primitive {
    /// The name used on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Semaphore => "semaphore",
            Primitive::Rwlock => "rwlock",
            Primitive::Multi => "multi",
            Primitive::Election => "election",
            Primitive::Schedule => "schedule",
            Primitive::Deadlock => "deadlock",
            Primitive::Weighted => "weighted",
            Primitive::Latch => "latch",
            Primitive::All => "all",
        }
    }

    /// The primitives `all` stands for.
    pub fn each() -> [Primitive; 6] {
        [
            Primitive::Mutex,
            Primitive::Semaphore,
            Primitive::Rwlock,
            Primitive::Multi,
            Primitive::Election,
            Primitive::Schedule,
        ]
    }

    /// The suffix of the key that holds this primitive's holders (`lock:{name}<suffix>`):
    /// the lock's own key, or the semaphore's and read-write lock's sorted set of holders.
    pub fn key_suffix(self) -> &'static str {
        match self {
            Primitive::Mutex
            | Primitive::Multi
            | Primitive::Election
            | Primitive::Schedule
            | Primitive::Deadlock
            | Primitive::All => "",
            Primitive::Semaphore | Primitive::Weighted => ":sem",
            Primitive::Latch => ":latch",
            Primitive::Rwlock => ":rw",
        }
    }

    /// The key holding `name`'s holders: a string (the lock) or a sorted set.
    pub fn holders_key(self, name: &str) -> String {
        format!("{}{}", crate::names::lock_key(name), self.key_suffix())
    }

    /// Whether the holders key is a sorted set of `<weight> <token>:<label>` members.
    pub fn is_permit_set(self) -> bool {
        matches!(
            self,
            Primitive::Semaphore | Primitive::Rwlock | Primitive::Weighted
        )
    }

    /// Whether lock-core runs this primitive on Lua scripts only (its clients never use
    /// WATCH/MULTI).
    pub fn scripts_only(self) -> bool {
        self.is_permit_set()
            || matches!(
                self,
                Primitive::Election | Primitive::Deadlock | Primitive::Latch
            )
    }

    /// Whether the torture can run this primitive on `topology` in `mode`; the reason when it
    /// cannot. A permit set on a Cluster runs in the modes that move no master (no
    /// failover, kill or pause of a master): the checker's failover evidence does not tell
    /// a reservation from a grant, so an overlap across a failover would go unexplained,
    /// while the slot moves of `reshard` and the clients' faults are judged in full.
    pub fn runs_in(self, topology: Topology, mode: Mode) -> Result<(), String> {
        self.supports(topology)?;
        if mode == Mode::Steal && !matches!(self, Primitive::Mutex | Primitive::All) {
            return Err(format!(
                "--mode steal tortures plain locks only (lock-core tracks the keys of locks, \
                 not of semaphores, read-write locks, multi-locks or elections), not \
                 --primitive {}",
                self.name()
            ));
        }
        // The workloads of issue 43 run on one server without server faults: their rules
        // have no restart excuse (a restarted server forgets a latch's round, a pinned
        // capacity).
        let own = match self {
            Primitive::Latch => Some(&[Mode::None, Mode::Pause, Mode::KillCounter][..]),
            Primitive::Weighted => {
                Some(&[Mode::None, Mode::Pause, Mode::Cancel, Mode::KillWaiter][..])
            }
            _ => None,
        };
        if let Some(modes) = own {
            if !modes.contains(&mode) {
                let names: Vec<&str> = modes.iter().map(|m| m.name()).collect();
                return Err(format!(
                    "--primitive {} runs in the modes {} (its rules have no excuse for a \
                     server restarted empty), not in {}",
                    self.name(),
                    names.join(", "),
                    mode.name()
                ));
            }
        } else if mode == Mode::KillCounter {
            return Err(format!(
                "--mode kill-counter kills a client counting a latch down: --primitive latch \
                 only, not {}",
                self.name()
            ));
        }
        let moves_a_master = matches!(
            mode,
            Mode::KillMaster | Mode::Failover | Mode::PauseMaster | Mode::Mixed
        );
        if self.is_permit_set() && topology == Topology::Cluster && moves_a_master {
            return Err(format!(
                "--primitive {} runs on a Cluster in the modes that move no master (none, \
                 reshard, pause, pause-waiter, kill-waiter, kill-woken-head), not in {}: the \
                 checker's failover evidence does not tell a permit's reservation from its \
                 grant",
                self.name(),
                mode.name()
            ));
        }
        Ok(())
    }

    /// Whether the torture can run this primitive on `topology`; the reason when it cannot.
    pub fn supports(self, topology: Topology) -> Result<(), String> {
        match (self, topology) {
            (Primitive::Mutex | Primitive::All, _) => Ok(()),
            (_, Topology::Single) => Ok(()),
            (Primitive::Weighted | Primitive::Latch, _) => Err(format!(
                "--primitive {} runs on one server only in the torture (its rules have no \
                 failover evidence yet); use --topology single",
                self.name()
            )),
            (Primitive::Election, Topology::Redlock) => Err(
                "--primitive election does not run on Redlock: lock-core refuses elections \
                 there (LockError::Config: no atomic, ordered record of the leader across \
                 nodes); use --topology single, cluster or sentinel"
                    .to_owned(),
            ),
            (Primitive::Election, Topology::Cluster | Topology::Sentinel) => Ok(()),
            (Primitive::Deadlock, _) => Err(
                "--primitive deadlock runs on one server only: lock-core detects deadlocks on \
                 one Redis (or Sentinel), within one slot on a Cluster, and not on Redlock; \
                 use --topology single"
                    .to_owned(),
            ),
            (Primitive::Schedule, Topology::Redlock) => Ok(()),
            (Primitive::Schedule, Topology::Cluster | Topology::Sentinel) => Err(format!(
                "--primitive schedule is not tortured on {} yet: the checker's failover \
                 evidence covers leases, not scheduled runs; use --topology single or redlock",
                topology.name()
            )),
            (Primitive::Multi, _) => Err(
                "--primitive multi runs on one server only in the torture (lock-core's \
                 multi-lock needs every name on one Redis); use --topology single"
                    .to_owned(),
            ),
            (_, Topology::Redlock) => Err(format!(
                "--primitive {} does not run on Redlock: lock-core refuses semaphores and \
                 read-write locks there (N permits on each node do not bound a majority's \
                 holders to N); use --topology single, or --primitive mutex",
                self.name()
            )),
            (Primitive::Semaphore | Primitive::Rwlock, Topology::Cluster) => Ok(()),
            (_, Topology::Sentinel) => Err(format!(
                "--primitive {} is not tortured on {} yet: lock-core supports it there, but \
                 the checker's failover evidence (which master granted which lease, read \
                 from MONITOR) covers only the lock's scripts, so every overlap across a \
                 failover would be reported without its explanation; use --topology single",
                self.name(),
                topology.name()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_sets_run_on_one_server_and_on_a_cluster_that_moves_no_master() {
        for p in [Primitive::Semaphore, Primitive::Rwlock] {
            assert!(p.supports(Topology::Single).is_ok());
            assert!(p.runs_in(Topology::Cluster, Mode::Reshard).is_ok());
            assert!(p.runs_in(Topology::Cluster, Mode::KillWokenHead).is_ok());
            for mode in [
                Mode::Failover,
                Mode::KillMaster,
                Mode::PauseMaster,
                Mode::Mixed,
            ] {
                let why = p.runs_in(Topology::Cluster, mode).unwrap_err();
                assert!(why.contains(mode.name()), "{why}");
            }
            assert!(Primitive::Mutex
                .runs_in(Topology::Cluster, Mode::Failover)
                .is_ok());
            for t in [Topology::Redlock, Topology::Sentinel] {
                let why = p.supports(t).unwrap_err();
                assert!(why.contains(t.name()) || why.contains("Redlock"), "{why}");
            }
        }
        assert!(Primitive::Mutex.supports(Topology::Redlock).is_ok());
        assert_eq!(Primitive::Semaphore.holders_key("a"), "lock:{a}:sem");
        assert_eq!(Primitive::Mutex.holders_key("a"), "lock:{a}");
    }

    #[test]
    fn election_skips_redlock_and_schedule_skips_failovers() {
        let why = Primitive::Election.supports(Topology::Redlock).unwrap_err();
        assert!(why.contains("refuses elections"), "{why}");
        assert!(Primitive::Election.supports(Topology::Cluster).is_ok());
        assert!(Primitive::Schedule.supports(Topology::Redlock).is_ok());
        assert!(Primitive::Schedule.supports(Topology::Sentinel).is_err());
        assert!(Primitive::Election.scripts_only());
        assert!(!Primitive::Schedule.scripts_only());
    }

    /// The workloads of issue 43 run on one server in the modes that restart no server,
    /// and `kill-counter` is the latch's alone.
    #[test]
    fn latches_and_weights_run_on_one_server_without_restarts() {
        assert!(Primitive::Latch
            .runs_in(Topology::Single, Mode::KillCounter)
            .is_ok());
        assert!(Primitive::Weighted
            .runs_in(Topology::Single, Mode::Cancel)
            .is_ok());
        for p in [Primitive::Latch, Primitive::Weighted] {
            let why = p.runs_in(Topology::Single, Mode::Kill).unwrap_err();
            assert!(why.contains("restarted empty"), "{why}");
            assert!(p.supports(Topology::Cluster).is_err());
        }
        let why = Primitive::Mutex
            .runs_in(Topology::Single, Mode::KillCounter)
            .unwrap_err();
        assert!(why.contains("latch"), "{why}");
        assert!(!Primitive::each().contains(&Primitive::Latch));
        assert_eq!(Primitive::Weighted.holders_key("a"), "lock:{a}:sem");
    }

    /// `all` left elections and scheduled runs out (they were run only when asked for by
    /// name), so a check of every primitive skipped two of them.
    #[test]
    fn all_includes_election_and_schedule() {
        let each = Primitive::each();
        assert!(each.contains(&Primitive::Election), "{each:?}");
        assert!(each.contains(&Primitive::Schedule), "{each:?}");
        assert!(!each.contains(&Primitive::All));
    }
}
