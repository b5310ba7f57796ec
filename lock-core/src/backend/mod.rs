//! The ways of talking to a lock store, behind one internal trait: the layer under the
//! engine and over the connections (see `lock-core/ARCHITECTURE.md`).
//!
//! Every backend gives the same guarantees (see the crate docs); the behavioural test suite
//! runs against each of them.

use std::future::Future;
use std::time::Duration;

use crate::key::LockKeys;
use crate::LockError;

pub(crate) mod board;
pub(crate) mod latch;
pub(crate) mod lua;
pub(crate) mod memory;
pub(crate) mod permits;
pub(crate) mod prim_scripts;
pub(crate) mod redlock;
pub(crate) mod replicated;
pub(crate) mod scripted;
pub(crate) mod ticket;
pub(crate) mod transaction;
pub(crate) mod waits;

/// The result of one attempt to take a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Taken; with the fencing token when one was asked for. `listened`: the value was
    /// stored with the listened-for mark (others wait), so its release must hand over.
    Acquired {
        fencing_token: Option<u64>,
        listened: bool,
    },
    /// Someone else holds it.
    Busy {
        /// The holder's remaining TTL, when it has one.
        remaining: Option<Duration>,
        /// The value stored by the holder (`token[:label]`).
        holder_value: Option<String>,
        /// Our place in the lock's waiter queue, for a queued attempt.
        place: Option<Place>,
    },
}

impl Attempt {
    /// Busy, with nothing known about the holder.
    pub fn busy_unknown() -> Attempt {
        Attempt::Busy {
            remaining: None,
            holder_value: None,
            place: None,
        }
    }
}

/// Where a queued attempt left this Locker in the lock's waiter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    /// 0: first in line (of those still in it: a waiter the lock is reserved for has left
    /// the line).
    pub position: u64,
    /// The lock is reserved for a waiter ahead of us (its claim window is `remaining`).
    pub head_reserved: bool,
}

/// How an attempt is made.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AttemptKind<'a> {
    /// One try; a busy answer says how long the holder has left.
    Try,
    /// A try by a waiter that learns of releases on the lock's release channel rather than
    /// through the waiter queue (WATCH/MULTI): a busy answer also marks the holder's value
    /// as listened for (see `scripts/queue.lua`), so that its release is announced there
    /// whichever protocol its holder uses. Otherwise a [`AttemptKind::Try`].
    Listening,
    /// The first try of a request that queues next if the lock is busy (the queued attempt
    /// will tell the holder's TTL, so a busy answer need not).
    BeforeQueueing,
    /// Take the lock if it is free and nobody waits ahead, claim it if it is reserved for
    /// us, or join the lock's waiter queue (backends without a queue make a plain try).
    Queued(&'a Waiter<'a>),
}

/// A waiting Locker, as it stands in a waiter queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waiter<'a> {
    /// The Locker's member in the queue (see [`queue_member`]): its name there, whose
    /// first 16 characters name its channel, where its turn is announced.
    pub member: &'a str,
    /// How long the entry counts if it is not renewed: the request's remaining wait.
    pub life: Duration,
    /// When the request began waiting, in microseconds since the UNIX epoch on the
    /// masters' clock (see [`ticket`]): its place in line on Redlock, the same on every
    /// master, so that their queues agree on the order (one Redis orders by its own clock
    /// instead).
    pub ticket: u64,
    /// The waiter was told its turn (the lock is reserved for it) since its last attempt:
    /// a backend may claim the reservation before anything else.
    pub told_turn: bool,
}

/// Length of a waiter channel's own part: 16 hex digits after `<prefix>waiters:`.
pub(crate) const WAITER_ID_LEN: usize = 16;

