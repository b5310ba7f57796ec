//! [`FenceError`]: why a guarded write was not applied.

/// Why a guarded write was not applied. Every refusal happened before anything was
/// written: a guarded write is one script (Redis) or one statement (PostgreSQL), so the
/// data and the guard change together or not at all.
///
/// [`FenceError::Stale`] is the one that fencing exists for: the lease's holder paused
/// (or overran its TTL) while another holder took the lock and wrote. Match on it to tell
/// the paused holder why; it names the token the lease had and the one the resource has
/// seen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// A newer holder of the lock has written to the resource: its token is above this
    /// lease's. Nothing was written.
    #[error(
        "write to `{resource}` refused: it has seen fencing token {seen} of lock `{lock}`, \
         above this lease's {token}; a newer holder took the lock and wrote while this \
         holder was paused or past its TTL, so this holder's view of the data is stale: \
         take the lock again and re-read before writing"
    )]
    Stale {
        /// The lock whose tokens the resource compares.
        lock: String,
        /// The key (Redis) or row (PostgreSQL) written to.
        resource: String,
        /// This lease's token.
        token: u64,
        /// The highest token the resource has accepted a write with.
        seen: u64,
    },

    /// The resource is guarded by the tokens of another lock: a token of one lock says
    /// nothing about another's order. Nothing was written.
    #[error(
        "write to `{resource}` refused: it is guarded by the fencing tokens of lock \
         `{guarded_by}`, and this lease is of lock `{lock}`; write it under `{guarded_by}`, \
         or remove its guard if the resource has moved to another lock"
    )]
    OtherLock {
        /// The lease's lock.
        lock: String,
        /// The key (Redis) or row (PostgreSQL) written to.
        resource: String,
        /// The lock whose tokens the resource compares.
        guarded_by: String,
    },

    /// The lease was taken without a fencing token. Nothing was sent.
    #[error(
        "lease of lock `{lock}` carries no fencing token, so a guarded write cannot check it; \
         take the lock with `.fencing()` (or `LockerBuilder::fencing(true)`). Nothing was sent"
    )]
    NotFenced {
        /// The lease's lock.
        lock: String,
    },

    /// A key and its guard (or two keys of one script) are in different Redis Cluster
    /// slots. Nothing was sent.
    #[error(
        "`{key}` (slot {key_slot}) and `{other}` (slot {other_slot}) are in different Redis \
         Cluster slots: a guarded write is one script, and a Cluster runs a script only on \
         keys of one slot; put the part of the key that names the resource in braces (a hash \
         tag, e.g. `inventory:{{item:17}}`), the same in every key of one write. Nothing was sent"
    )]
    CrossSlot {
        /// A key of the write.
        key: String,
        /// Its slot.
        key_slot: u16,
        /// The guard, or another key of the write.
        other: String,
        /// Its slot.
        other_slot: u16,
    },

    /// The script given to a guarded `eval` cannot run under the guard. Nothing was sent.
    #[error("script refused: {reason}")]
    Script {
        /// What is wrong with it.
        reason: String,
    },

    /// This store cannot be built that way (a Locker without one Redis connection).
    #[error("fenced store unavailable: {reason}")]
    Unsupported {
        /// Why, and what to do instead.
        reason: String,
    },

    /// The store answered with something a guarded write does not expect (its guard was
    /// overwritten with another type, a user script raised an error, ...).
    #[error("guarded write to `{resource}` failed: {reason}")]
    Store {
        /// The key or row written to.
        resource: String,
        /// What the store said.
        reason: String,
    },

    /// The store could not be reached, or did not answer within its timeout. When the
    /// request was sent, the write either happened entirely or not at all (a script or a
    /// statement is never applied in part); read the resource to know which.
    #[error(
        "guarded write to `{resource}` failed: {reason}; a write that was sent either applied \
         entirely or not at all"
    )]
    Unavailable {
        /// The key or row written to.
        resource: String,
        /// What failed.
        reason: String,
        /// The driver's error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl FenceError {
    /// True for the refusals that mean "a newer holder has written": [`FenceError::Stale`].
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale { .. })
    }
}
