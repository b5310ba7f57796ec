//! The history: one JSON object per line, written by clients and by the orchestrator.
//!
//! Every stamp is [`Nanos`] of `CLOCK_MONOTONIC` (see [`crate::clock`]). An acquisition is
//! named by its `id` (`c<client>.t<task>.<seq>`), and the events that follow it refer to it.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::clock::Nanos;

/// The lease token in a stored lock value: `<token>:<holder label>`, with lock-core's
/// hand-over mark `~` in front while someone is queued for (or listens to) the lock. A token
/// alone (hex, no label, no mark) is returned as it is, so that tokens read by older
/// versions of the harness, which kept the mark, are normalised too.
pub fn lease_token(value: &str) -> &str {
    let value = value.strip_prefix('~').unwrap_or(value);
    value.split_once(':').map_or(value, |(token, _)| token)
}

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
    },
}

/// A scheduled run, as its job saw it begin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStarted {
    /// Client number (the replica).
    pub client: u32,
    /// The job (its lock name).
    pub job: String,
    /// The tick the replica's timer fired for.
    pub tick: u64,
    /// Start of the attempt that took the lock (`lease.acquired_at()`): the minimum hold
    /// counts from here.
    pub attempt_start: Nanos,
    /// When the job began.
    pub t: Nanos,
    /// The lease token.
    pub token: String,
}

/// One fire of a replica's timer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickDone {
    /// Client number (the replica).
    pub client: u32,
    /// The job (its lock name).
    pub job: String,
    /// The tick.
    pub tick: u64,
    /// When `run_once` was called (or the fire was dropped as too late).
    pub t_call: Nanos,
    /// When it returned.
    pub t_return: Nanos,
    /// `ran`, `skipped` (another replica holds the tick), `late` (the timer fired past
    /// the schedule's allowance: not tried), or the error's kind.
    pub outcome: String,
    /// The schedule: between ticks, in ms.
    pub interval_ms: u64,
    /// The schedule: the latest a replica fires, in ms.
    pub max_offset_ms: u64,
    /// The schedule: the minimum hold, in ms.
    pub hold_ms: u64,
}

/// A master that failed (killed or paused) or handed over (a coordinated failover).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failover {
    /// `kill` (SIGKILL, restarted empty afterwards), `pause` (SIGSTOP, then SIGCONT) or
    /// `manual` (a coordinated `CLUSTER FAILOVER`: the replica catches up first).
    pub kind: String,
    /// The port of the master that failed.
    pub old: u16,
    /// The port of the node promoted in its place, if one was.
    pub new: Option<u16>,
    /// The lock names whose keys that master served.
    pub names: Vec<String>,
    /// The SIGKILL, the SIGSTOP, or the failover command.
    pub t_start: Nanos,
    /// When the promoted node was first seen answering as a master.
    pub t_promoted: Option<Nanos>,
    /// When the old master was seen answering as a replica again (or the fault gave up
    /// waiting): until then it may have served clients as a master of its own.
    pub t_end: Nanos,
    /// What each replica of the old master held for each name, read right after the
    /// failure (replication had stopped): what a promoted replica starts from.
    pub copies: Vec<ReplicaCopy>,
    /// When the deployment was seen whole again afterwards: every master serving the
    /// locks with a replica in sync (`None` in histories of older harnesses, or when it
    /// was not whole within the fault's recovery limit). With the replica acknowledgement
    /// check on, a promoted master grants nothing before that: its replica (the old master
    /// demoted, or restarted empty) needs a full resync, which Redis's default
    /// `repl-diskless-sync-delay` of 5 s postpones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_whole: Option<Nanos>,
}

/// One lock's keys on one replica, read right after its master failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaCopy {
    /// The replica's port.
    pub node: u16,
    /// Lock name.
    pub name: String,
    /// The lease token on the lock key, if the key was there.
    pub token: Option<String>,
    /// When that key was to expire (the replica's PTTL, on the shared clock).
    pub expires: Option<Nanos>,
    /// The fencing counter.
    pub fence: u64,
}

/// One read of a lock key on one node, by a [`Event::Probe`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Look {
    /// When the answer came.
    pub t: Nanos,
    /// Node number.
    pub node: u32,
    /// The string value (`<token>:<holder label>`); absent when there was no string there
    /// (no key, the foreign hash, or no answer).
    pub value: Option<String>,
}

/// A granted lock, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquired {
    /// `c<client>.t<task>.<seq>`, unique in a run.
    pub id: String,
    /// Client number.
    pub client: u32,
    /// Task number within the client.
    pub task: u32,
    /// Lock name.
    pub name: String,
    /// The lease token (32 hex digits).
    pub token: String,
    /// The fencing token.
    pub fence: Option<u64>,
    /// Before the request was made (it may have waited).
    pub call_start: Nanos,
    /// Start of the attempt that succeeded (`lease.acquired_at()`).
    pub attempt_start: Nanos,
    /// When the lease was handed to the client.
    pub acquired: Nanos,
    /// `acquired + lease.expires_in()`: the end of validity the library promised.
    pub valid_until: Nanos,
    /// The TTL asked for, in milliseconds.
    pub ttl_ms: u64,
    /// Whether the lease was auto-renewed.
    pub auto_renew: bool,
    /// The wait the request asked for (absent in logs written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Taken by a `#[redis_locked]` function (fencing on by the locker's default, no
    /// renewal, released by the macro when its body ends).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub annotated: bool,
    /// What was taken: a lock (absent from the log), a semaphore permit, or a read-write
    /// lock's read or write side.
    #[serde(default, skip_serializing_if = "HoldKind::is_lock")]
    pub kind: HoldKind,
    /// For a semaphore permit: how many permits the request asked to share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u64>,
    /// Taken by a multi-lock (`Locker::lock_all`): every name of its set. A multi-lock is
    /// logged as one acquisition per name (`<id>/<name>`), all with the same stamps; it
    /// has no fencing token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<Vec<String>>,
}