/// A Locker's member in waiter queues, from its channel (`<prefix>waiters:<16 hex>`) and
/// holder label: the 16 hex digits, then `:<label>` (so that a lock reserved for it,
/// `?<member>`, names its holder label as any value does). The scripts find its channel
/// again as the waiters' prefix and the member's first 16 characters.
pub(crate) fn queue_member(channel: &str, label: Option<&str>) -> String {
    let id = channel
        .len()
        .checked_sub(WAITER_ID_LEN)
        .and_then(|start| channel.get(start..))
        .unwrap_or(channel);
    match label {
        Some(label) => format!("{id}:{label}"),
        None => id.to_owned(),
    }
}

/// How long a waiter whose turn has come has to claim the lock before the next in line
/// may take it. Longer than a round trip and a wake-up on a busy machine, short enough
/// that a dead, paused or partitioned waiter costs the queue little.
pub(crate) const CLAIM_WINDOW: Duration = Duration::from_millis(100);

/// What is stored on a lock right now, for [`crate::Locker::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawState {
    pub value: Option<String>,
    pub remaining: Option<Duration>,
    pub fencing_counter: Option<u64>,
    /// How many replicas acknowledged the current value, when the replica check is on and
    /// a value is there.
    pub on_replicas: Option<u32>,
}

/// One way of storing locks. Implementations must make `acquire`, `release` and `extend`
/// atomic with respect to each other on the same key, and must never touch a lock whose
/// value differs from the one given.
pub(crate) trait Backend: Send + Sync {
    /// One attempt: take the lock if free. Dropping the returned future at any point must
    /// not leave the lock held in the normal case (undo in the background if needed).
    fn acquire(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
        fencing: bool,
        kind: AttemptKind<'_>,
    ) -> impl Future<Output = Result<Attempt, LockError>> + Send;

    /// Takes `waiter` out of the lock's waiter queue, passing on a reservation it did not
    /// claim. Backends without a queue have nothing to do.
    fn leave_queue(
        &self,
        _keys: &LockKeys,
        _waiter: &str,
    ) -> impl Future<Output = Result<(), LockError>> + Send {
        async { Ok(()) }
    }

    /// Deletes the lock if it still holds `value`. True if it did.
    fn release(
        &self,
        keys: &LockKeys,
        value: &str,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// [`Backend::release`] of a value granted without the listened-for mark: backends on
    /// Lua scripts send a bare compare-and-delete (one key, one argument), and the full
    /// release only if a waiter marked the value since.
    fn release_unlistened(
        &self,
        keys: &LockKeys,
        value: &str,
    ) -> impl Future<Output = Result<bool, LockError>> + Send {
        self.release(keys, value)
    }

    /// Resets the TTL if the lock still holds `value`. True if it did.
    fn extend(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// Extends several leases at once (the auto-renewer's batch); one result per item, in
    /// order. Backends that can pipeline do it in one round trip.
    fn extend_many(
        &self,
        items: &[(&LockKeys, &str, Duration)],
    ) -> impl Future<Output = Vec<Result<bool, LockError>>> + Send {
        async move {
            let mut results = Vec::with_capacity(items.len());
            for (keys, value, ttl) in items {
                results.push(self.extend(keys, value, *ttl).await);
            }
            results
        }
    }

    /// What is stored on the lock.
    fn inspect(&self, keys: &LockKeys) -> impl Future<Output = Result<RawState, LockError>> + Send;
}

/// The backend a [`crate::Locker`] was built with. An enum rather than a trait object so the
/// hot path has no boxing and no virtual calls.
pub(crate) enum AnyBackend {
    Scripted(scripted::Scripted),
    Transaction(transaction::Transactional),
    Memory(memory::Memory),
    Redlock(redlock::Redlock),
}

impl AnyBackend {
    /// The backend that can end an attempt of `kind` at a deadline through the bound of
    /// its clone of the connection, with no timer of the caller's (see
    /// `Scripted::acquire_cut_at`); `None` when a timer must bound it.
    pub(crate) fn cutting(
        &self,
        kind: AttemptKind<'_>,
        fencing: bool,
    ) -> Option<&scripted::Scripted> {
        match self {
            AnyBackend::Scripted(scripted) if scripted.cuts(kind, fencing) => Some(scripted),
            _ => None,
        }
    }

    /// Whether a try (one attempt, no waiting) started now certainly ends within the command
    /// timeout without a timer of its own.
    pub(crate) fn try_is_bounded(&self) -> bool {
        match self {
            AnyBackend::Scripted(scripted) => scripted.try_is_bounded(),
            AnyBackend::Memory(_) => true,
            // Several round trips (WATCH/MULTI) or nodes, each bounded on its own.
            AnyBackend::Transaction(_) | AnyBackend::Redlock(_) => false,
        }
    }
}

impl AnyBackend {
    /// Whether the attempt that wrote `value` was cut short (dropped) while its grant
    /// waited for replicas: the replica check's required count and timeout, once.
    pub(crate) fn replica_wait_cut(&self, value: &str) -> Option<(u32, Duration)> {
        match self {
            AnyBackend::Scripted(scripted) => scripted.replica_wait_cut(value),
            AnyBackend::Transaction(_) | AnyBackend::Memory(_) | AnyBackend::Redlock(_) => None,
        }
    }
}

impl std::fmt::Debug for AnyBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AnyBackend::Scripted(_) => "Scripted",
            AnyBackend::Transaction(_) => "Transaction",
            AnyBackend::Memory(_) => "Memory",
            AnyBackend::Redlock(_) => "Redlock",
        })
    }
}

