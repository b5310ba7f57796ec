//! The history: one JSON object per line, written by clients and by the orchestrator.
//!
//! Every stamp is [`Nanos`] of `CLOCK_MONOTONIC` (see [`crate::clock`]). An acquisition is
//! named by its `id` (`c<client>.t<task>.<seq>`), and the events that follow it refer to it.
//!
//! The [`Event`] enum is here; the records it carries are in files of their own: a grant
//! and what it holds (`acquired.rs`), what requests returned (`outcome.rs`), a failed
//! master (`failover.rs`), scheduled runs (`schedule.rs`), reads of a lock key
//! (`look.rs`), and the JSON-lines files themselves (`log.rs`).

mod acquired;
mod failover;
mod log;
mod look;
mod outcome;
mod prims;
mod schedule;

use serde::{Deserialize, Serialize};

use crate::clock::Nanos;
pub use acquired::{Acquired, HoldKind};
pub use failover::{Failover, ReplicaCopy};
pub use log::{read_log, Log};
pub use look::{lease_token, Look};
pub use outcome::{Capacity, FailKind, ReleaseOutcome, WriteOutcome};
pub use prims::{CapacitySet, Downgraded, LatchArm, LatchCount, LatchWait, WaitOutcome};
pub use schedule::{RunStarted, TickDone};

