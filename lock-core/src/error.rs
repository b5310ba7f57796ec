//! The one error type of the crate.

use std::time::Duration;

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

    /// Classifies a Redis error raised while working on lock `name`.
    pub(crate) fn from_redis(name: &str, key: &str, err: redis::RedisError) -> LockError {
        if err.code() == Some("WRONGTYPE") || err.to_string().contains("WRONGTYPE") {
            return LockError::WrongType {
                name: name.to_owned(),
                key: key.to_owned(),
            };
        }
        if let Some(reason) = crate::refusal::misconfiguration(&err, "the server") {
            return LockError::Misconfigured {
                name: name.to_owned(),
                reason,
                source: Some(Box::new(err)),
            };
        }
        if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_timeout()
            || err.is_unrecoverable_error()
        {
            return LockError::Connection {
                name: name.to_owned(),
                reason: err.to_string(),
                source: Some(Box::new(err)),
            };
        }
        // A Cluster's slot whose master failed or changed: redis-rs followed the
        // redirections and waited out CLUSTERDOWN for its 16 tries; the election (a second
        // or two) outlasted them. A waiting request retries, as after a dropped connection.
        if let Some(state) = cluster_in_flux(&err) {
            return LockError::Connection {
                name: name.to_owned(),
                reason: format!("{state} ({err})"),
                source: Some(Box::new(err)),
            };
        }
        if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain) {
            return LockError::SlotMigrating {
                name: name.to_owned(),
                source: err,
            };
        }
        LockError::Redis {
            name: name.to_owned(),
            source: err,
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

/// `duration` as it is written in this project's grammar (`0s`, `1500ms` as `1s500ms`,
/// `25h`, `1m30s`), for messages that quote a setting back: not `Debug`'s `0ns` or
/// `90000s`. A part below a millisecond, which the grammar cannot write, is shown as
/// `Debug` shows it.
pub(crate) fn shown(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".to_owned();
    }
    if !duration.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{duration:?}");
    }
    let mut millis = duration.as_millis();
    let mut out = String::new();
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        if millis >= size {
            out.push_str(&format!("{}{unit}", millis / size));
            millis %= size;
        }
    }
    out
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

/// The end of a full semaphore's message: what to do.
/// "all 8 permits of `x` are taken", or for a request of several, "6 of the 8 permits of
/// `x` are not free".
fn limit_head(name: &str, permits: u64, asked: u64, waited: bool) -> String {
    if asked <= 1 {
        let taken = if waited { "still taken" } else { "taken" };
        return format!("all {permits} permits of `{name}` are {taken}");
    }
    let free = if waited {
        "did not come free"
    } else {
        "are not free"
    };
    format!("{asked} of the {permits} permits of `{name}` {free}")
}

fn limit_advice(waited: &Option<Duration>, setting: &WaitSetting) -> String {
    if waited.is_some() {
        ", wait longer or raise the limit".to_owned()
    } else {
        format!(" or wait for a permit with {setting}")
    }
}

/// ` after waiting 2s (the first lease ends in 1.5s unless its holder renews it)`, or what
/// of it is known. Not "frees in at most": a holder that renews keeps it longer.
fn limit_suffix(waited: &Option<Duration>, retry_after: &Option<Duration>) -> String {
    let mut out = String::new();
    if let Some(waited) = waited {
        out.push_str(&format!(" after waiting {waited:?}"));
    }
    if let Some(left) = retry_after {
        out.push_str(&format!(
            " (the first lease ends in {left:?} unless its holder renews it)"
        ));
    }
    out
}

/// What a failed replica check found connected, for its message.
fn connected_suffix(connected: Option<u32>) -> String {
    match connected {
        Some(0) => " (the master has no connected replica)".to_owned(),
        Some(1) => {
            " (1 replica is connected but did not acknowledge: stalled or lagging)".to_owned()
        }
        Some(n) => {
            format!(" ({n} replicas are connected but too few acknowledged: stalled or lagging)")
        }
        None => String::new(),
    }
}

fn holder_suffix(holder: &Option<String>, retry_after: &Option<Duration>) -> String {
    let mut out = String::new();
    if let Some(holder) = holder {
        out.push_str(" (held by ");
        out.push_str(holder);
        out.push(')');
    }
    if let Some(left) = retry_after {
        out.push_str(&format!(", its lease ends in {left:?} unless renewed"));
    }
    out
}

