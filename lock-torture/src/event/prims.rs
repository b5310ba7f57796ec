//! The events of the workloads of issue 43: a semaphore's capacity changed while in use
//! (`--primitive weighted`), a read-write lock's writer stepping down to reader
//! (`--primitive rwlock`), and countdown latches (`--primitive latch`).

use serde::{Deserialize, Serialize};

use crate::clock::Nanos;

/// `Semaphore::set_capacity` on a name of the weighted workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacitySet {
    /// Client number.
    pub client: u32,
    /// The semaphore's name.
    pub name: String,
    /// Before the call was made.
    pub t_sent: Nanos,
    /// When it returned.
    pub t_reply: Nanos,
    /// The number of permits asked for.
    pub permits: u64,
    /// `Ok(before)`: the number stored before (`None`: none was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
    /// `ok`, `refused` (`LockError::Config`: a waiter asks for more) or `error` (unknown
    /// whether it was applied).
    pub outcome: String,
}

/// `RwLease::downgrade` of a write lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Downgraded {
    /// The acquisition (a write side).
    pub id: String,
    /// Before the call was made.
    pub t_sent: Nanos,
    /// When it returned.
    pub t_reply: Nanos,
    /// `ok`, `lost` (the lease had ended) or `error` (Redis unreachable: still the write
    /// lease by the library's word, though the step may have been taken on the server).
    pub outcome: String,
}

/// `Latch::arm`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatchArm {
    /// Client number.
    pub client: u32,
    /// The latch's name.
    pub name: String,
    /// Before the call was made.
    pub t_sent: Nanos,
    /// When it returned.
    pub t_reply: Nanos,
    /// The count asked for.
    pub count: u64,
    /// The round's TTL, in milliseconds.
    pub ttl_ms: u64,
    /// The new round's id when it was armed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u64>,
    /// `armed`, `counting` (`LatchStillCounting`) or the error's kind.
    pub outcome: String,
}

/// `Latch::count_down`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatchCount {
    /// Client number.
    pub client: u32,
    /// The latch's name.
    pub name: String,
    /// Before the call was made.
    pub t_sent: Nanos,
    /// When it returned.
    pub t_reply: Nanos,
    /// The round `Latch::state` showed counting before (for reading the logs; the checker
    /// does not trust it: the round may have changed in between).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_seen: Option<u64>,
    /// What was left after it, when it counted (0: this call opened the round).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<u64>,
    /// `counted`, `below_zero`, `not_found` or the error's kind (`error`: unknown whether it
    /// counted).
    pub outcome: String,
}

/// `Latch::wait`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatchWait {
    /// Client number.
    pub client: u32,
    /// The latch's name.
    pub name: String,
    /// Before the call was made.
    pub t_start: Nanos,
    /// When it returned.
    pub t_end: Nanos,
    /// The timeout it was given, in milliseconds.
    pub timeout_ms: u64,
    /// How it ended.
    pub outcome: WaitOutcome,
}

/// How a latch wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitOutcome {
    /// `Ok`: the round opened.
    Open,
    /// `LatchExpired`: the round ended without opening.
    Expired,
    /// `LatchTimeout`: the wait's own timeout came first.
    Timeout,
    /// `LatchNotFound`: no latch to wait on.
    NotFound,
    /// Anything else (a connection error).
    Error,
}
