//! What requests returned: why an acquire failed, a semaphore request's permits, what the
//! fenced store and a release answered.

use serde::{Deserialize, Serialize};

/// A failed semaphore request's number of permits (see
/// [`Event::AcquireFailed`](super::Event::AcquireFailed)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// The permits the request asked to share.
    pub asked: u64,
    /// The number stored with the semaphore, when the request was refused with
    /// `CapacityMismatch` ([`FailKind::Mismatch`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<u64>,
    /// A weighted request (`acquire_many`): the permits it asked for at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
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
    /// The release future was dropped before it ended (the cancellation fault): at a
    /// random await, its command sent or not. The library finishes it in the background:
    /// whoever waits must be granted as soon as after a completed release (rule
    /// `liveness`, which counts the hold as ended when the release was sent).
    Dropped,
    /// Released by a `#[redis_locked]` function as its body ended, and the function
    /// returned `Ok`: the release returned `Ok(true)`, or failed (the macro logs a failed
    /// release and keeps the body's result, so the two cannot be told apart).
    Implicit,
}