/// What a Cluster's redirection or availability error left after redis-rs's retries says
/// of the cluster, if it is one.
fn cluster_in_flux(err: &redis::RedisError) -> Option<&'static str> {
    use redis::ServerErrorKind as Kind;
    match err.kind() {
        redis::ErrorKind::Server(Kind::Moved | Kind::Ask) => {
            Some("the Redis Cluster kept redirecting the lock's slot to another node (a failover or a slot move under way)")
        }
        redis::ErrorKind::Server(Kind::ClusterDown | Kind::MasterDown) => {
            Some("the Redis Cluster has no master for the lock's slot (a failover under way)")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_message_names_lock_and_holder() {
        let err = LockError::Busy {
            name: "orders:7".into(),
            holder: Some("web-1:42".into()),
            retry_after: Some(Duration::from_millis(1500)),

            wait_setting: Default::default(),
        };
        let text = err.to_string();
        assert!(text.contains("`orders:7`"), "{text}");
        assert!(text.contains("held by web-1:42"), "{text}");
        assert!(text.contains("1.5s"), "{text}");
        // What is known: when the lease ends unless renewed, not when the lock is free.
        assert!(
            text.contains("its lease ends in 1.5s unless renewed"),
            "{text}"
        );
        assert!(!text.contains("at most"), "{text}");
        assert!(err.is_contention());
        assert_eq!(err.retry_after(), Some(Duration::from_millis(1500)));
    }

    /// Issue 27: the advice names the setting where the request's wait is set.
    #[test]
    fn contention_advice_names_the_wait_setting() {
        let busy = |setting| {
            LockError::Busy {
                name: "a".into(),
                holder: None,
                retry_after: None,
                wait_setting: WaitSetting::Request,
            }
            .waiting_through(setting)
            .to_string()
        };
        assert!(busy(WaitSetting::Request).ends_with("wait for it with .wait(..)"));
        assert!(busy(WaitSetting::Attribute)
            .ends_with("wait for it with `wait = \"..\"` on #[redis_locked]"));
        assert!(busy(WaitSetting::Layer).ends_with("wait for it with LockLayer::wait(..)"));
        let timeout = LockError::Timeout {
            name: "a".into(),
            waited: Duration::from_millis(5),
            holder: None,
            retry_after: None,
            wait_setting: WaitSetting::Request,
        }
        .waiting_through(WaitSetting::Layer);
        assert!(
            timeout.to_string().contains("raise LockLayer::wait(..)"),
            "{timeout}"
        );
        // A busy semaphore keeps the setting when it becomes a full one.
        let full = LockError::Busy {
            name: "s".into(),
            holder: None,
            retry_after: None,
            wait_setting: WaitSetting::Attribute,
        }
        .into_limit_of(2, 1);
        assert!(
            full.to_string()
                .ends_with("wait for a permit with `wait = \"..\"` on #[redis_locked]"),
            "{full}"
        );
        // Other errors are left as they are.
        let lost = LockError::Lost { name: "a".into() }.waiting_through(WaitSetting::Layer);
        assert!(matches!(lost, LockError::Lost { .. }));
    }

    /// A Cluster electing a new master for the lock's slot outlasts redis-rs's retries:
    /// what is left is transient, so that a waiting request rides it out.
    #[test]
    fn a_cluster_in_a_failover_is_a_transient_error() {
        use redis::{ErrorKind, ServerErrorKind};
        for (kind, code) in [
            (ServerErrorKind::Moved, "MOVED"),
            (ServerErrorKind::Ask, "ASK"),
            (ServerErrorKind::ClusterDown, "CLUSTERDOWN"),
            (ServerErrorKind::MasterDown, "MASTERDOWN"),
        ] {
            let err = redis::RedisError::from((
                ErrorKind::Server(kind),
                code,
                "14145 127.0.0.1:7001".to_owned(),
            ));
            let err = LockError::from_redis("x", "lock:{x}", err);
            assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
            assert!(err.is_transient(), "{err}");
            assert!(err.to_string().contains("Redis Cluster"), "{err}");
        }
    }

    #[test]
    fn durations_are_shown_as_they_are_written() {
        for (duration, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(1), "1ms"),
            (Duration::from_millis(1500), "1s500ms"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(25 * 3600), "25h"),
            (Duration::from_micros(1500), "1.5ms"),
        ] {
            assert_eq!(shown(duration), text);
        }
        let err = LockError::InvalidDuration {
            name: "a".into(),
            what: "ttl",
            value: Duration::ZERO,
            reason: "r".into(),
        };
        assert_eq!(err.to_string(), "invalid ttl 0s for lock `a`: r");
    }

    #[test]
    fn name_is_none_for_config_errors() {
        assert_eq!(LockError::Config("bad".into()).name(), None);
        assert_eq!(LockError::Lost { name: "a".into() }.name(), Some("a"));
    }
}
