//! The one error type of the crate: [`LockError`] and what its messages are made of.
//!
//! - this file: the type, its accessors, and [`WaitSetting`];
//! - [`text`]: the pieces of its messages (durations as the grammar writes them, a full
//!   semaphore's head and advice, a holder, a replica check's finding);
//! - [`from_redis`]: which `LockError` a Redis error is.

use std::time::Duration;

mod from_redis;
mod text;

pub(crate) use text::shown;
use text::{connected_suffix, holder_suffix, limit_advice, limit_head, limit_suffix};

/// Everything that can go wrong while taking, keeping or giving back a lock.
///
/// Messages are short, name the lock, and say what to do. Match on the variant to decide;
/// [`LockError::is_contention`] groups the "someone else has it" cases.
///
/// # Which contention error
///
/// The one rule for "someone else has it", whatever the entry point:
///
/// | what was asked for | refused at once (`wait` zero) | refused after waiting |
/// |---|---|---|
/// | a lock: [`Locker::lock`](crate::Locker::lock), `try_lock`, a read-write lock, a multi-lock, `#[redis_locked]`, `LockLayer` | [`Busy`](LockError::Busy) | [`Timeout`](LockError::Timeout) |
/// | a permit of a semaphore: [`Semaphore::acquire`](crate::Semaphore::acquire), `try_acquire`, `#[redis_locked(permits = N)]`, `LockLayer::permits`, `lockctl run --permits` | [`LimitReached`](LockError::LimitReached) with `waited: None` | [`LimitReached`](LockError::LimitReached) with `waited: Some(..)` |
///
/// A semaphore's refusal reads "all 2 permits of \`exports\` are taken" (lockctl adds the
/// holders it reads). [`LockError::is_contention`] is true for all three. A wait that ends
/// while Redis cannot be reached ends with that error ([`Connection`](LockError::Connection)
/// or [`NoQuorum`](LockError::NoQuorum)), not with a contention error.
///
/// Messages are meant for logs and operators: `Busy` and `Timeout` name the holder
/// (`app@host:pid`). Do not send `to_string()` to untrusted clients; the `axum` feature's
/// `IntoResponse` builds client-safe problem bodies instead.
///
/// ```
/// use lock_core::{LockError, Locker};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let locker = Locker::memory();
/// let _held = locker.try_lock("report:daily", Duration::from_secs(5)).await?;
/// match locker.try_lock("report:daily", Duration::from_secs(5)).await {
///     Err(LockError::Busy { name, .. }) => assert_eq!(name, "report:daily"),
///     other => panic!("expected Busy, got {other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by someone else and the request did not wait (`wait` was zero).
    #[error(
        "lock `{name}` is busy{}; retry later or wait for it with {wait_setting}",
        holder_suffix(holder, retry_after)
    )]
    Busy {
        /// The lock name.
        name: String,
        /// Who holds it, when the holder stored a label.
        holder: Option<String>,
        /// When the current holder's lease runs out unless it is renewed, as Redis reported
        /// it (a holder with auto-renewal keeps the lock longer).
        retry_after: Option<Duration>,
        /// The setting that makes the request wait, named in the advice.
        wait_setting: WaitSetting,
    },

    /// The lock stayed busy for the whole `wait`.
    #[error("timed out after {waited:?} waiting for lock `{name}`{}; raise {wait_setting} or find out why the holder keeps it", holder_suffix(holder, retry_after))]
    Timeout {
        /// The lock name.
        name: String,
        /// How long the request waited.
        waited: Duration,
        /// Who held it at the last attempt, when the holder stored a label.
        holder: Option<String>,
        /// When the holder's lease runs out unless it is renewed, as Redis reported it at the
        /// last attempt.
        retry_after: Option<Duration>,
        /// The setting that made the request wait, named in the advice.
        wait_setting: WaitSetting,
    },

    /// Waiting would close a cycle of waiters: this request's task holds a lock that
    /// another waiter of the cycle waits for, so no one of them could ever get through. The
    /// request fails at once (it is the victim: the request that closes the cycle) and
    /// the others keep waiting; one of them gets through once this task lets go of what it
    /// holds. Retrying after releasing (or in the other order) is safe. `cycle` lists the
    /// locks from the one this request waited for, each held by a waiter of the next;
    /// the last is held by this task. See [`DeadlockLink`](crate::DeadlockLink).
    #[error("waiting for lock `{name}` would deadlock: {}; this request gives up so that the others proceed: release what this task holds and retry, or take the locks in one order everywhere", crate::cycle::cycle_text(cycle))]
    Deadlock {
        /// The lock this request waited for.
        name: String,
        /// The cycle, from `name`: each link's holder waits for the next link's lock; the
        /// last link's lock is held by this request's task.
        cycle: Vec<crate::DeadlockLink>,
    },

    /// Waiting would make a chain of waiters longer than deadlock detection follows
    /// ([`MAX_WAIT_CHAIN`](crate::MAX_WAIT_CHAIN) locks, this task's included): the lock's
    /// holder waits for another lock, whose holder waits for another, and so on past the
    /// limit. Such a chain cannot be checked for a cycle, so the request fails at once
    /// rather than wait in what may be one; the others keep waiting. Only a request whose
    /// task holds other locks of the Locker is refused so. Retrying after releasing is
    /// safe; taking the locks in one order everywhere avoids both this and
    /// [`Deadlock`](LockError::Deadlock).
    #[error("waiting for lock `{name}` would make a chain of more than {limit} locks whose holders wait for one another, longer than deadlock detection follows; this request gives up: release what this task holds and retry, or take the locks in one order everywhere")]
    WaitChainTooLong {
        /// The lock this request waited for.
        name: String,
        /// The longest chain followed ([`MAX_WAIT_CHAIN`](crate::MAX_WAIT_CHAIN)).
        limit: usize,
    },

    /// A semaphore is full: all `permits` permits of `name` are taken, and the request did
    /// not wait (`waited` is `None`) or its wait ran out (`Some`). Every semaphore entry
    /// point says this, never [`Busy`](LockError::Busy) or [`Timeout`](LockError::Timeout)
    /// (see [the rule](LockError#which-contention-error)); on an HTTP handler it is answered
    /// 429 Too Many Requests, not 409 as a busy lock.
    ///
    /// A request for several permits at once ([`Semaphore::acquire_many`](crate::Semaphore::acquire_many))
    /// reads "6 of the 8 permits of \`exports\` are not free".
    #[error("{}{}; retry later{}", limit_head(name, *permits, *asked, waited.is_some()), limit_suffix(waited, retry_after), limit_advice(waited, wait_setting))]
    LimitReached {
        /// The semaphore's name.
        name: String,
        /// How many permits the limit has.
        permits: u64,
        /// How many permits the request asked for (1 but for
        /// [`Semaphore::acquire_many`](crate::Semaphore::acquire_many)).
        asked: u64,
        /// How long the request waited for a permit (`None`: it did not wait).
        waited: Option<Duration>,
        /// When the first permit held ends unless its holder renews it, as Redis reported it.
        retry_after: Option<Duration>,
        /// The setting that makes the request wait, named in the advice.
        wait_setting: WaitSetting,
    },

    /// A semaphore's number of permits is stored with it (in Redis, or in the in-memory
    /// store) by the first request while it is idle, and every request must agree with it
    /// while anyone holds a permit or waits: this one asked for a different number. Nothing
    /// was taken and the request did not wait. Give every process the same number for a
    /// name; to change it while in use, call
    /// [`Semaphore::set_capacity`](crate::Semaphore::set_capacity) (the number it sets wins
    /// over the one requests ask for, so they no longer get this error), or let the
    /// semaphore fall idle (no holder, no waiter: the next request stores its own number).
    #[error("semaphore `{name}` has {stored} permits stored (set by the requests that hold or wait on it), but this request asked for {asked}; use the same number of permits for this name in every process, or change it with Semaphore::set_capacity (or `lockctl capacity`), or once nobody holds or waits (then the next request stores its own number)")]
    CapacityMismatch {
        /// The semaphore's name.
        name: String,
        /// The number of permits stored with the semaphore.
        stored: u64,
        /// The number this request asked for.
        asked: u64,
    },

    /// A request for more permits at once than the semaphore has: it could never be
    /// granted, so it fails at once and takes nothing.
    #[error("cannot take {asked} permits of `{name}` at once: it has only {permits}, so the request could never be granted; ask for at most {permits}, or give the semaphore more permits")]
    PermitsAboveCapacity {
        /// The semaphore's name.
        name: String,
        /// The permits asked for.
        asked: u64,
        /// The semaphore's number of permits.
        permits: u64,
    },

    /// The lease is no longer ours: it expired (the holder overran its TTL), was released,
    /// or was deleted by someone else. Work done under it may have overlapped another holder.
    #[error("lock `{name}` is no longer held by this lease (it expired or was removed); stop the work it guards, or use a longer TTL or auto-renewal")]
    Lost {
        /// The lock name.
        name: String,
    },

    /// Redlock: too few nodes answered to decide (a majority is down or unreachable).
    #[error("lock `{name}`: only {agreed} of {nodes} Redis nodes agreed, {needed} needed ({reason}); bring nodes back or check the network")]
    NoQuorum {
        /// The lock name.
        name: String,
        /// Nodes that granted or confirmed the operation.
        agreed: usize,
        /// The majority needed.
        needed: usize,
        /// Nodes configured.
        nodes: usize,
        /// The first node failure seen.
        reason: String,
    },

    /// Fewer replicas than required acknowledged the write within the sync timeout (see
    /// [`ReplicaSync`](crate::ReplicaSync)): a failover could lose it, so it was not granted
    /// (an acquisition was undone; an extension did not extend the lease's validity). A
    /// waiting request retries within its wait. Persistent: a replica is down or lagging,
    /// or the master was deposed.
    ///
    /// A request that waited reports this, not [`Timeout`](LockError::Timeout), when an
    /// attempt of it was refused by the check (or its wait ran out during the check), even
    /// if later attempts found the lock busy: replication is what failed, and the holder
    /// seen may only be another grant the check refused.
    #[error("lock `{name}`: only {acknowledged} of the {required} required replicas acknowledged the write within {timeout:?}{}, so it was not granted (a failover could lose it); check the replicas (down, lagging, or the master was deposed), raise sync_timeout, or turn the check off with ReplicaSync::Off", connected_suffix(*connected))]
    NotReplicated {
        /// The lock name.
        name: String,
        /// Replicas that acknowledged the write in time.
        acknowledged: u32,
        /// Replicas required.
        required: u32,
        /// How long the check waited.
        timeout: Duration,
        /// How many replicas the master had connected when the check failed (`ROLE`),
        /// when it could be asked: connected but silent replicas are stalled or lagging;
        /// none connected is a master that lost its replicas (`ReplicaSync::Auto` grants
        /// there without waiting; `Required` refuses).
        connected: Option<u32>,
    },

    /// Something that is not a lock (a hash, a list, ...) sits on the lock's key.
    #[error("key `{key}` of lock `{name}` holds a non-string value (WRONGTYPE); another part of the system writes to it: change the lock's prefix or name")]
    WrongType {
        /// The lock name.
        name: String,
        /// The Redis key that holds the foreign value.
        key: String,
    },

    /// Redis could not be reached, the connection broke, or no pooled connection came free
    /// in time.
    #[error(
        "cannot reach Redis for lock `{name}`: {reason}; check the URL and that the server is up"
    )]
    Connection {
        /// The lock name (empty when the failure was not about one lock).
        name: String,
        /// What failed.
        reason: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },

    /// Redis refuses this client whatever is retried: it requires a password the URL does
    /// not give (`NOAUTH`), the user or password is wrong (`WRONGPASS`), the database
    /// number does not exist, or the ACL user may not run a command of the connection's
    /// set-up. Nothing was taken, and the request did not wait: fix the URL or the server's
    /// settings. (An HTTP handler answers it 503, as any unavailability.)
    #[error("cannot use Redis for lock `{name}`: {reason}")]
    Misconfigured {
        /// The lock name (empty when the failure was not about one lock).
        name: String,
        /// What the server refused, and what to change.
        reason: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },

    /// A Redis Cluster refused the operation while the lock's hash slot was being moved to
    /// another node (resharding): only some of the keys the operation declares had moved,
    /// and Redis answers `TRYAGAIN` to such an operation until the move ends. The client
    /// retries for 0.66 s; this is what remains when the move lasted longer. Nothing was
    /// written. A request with a wait retries by itself within its wait (and the locker's
    /// unreachable timeout); one without (`try_lock`, `wait` zero) gets this at once:
    /// retry shortly, or give the request a wait.
    #[error("lock `{name}`: its hash slot is being moved between Redis Cluster nodes, and Redis refuses the operation until the move ends (TRYAGAIN); retry shortly, or give the request a wait so that it retries by itself")]
    SlotMigrating {
        /// The lock name.
        name: String,
        /// The refusal Redis returned.
        #[source]
        source: redis::RedisError,
    },

    /// Redis answered with an error other than the ones above.
    #[error("Redis refused an operation on lock `{name}`: {source}")]
    Redis {
        /// The lock name.
        name: String,
        /// The error Redis returned.
        #[source]
        source: redis::RedisError,
    },

    /// The lock name cannot be used.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The name as given (cut short if it was very long).
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// The TTL (or another duration setting) is out of range.
    #[error("invalid {what} {} for lock `{name}`: {reason}", shown(*value))]
    InvalidDuration {
        /// The lock name.
        name: String,
        /// Which setting: `ttl`, `wait` or `max_hold`.
        what: &'static str,
        /// The refused value.
        value: Duration,
        /// The accepted range.
        reason: String,
    },

    /// The `Locker` could not be built from its configuration (for instance a bad URL).
    #[error("invalid lock configuration: {0}")]
    Config(String),

    /// `#[redis_locked]` without `locker = ..` ran before a default locker was set.
    #[error("no locker for lock `{name}`: call lock_core::set_default_locker(..) at startup, or pass `locker = ..` to #[redis_locked]")]
    NoDefaultLocker {
        /// The lock name.
        name: String,
    },

    /// A plain [`lock`](crate::Locker::lock) (or `try_lock`) of a lock that this task
    /// holds on its call stack: inside a `#[redis_locked]` function, `using` closure or
    /// `LockLayer`-guarded handler of the same `Locker` holding it. A lock is not reentrant
    /// through `lock()`: the request could only succeed after the enclosing body released
    /// the lock, which it can do only once this request ends, so it fails at once instead
    /// of waiting its wait out.
    ///
    /// A [`Lease`](crate::Lease) this task took with plain `lock()` and still holds is not
    /// refused so: a lease may have been moved to another task, which the library cannot
    /// see, so a second `lock()` of its name waits for its release like any request (a
    /// busy or timeout error names the holder "a lease of this Locker, in this process"),
    /// and if the lease is still in this task, the wait runs out.
    #[error("lock `{name}` is already held by this task (an enclosing #[redis_locked] function, `using` closure or LockLayer handler), and lock() is not reentrant: for nested code call a #[redis_locked] function or `using`, which reuse the enclosing lease, or use lock_core::current_lease()")]
    HeldByThisTask {
        /// The lock name.
        name: String,
    },

    /// A countdown latch was counted down or waited on, but there is none under its name:
    /// it was never armed, or its last round expired (its TTL passed). Nothing was changed.
    #[error("latch `{name}` does not exist: it was never armed, or its last round expired (its TTL passed); arm it with Latch::arm(count, ttl) before anyone counts it down or waits on it")]
    LatchNotFound {
        /// The latch's name.
        name: String,
    },

    /// A countdown latch's round expired (its TTL passed) before it opened, while this
    /// request waited on it: the processes counting it down did not all do so in time (one
    /// may have crashed). The work the latch stood for is incomplete.
    #[error("latch `{name}` expired before it opened: the processes counting it down did not all count down within its TTL (one may have crashed); treat its work as incomplete: re-arm it for a new round, or arm it with a longer TTL")]
    LatchExpired {
        /// The latch's name.
        name: String,
    },

    /// A count-down of more than the round has left (a process counted down twice, or more
    /// count-downs than the round was armed for). Nothing was changed.
    #[error("cannot count latch `{name}` down by {asked}: only {remaining} count-downs are left in this round; a process counted down more than once or more than the round was armed for: arm each round with the number of count-downs it needs, and count each down once")]
    LatchCountBelowZero {
        /// The latch's name.
        name: String,
        /// What the round had left.
        remaining: u64,
        /// The count-down asked for.
        asked: u64,
    },

    /// [`Latch::arm`](crate::Latch::arm) while the current round still counts: arming
    /// again would leave that round's waiters waiting for an opening that never comes.
    /// Nothing was changed.
    #[error("latch `{name}` cannot be armed for a new round: the current round still waits for {remaining} count-downs (its waiters would never see it open); count it down to zero, or let it expire, then arm the next round")]
    LatchStillCounting {
        /// The latch's name.
        name: String,
        /// What the current round has left.
        remaining: u64,
    },

    /// A [`Latch::wait`](crate::Latch::wait) whose time ran out before the latch opened.
    #[error("latch `{name}` did not open within {}: {remaining} count-downs were still missing; wait longer, or find out which process has not counted down", shown(*waited))]
    LatchTimeout {
        /// The latch's name.
        name: String,
        /// How long the request waited.
        waited: Duration,
        /// The count-downs still missing at the end.
        remaining: u64,
    },

    /// [`RwLease::upgrade`](crate::RwLease::upgrade) of a read lease: a reader cannot
    /// become the writer in place. Two readers doing so at once would each wait for the
    /// other's read lease to end, forever. The read lease is kept as it was.
    #[error("the read lease of `{name}` cannot be upgraded to the write side: two readers upgrading at once would each wait for the other to leave, forever; release the read lease and ask for the write side (re-read what you read: it may change in between), or take the write side first and downgrade() it once the write is done")]
    UpgradeRefused {
        /// The read-write lock's name.
        name: String,
    },

    /// A call of [`lock_core::blocking`](crate::blocking) was made on a thread that runs
    /// async code (inside a tokio runtime: `#[tokio::main]`, a task, `spawn_blocking`).
    /// Blocking there would stall one of the runtime's worker threads (a current-thread
    /// runtime entirely), so the call did nothing and returned at once. In async code use
    /// the async API ([`blocking::Locker::as_async`](crate::blocking::Locker::as_async)
    /// gives the same locker), or make the call from a thread of your own.
    #[error("lock_core::blocking::{call} was called inside an async runtime, where blocking would stall its worker thread; in async code use the async API with .await (blocking::Locker::as_async() gives the same locker), or call from a std::thread of your own")]
    BlockingInAsync {
        /// The blocking call that was refused (`LockRequest::acquire`, ...).
        call: &'static str,
    },

    /// The operating system's random number generator failed, so no safe token could be made.
    #[error("cannot draw a random token for lock `{name}`: {reason}")]
    Entropy {
        /// The lock name.
        name: String,
        /// What the OS said.
        reason: String,
    },
}