/// One line of a log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// A client process started.
    Start {
        /// Client number.
        client: u32,
        /// Its OS process id.
        pid: u32,
        /// When.
        t: Nanos,
        /// `scripts` or `transactions`.
        protocol: String,
        /// The locker's command timeout: what bounds a request that does not wait (0 in logs
        /// written before it was recorded).
        #[serde(default)]
        command_timeout_ms: u64,
        /// How far the client's clock was set off for lock-core, in ms (ahead when
        /// positive; `--mode clock-skew`; 0, and absent from the log, otherwise).
        #[serde(default, skip_serializing_if = "is_zero")]
        clock_offset_ms: i64,
    },
    /// A lock was granted.
    Acquired(Acquired),
    /// An acquire ended without a lease.
    AcquireFailed {
        /// Client number.
        client: u32,
        /// Lock name.
        name: String,
        /// Before the request was sent.
        t_start: Nanos,
        /// When the error came back.
        t_end: Nanos,
        /// What kind of failure.
        kind: FailKind,
        /// The error message (for `other` kinds).
        message: String,
        /// The wait the request asked for (absent in logs written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        /// What the request was for (a lock unless said otherwise).
        #[serde(default, skip_serializing_if = "HoldKind::is_lock")]
        hold: HoldKind,
        /// A multi-lock request (`Locker::lock_all`): every name of its set (`name` is
        /// them joined with `+`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        set: Option<Vec<String>>,
        /// A semaphore request: the permits it asked to share, and the number stored with
        /// the semaphore when it was refused for asking another one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capacity: Option<Capacity>,
    },
    /// A request dropped before it returned (the cancellation fault: its future was
    /// dropped, by a timeout or an aborted task). The library promises that it leaves
    /// nothing behind: no place in the lock's queue, no lock.
    Cancelled {
        /// Client number.
        client: u32,
        /// Lock name.
        name: String,
        /// Before the request was made.
        t_start: Nanos,
        /// Just after it was dropped.
        t_end: Nanos,
        /// The wait it asked for.
        wait_ms: u64,
        /// `timeout` (one request under a random timeout) or `abort` (two tasks sharing one
        /// Locker, aborted together).
        how: String,
    },
    /// After a request of this client for `name` was cancelled, and no other request of it
    /// was live: the lock key's values seen over the time the dropped request's queue
    /// place could have lived (rule `ghost-grant`).
    CancelProbe {
        /// Client number.
        client: u32,
        /// Lock name.
        name: String,
        /// When the request was dropped.
        t_cancel: Nanos,
        /// The looks, in order.
        looks: Vec<Look>,
    },
    /// The holder asked Redis to extend the lease.
    Extended {
        /// The acquisition.
        id: String,
        /// Before the request was sent.
        t_sent: Nanos,
        /// When the answer came.
        t_reply: Nanos,
        /// The new end of validity the lease reports, when the extension succeeded.
        valid_until: Option<Nanos>,
        /// `ok`, `lost` or the error kind.
        outcome: String,
    },
    /// The holder looked at its lease (auto-renewal moves its validity in the background).
    Observed {
        /// The acquisition.
        id: String,
        /// When.
        t: Nanos,
        /// The end of validity the lease reported then (only logged while not lost).
        valid_until: Nanos,
    },
    /// The library told the holder its lease was lost.
    LostDetected {
        /// The acquisition.
        id: String,
        /// When the holder learned it.
        t: Nanos,
        /// `signal` (`lost().await` fired), `is_lost`, `extend` or `release`.
        how: String,
    },
    /// A write to the fenced resource.
    Write {
        /// The acquisition.
        id: String,
        /// Lock name.
        name: String,
        /// The fencing token sent with it.
        fence: u64,
        /// Before the write was sent.
        t_sent: Nanos,
        /// When the store answered.
        t_reply: Nanos,
        /// What the store said.
        outcome: WriteOutcome,
        /// Whether `lease.is_lost()` said true just before the write.
        lost_reported: bool,
    },
    /// The holder of a semaphore permit or a read-write lock side did its work (where a
    /// lock's holder writes to the fenced store: these have no fencing token), after asking
    /// `is_lost()`.
    Work {
        /// The acquisition.
        id: String,
        /// Lock name.
        name: String,
        /// When it asked (before the work).
        t: Nanos,
        /// Whether `is_lost()` said true.
        lost_reported: bool,
    },
    /// The holder is about to release (logged before the release is sent, so that a
    /// client killed while its release was in flight leaves a trace: its trust ended here).
    Releasing {
        /// The acquisition.
        id: String,
        /// Before the release was sent.
        t: Nanos,
    },
    /// A release.
    Release {
        /// The acquisition.
        id: String,
        /// Before the release was sent.
        t_sent: Nanos,
        /// When the answer came.
        t_reply: Nanos,
        /// What `release()` returned.
        outcome: ReleaseOutcome,
        /// Whether `lease.is_lost()` said true just before the release.
        lost_reported: bool,
    },
    /// A fault the orchestrator injected.
    Fault {
        /// What it did (`kill`, `pause`, `partition`, ...).
        kind: String,
        /// Whom (`node0`, `client3`, ...).
        target: String,
        /// When it began.
        t_start: Nanos,
        /// When it was healed (equal to `t_start` for instant faults).
        t_end: Nanos,
    },
    /// A lock server was down (killed) from `t_start` until its new process was started at
    /// `t_end` (it may serve clients from then on).
    Down {
        /// Node number.
        node: u32,
        /// The SIGKILL.
        t_start: Nanos,
        /// Just before the new server process was spawned.
        t_end: Nanos,
        /// Whether it came back empty (always, persistence is off).
        empty: bool,
    },
    /// A foreign value (a hash) sat on a lock's key from `t_start` to `t_end`.
    Foreign {
        /// The lock name whose key was taken over.
        name: String,
        /// When the hash was in place (the HSETNX answered 1).
        t_start: Nanos,
        /// Before it was removed.
        t_end: Nanos,
    },
    /// `--mode steal`: the orchestrator took a lock's key from its holder, deleting it or
    /// overwriting it with a foreign value, in one script that read it first (only a lease
    /// value is taken). The holder of `token` must be told within the bound (rule
    /// `steal-untold`).
    Steal {
        /// The lock name.
        name: String,
        /// The lease token the key held (without the hand-over mark and holder label).
        token: String,
        /// `del` or `overwrite`.
        how: String,
        /// Before the script was sent.
        t_sent: Nanos,
        /// When its answer came: the key was taken in between.
        t_reply: Nanos,
        /// The server's clock when the script ran (`TIME`, in microseconds).
        server_us: u64,
    },
    /// A nested `#[redis_locked]` call on the lock its enclosing annotated function holds
    /// (the reentrant path: no new acquisition).
    Nested {
        /// The enclosing acquisition.
        id: String,
        /// Before the nested function was called.
        t_call: Nanos,
        /// When its body started, if it ran at all.
        t_body: Option<Nanos>,
        /// When the call returned.
        t_return: Nanos,
        /// `ok`, `lost`, or the error kind.
        outcome: String,
        /// When the body ended, if it ran (absent in logs written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        t_body_end: Option<Nanos>,
        /// For concurrent sibling calls of one body (`join`, `select`, `spawn`): how they
        /// were run; absent for the single nested call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sibling: Option<String>,
    },
    /// A client's runtime did not run from `t_start` to `t_end` (its process was not
    /// scheduled, or a synchronous step held its thread): nothing it awaited could complete.
    Hiccup {
        /// Client number.
        client: u32,
        /// When its ticker should have run.
        t_start: Nanos,
        /// When it ran.
        t_end: Nanos,
    },
    /// A lock server ran no command from `t_start` to `t_end`: the orchestrator's heartbeat
    /// sent it `TIME` at `t_start`, and it ran it at `t_end` (its clock put on the
    /// history's; see `crate::heartbeat`). Nothing a client sent it meanwhile could
    /// complete.
    ServerStall {
        /// The server's port.
        port: u16,
        /// When the heartbeat's command was sent.
        t_start: Nanos,
        /// When the server ran it.
        t_end: Nanos,
        /// The commands of the server's `SLOWLOG` logged since the last look: the command
        /// (and its first argument) and the microseconds it ran. A stall one of them
        /// explains is the server's own work.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        slow: Vec<(String, u64)>,
    },
    /// After an acquire failed with `WrongType`, what the client found on the lock's key on
    /// every node, twice: its own attempt must have left nothing behind.
    Probe {
        /// Client number.
        client: u32,
        /// Lock name.
        name: String,
        /// When the failed request returned.
        t_error: Nanos,
        /// The looks, in order.
        looks: Vec<Look>,
    },
    /// The deployment a run used (the first line of the orchestrator's log), so that a kept
    /// history can be re-checked by itself.
    Topology {
        /// `single`, `redlock`, `cluster` or `sentinel`.
        topology: String,
        /// Lock servers (Redlock's node count; 1 otherwise).
        nodes: u32,
    },
    /// A master of a replicated deployment (Cluster, Sentinel) failed or handed over, and
    /// what came of it. The checker uses it, with [`Event::Granted`], to tell the overlaps
    /// that asynchronous replication explains from those it does not.
    Failover(Failover),
    /// An election's observer was told of a change of leadership ([`Observer::next`]):
    /// rule `observer-order`.
    ///
    /// [`Observer::next`]: lock_core::Observer::next
    LeaderSeen {
        /// Client number.
        client: u32,
        /// Which observer of the client (a new one after an error): changes are promised
        /// in order per observer.
        observer: u32,
        /// The election's name.
        name: String,
        /// When the change was delivered.
        t: Nanos,
        /// The term elected or resigned.
        term: u64,
        /// `true` for `Elected`, `false` for `Resigned` (or `Expired`).
        elected: bool,
        /// `Expired`: the leader's lease ran out unrenewed and nobody took over.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        expired: bool,
    },
    /// A scheduled run's job began (logged from inside the job, so that a replica killed
    /// mid-run leaves its run in the history).
    RunStarted(RunStarted),
    /// A replica's timer fired for a tick, and what came of it.
    TickDone(TickDone),
    /// The deadlock workload: a nested request, what its task held while it waited, and
    /// how the wait ended (see [`crate::waits`]).
    Waited(crate::waits::Waited),
    /// A data node of a replicated deployment executed a successful acquire script for a
    /// lease (seen on the node's `MONITOR` stream): which server granted which lease.
    Granted {
        /// The node's port.
        node: u16,
        /// When the node executed it (its own time stamp, converted to the shared clock).
        t: Nanos,
        /// The lease token the lock key was set to.
        token: String,
        /// The key the grant wrote (the lock key, or a permit set's holders key); absent in
        /// logs written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// When the grant ends by the server's clock, on the shared clock: the lock key's
        /// `PX`, or the permit's score (its end). Absent when the command did not say.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<Nanos>,
    },
    /// A data node of a replicated deployment removed a grant seen before
    /// ([`Event::Granted`]) by a script: the permit's member removed from its set, or the
    /// lock key deleted or set to another lease. Ends, with its `until`, the time the server
    /// held the name for a grant that no client reported taking (an attempt given back, a
    /// request that ended while its grant waited for replica acknowledgements).
    Ungranted {
        /// The node's port.
        node: u16,
        /// When the node executed it (the shared clock).
        t: Nanos,
        /// The lease token of the grant removed.
        token: String,
    },
    /// A semaphore's capacity changed while in use (`--primitive weighted`).
    CapacitySet(CapacitySet),
    /// A read-write lock's write lease stepped down to a read lease.
    Downgraded(Downgraded),
    /// A latch round armed (or refused).
    LatchArm(LatchArm),
    /// A latch counted down (or refused).
    LatchCount(LatchCount),
    /// A wait on a latch, and how it ended.
    LatchWait(LatchWait),
}

/// Whether an offset is none (left out of the log).
fn is_zero(n: &i64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_written_before_waits_were_recorded_still_read() {
        let start = r#"{"ev":"start","client":0,"pid":1,"t":2,"protocol":"scripts"}"#;
        let acquired = r#"{"ev":"acquired","id":"c0.t0.1","client":0,"task":0,"name":"n","token":"t","fence":1,"call_start":1,"attempt_start":2,"acquired":3,"valid_until":4,"ttl_ms":200,"auto_renew":false}"#;
        match serde_json::from_str(start).unwrap() {
            Event::Start {
                command_timeout_ms, ..
            } => assert_eq!(command_timeout_ms, 0),
            other => panic!("{other:?}"),
        }
        match serde_json::from_str(acquired).unwrap() {
            Event::Acquired(a) => assert_eq!(
                (a.wait_ms, a.annotated, a.kind, a.permits),
                (None, false, HoldKind::Lock, None)
            ),
            other => panic!("{other:?}"),
        }
    }
}