/// What an acquisition holds.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    /// The exclusive lock.
    #[default]
    Lock,
    /// One permit of a semaphore.
    Permit,
    /// The shared side of a read-write lock.
    Read,
    /// The exclusive side of a read-write lock.
    Write,
    /// An election's leadership (its lock, renewed, with the term as fencing token).
    Leader,
}

impl HoldKind {
    /// True for the lock (the default, left out of the logs).
    pub fn is_lock(&self) -> bool {
        *self == HoldKind::Lock
    }

    /// Which family of keys it lives in: acquisitions of one family and one name are
    /// judged together (a read and a write side of one name meet, a lock and a permit of
    /// the same name never do).
    pub fn family(self) -> &'static str {
        match self {
            HoldKind::Lock => "lock",
            HoldKind::Permit => "semaphore",
            HoldKind::Read | HoldKind::Write => "rwlock",
            HoldKind::Leader => "election",
        }
    }
}

/// A failed semaphore request's number of permits (see [`Event::AcquireFailed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// The permits the request asked to share.
    pub asked: u64,
    /// The number stored with the semaphore, when the request was refused with
    /// `CapacityMismatch` ([`FailKind::Mismatch`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<u64>,
}

/// Why an acquire failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// Busy or timed out waiting: the lock was held.
    Contention,
    /// Redis unreachable, a broken connection, a command deadline, an exhausted pool.
    Connection,
    /// Redlock: no majority of nodes agreed (some down, slow, or held by others).
    NoQuorum,
    /// A foreign value sat on the key.
    WrongType,
    /// Too few replicas acknowledged the grant in time (lock-core's replica check): undone.
    NotReplicated,
    /// A semaphore request asked for another number of permits than the one stored with
    /// the semaphore while it was in use (`CapacityMismatch`).
    Mismatch,
    /// Any other Redis error.
    Redis,
    /// Anything else.
    Other,
}

/// What the fenced store answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteOutcome {
    /// The token was above every token seen for the name: written.
    Accepted,
    /// A token at least as high had been seen: refused.
    Rejected,
    /// The store could not be asked.
    Error,
}

/// What `Lease::release` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseOutcome {
    /// `Ok(true)`: we still held it, it is deleted.
    Released,
    /// `Ok(false)`: it had expired or been taken over; nothing was deleted.
    NotHeld,
    /// `Err(..)`: unknown.
    Error,
    /// Released by a `#[redis_locked]` function as its body ended, and the function
    /// returned `Ok`: the release returned `Ok(true)`, or failed (the macro logs a failed
    /// release and keeps the body's result, so the two cannot be told apart).
    Implicit,
}

/// An append-only JSON-lines log, flushed after every event so that a killed or stopped
/// process leaves every event it logged on disk. Shared by the tasks of one process.
#[derive(Debug)]
pub struct Log {
    out: Mutex<BufWriter<File>>,
}

impl Log {
    /// Creates (truncates) the log at `path`.
    pub fn create(path: &Path) -> io::Result<Log> {
        Ok(Log {
            out: Mutex::new(BufWriter::new(File::create(path)?)),
        })
    }

    /// Appends one event.
    pub fn write(&self, event: &Event) -> io::Result<()> {
        let mut line = serde_json::to_vec(event).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        out.write_all(&line)?;
        out.flush()
    }
}

/// Whether an offset is none (left out of the log).
fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Reads a log. A last line cut short (the process was killed while writing it) is skipped;
/// a malformed line elsewhere is an error.
pub fn read_log(path: &Path) -> io::Result<Vec<Event>> {
    let lines: Vec<String> = BufReader::new(File::open(path)?)
        .lines()
        .collect::<io::Result<_>>()?;
    let mut events = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(event) => events.push(event),
            Err(_) if i + 1 == lines.len() => {}
            Err(err) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}:{}: {err}", path.display(), i + 1),
                ))
            }
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_tolerates_a_cut_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c0.jsonl");
        let log = Log::create(&path).unwrap();
        let event = Event::Release {
            id: "c0.t0.1".into(),
            t_sent: 1,
            t_reply: 2,
            outcome: ReleaseOutcome::NotHeld,
            lost_reported: true,
        };
        log.write(&event).unwrap();
        drop(log);
        let mut text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""ev":"release""#), "{text}");
        text.push_str(r#"{"ev":"relea"#);
        std::fs::write(&path, text).unwrap();
        assert_eq!(read_log(&path).unwrap(), vec![event]);
    }

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