impl LockError {
    /// True for [`Busy`](LockError::Busy), [`Timeout`](LockError::Timeout),
    /// [`Deadlock`](LockError::Deadlock), [`WaitChainTooLong`](LockError::WaitChainTooLong)
    /// and [`LimitReached`](LockError::LimitReached): the lock, or every permit, belongs to
    /// someone else. Such errors are worth retrying later.
    pub fn is_contention(&self) -> bool {
        matches!(
            self,
            LockError::Busy { .. }
                | LockError::Timeout { .. }
                | LockError::Deadlock { .. }
                | LockError::WaitChainTooLong { .. }
                | LockError::LimitReached { .. }
        )
    }

    /// The lock name this error is about, when it is about one.
    pub fn name(&self) -> Option<&str> {
        let name = match self {
            LockError::Busy { name, .. }
            | LockError::Timeout { name, .. }
            | LockError::Deadlock { name, .. }
            | LockError::WaitChainTooLong { name, .. }
            | LockError::LimitReached { name, .. }
            | LockError::CapacityMismatch { name, .. }
            | LockError::PermitsAboveCapacity { name, .. }
            | LockError::Lost { name }
            | LockError::WrongType { name, .. }
            | LockError::Connection { name, .. }
            | LockError::Misconfigured { name, .. }
            | LockError::Redis { name, .. }
            | LockError::SlotMigrating { name, .. }
            | LockError::InvalidName { name, .. }
            | LockError::InvalidDuration { name, .. }
            | LockError::NoDefaultLocker { name }
            | LockError::HeldByThisTask { name }
            | LockError::UpgradeRefused { name }
            | LockError::LatchNotFound { name }
            | LockError::LatchExpired { name }
            | LockError::LatchCountBelowZero { name, .. }
            | LockError::LatchStillCounting { name, .. }
            | LockError::LatchTimeout { name, .. }
            | LockError::Entropy { name, .. }
            | LockError::NoQuorum { name, .. }
            | LockError::NotReplicated { name, .. } => name,
            LockError::Config(_) | LockError::BlockingInAsync { .. } => return None,
        };
        (!name.is_empty()).then_some(name.as_str())
    }