macro_rules! dispatch {
    ($self:ident, $b:ident => $call:expr) => {
        match $self {
            AnyBackend::Scripted($b) => $call.await,
            // Boxed, and built out of line: their futures are large (a spawned task, WATCH
            // retries, a round on every master) and would otherwise grow every future, and
            // the stack frame of every poll, of the scripted hot path that shares this
            // state machine (see `out_of_line.rs`).
            AnyBackend::Transaction($b) => crate::out_of_line::boxed(|| $call).await,
            AnyBackend::Memory($b) => $call.await,
            AnyBackend::Redlock($b) => crate::out_of_line::boxed(|| $call).await,
        }
    };
}

impl Backend for AnyBackend {
    async fn acquire(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
        fencing: bool,
        kind: AttemptKind<'_>,
    ) -> Result<Attempt, LockError> {
        dispatch!(self, b => b.acquire(keys, value, ttl, fencing, kind))
    }

    async fn leave_queue(&self, keys: &LockKeys, waiter: &str) -> Result<(), LockError> {
        dispatch!(self, b => b.leave_queue(keys, waiter))
    }

    async fn release(&self, keys: &LockKeys, value: &str) -> Result<bool, LockError> {
        dispatch!(self, b => b.release(keys, value))
    }

    async fn release_unlistened(&self, keys: &LockKeys, value: &str) -> Result<bool, LockError> {
        dispatch!(self, b => b.release_unlistened(keys, value))
    }

    async fn extend(&self, keys: &LockKeys, value: &str, ttl: Duration) -> Result<bool, LockError> {
        dispatch!(self, b => b.extend(keys, value, ttl))
    }

    async fn inspect(&self, keys: &LockKeys) -> Result<RawState, LockError> {
        dispatch!(self, b => b.inspect(keys))
    }

    async fn extend_many(
        &self,
        items: &[(&LockKeys, &str, Duration)],
    ) -> Vec<Result<bool, LockError>> {
        dispatch!(self, b => b.extend_many(items))
    }
}

/// Milliseconds for a PX/PEXPIRE argument; validated TTLs always fit.
pub(crate) fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// A PTTL reply as a duration: negative replies (no TTL, no key) mean "unknown".
pub(crate) fn remaining_from_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// The lock key a WRONGTYPE answer about several lock keys was about: the first of `keys`
/// whose type (`types`, the `TYPE` replies in the same order) is neither a string nor
/// missing. `None` when none is (the value changed since).
pub(crate) fn foreign_key<'k>(keys: &'k [LockKeys], types: &[String]) -> Option<&'k LockKeys> {
    keys.iter()
        .zip(types)
        .find(|(_, kind)| *kind != "string" && *kind != "none")
        .map(|(key, _)| key)
}
