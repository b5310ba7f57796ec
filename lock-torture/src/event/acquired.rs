//! A granted lease as the client saw it ([`Event::Acquired`](super::Event::Acquired)), and
//! what it holds.

use serde::{Deserialize, Serialize};

use crate::clock::Nanos;

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
    /// For a weighted semaphore request (`acquire_many`, `--primitive weighted`): how many
    /// permits it took at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
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