    /// For contention errors: how long until the current holder's lease runs out unless it
    /// is renewed, as Redis reported it. Not a promise that the lock is free then: a holder
    /// that renews (auto-renewal, `extend`) keeps it longer, and the stored value does not
    /// say whether it will. A hint for a `Retry-After` header.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LockError::Busy { retry_after, .. }
            | LockError::Timeout { retry_after, .. }
            | LockError::LimitReached { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
    /// A connection-level failure with no lower error (e.g. a command deadline).
    /// A failure that may pass by itself (a dropped connection, a node out of reach), which
    /// a waiting request retries within its wait.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            LockError::Connection { .. }
                | LockError::NoQuorum { .. }
                | LockError::NotReplicated { .. }
                | LockError::SlotMigrating { .. }
        )
    }

    /// `self`, a contention error on a request of `asked` of a semaphore's `permits`, as
    /// the limit it is: what every semaphore entry point returns when no permit is free.
    pub(crate) fn into_limit_of(self, permits: u64, asked: u64) -> LockError {
        let waited = match &self {
            LockError::LimitReached { .. } => return self,
            LockError::Busy { .. } => None,
            LockError::Timeout { waited, .. } => Some(*waited),
            _ => return self,
        };
        LockError::LimitReached {
            permits,
            asked,
            waited,
            retry_after: self.retry_after(),
            wait_setting: self.wait_setting().unwrap_or_default(),
            name: self.name().unwrap_or_default().to_owned(),
        }
    }

    /// For contention errors: the setting that makes the request wait, which the message
    /// names in its advice.
    fn wait_setting(&self) -> Option<WaitSetting> {
        match self {
            LockError::Busy { wait_setting, .. }
            | LockError::Timeout { wait_setting, .. }
            | LockError::LimitReached { wait_setting, .. } => Some(*wait_setting),
            _ => None,
        }
    }

    /// `self` from a request whose wait `setting` sets: a contention error's advice names
    /// that setting instead of `.wait(..)`. Other errors are returned as they are.
    pub(crate) fn waiting_through(mut self, setting: WaitSetting) -> LockError {
        if let LockError::Busy { wait_setting, .. }
        | LockError::Timeout { wait_setting, .. }
        | LockError::LimitReached { wait_setting, .. } = &mut self
        {
            *wait_setting = setting;
        }
        self
    }

    pub(crate) fn connection(name: &str, reason: impl Into<String>) -> LockError {
        LockError::Connection {
            name: name.to_owned(),
            reason: reason.into(),
            source: None,
        }
    }
}

/// Which setting makes a request wait for a busy lock or a full semaphore: a contention
/// error's advice names it, so that it can be followed where the request was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WaitSetting {
    /// `.wait(..)` on the request: [`Locker::lock`](crate::Locker::lock),
    /// [`Semaphore::acquire`](crate::Semaphore::acquire) and the other builders.
    #[default]
    Request,
    /// `wait = ".."` of `#[redis_locked]`.
    Attribute,
    /// `LockLayer::wait` of the layer that guards the route (feature `tower`).
    Layer,
}

impl std::fmt::Display for WaitSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WaitSetting::Request => ".wait(..)",
            WaitSetting::Attribute => "`wait = \"..\"` on #[redis_locked]",
            WaitSetting::Layer => "LockLayer::wait(..)",
        })
    }
}

#[cfg(test)]
mod tests;
