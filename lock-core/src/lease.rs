//! The guard of a held lock, and its shareable view (facade): the engine's lease state
//! ([`Held`]) with the engine that releases it.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tracing::Instrument as _;

use crate::engine::held::Held;
use crate::engine::Engine;
use crate::LockError;

/// A held lock. Release it with [`Lease::release`]; dropping it releases it in the
/// background (when a tokio runtime is available), and its TTL frees it in any case.
///
/// Prefer `release().await` where you can: it reports whether the lease was still ours, and a
/// background release spawned just before the runtime shuts down (a lease dropped at the end
/// of `main`) may never run, leaving the lock to its TTL, unless the program awaits
/// [`Locker::shutdown`](crate::Locker::shutdown) last.
///
/// The read-only view ([`LeaseHandle`]: name, token, fencing token, validity, loss signal)
/// is reachable through `Deref`, and can be cloned out with [`Lease::handle`] for code that
/// must watch the lease without owning it.
///
/// ```
/// use lock_core::Locker;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory();
/// let lease = locker.lock("invoice:42").ttl(Duration::from_secs(10)).await?;
/// assert_eq!(lease.name(), "invoice:42");
/// assert!(lease.expires_in() <= Duration::from_secs(10));
/// lease.extend(Duration::from_secs(20)).await?;
/// assert!(lease.release().await?, "we still held it");
/// # Ok(())
/// # }
/// ```
#[must_use = "a lock is released as soon as its Lease is dropped; bind it: `let _lease = ...`"]
pub struct Lease {
    engine: Arc<Engine>,
    held: Arc<Held>,
    /// The same lease as a view (`Deref`, [`Lease::handle`]), made on first use: a lease
    /// released without one never clones the engine and state for it (each clone is a
    /// reference count that every task of the Locker shares).
    handle: OnceLock<LeaseHandle>,
    released: bool,
}

/// A cheap, cloneable view of a lease: who, until when, and whether it was lost. It does not
/// keep the lock held and cannot release it.
///
/// [`current_lease`](crate::current_lease) inside a `#[redis_locked]` function with
/// `permits`, `mode` or `keys` returns a view of that hold (a semaphore permit, a read-write
/// lock side, a multi-lock) in this type too: its name, token, validity and loss signal;
/// it has no fencing token, and [`key`](LeaseHandle::key) is its name.
#[derive(Clone)]
pub struct LeaseHandle {
    of: Of,
}

#[derive(Clone)]
enum Of {
    /// A lock's lease.
    Lock {
        engine: Arc<Engine>,
        held: Arc<Held>,
    },
    /// Another hold: a permit, a read-write lock side, a multi-lock.
    Hold(Arc<dyn HoldView>),
}

/// What a [`LeaseHandle`] reads from a hold that is not a lock (implemented by the
/// primitives' guard handle), so that `current_lease()` can be the innermost hold.
pub(crate) trait HoldView: Send + Sync {
    fn name(&self) -> &str;
    fn token(&self) -> &str;
    fn acquired_at(&self) -> Instant;
    fn expires_in(&self) -> Duration;
    fn is_lost(&self) -> bool;
    fn lost(&self) -> BoxFuture<'_, ()>;
    fn is_held(&self) -> BoxFuture<'_, Result<bool, LockError>>;
}

impl Lease {
    pub(crate) fn new(engine: Arc<Engine>, held: Arc<Held>) -> Lease {
        Lease {
            engine,
            held,
            handle: OnceLock::new(),
            released: false,
        }
    }

    /// The value stored on the lock (`token[:label]`), for scripts that check ownership.
    pub(crate) fn stored_value(&self) -> &str {
        &self.held.value
    }

    /// The engine the lease was taken through.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// A cloneable view of this lease (for a watchdog, a log line, or a task that must stop
    /// when the lease is lost).
    pub fn handle(&self) -> LeaseHandle {
        (**self).clone()
    }

    /// Gives the lock back. `Ok(true)` if we still held it and it is now free; `Ok(false)` if
    /// it had already expired or been taken over, in which case nothing was deleted: the
    /// current holder's lock is left alone.
    ///
    /// A lease taken with [`hold_at_least`](crate::LockRequest::hold_at_least) whose
    /// minimum hold is not over is given back without freeing the lock: `Ok(true)` then
    /// means the lock is left to expire at the hold's end.
    ///
    /// Through a blip (a dropped connection, a command timeout, a Redis Cluster slot
    /// between masters in a failover) the release is tried again until Redis answers, for
    /// up to the locker's [unreachable timeout](crate::LockerBuilder::unreachable_timeout)
    /// and no longer than the lease's validity, past which its TTL frees the lock anyway;
    /// only then does it return the error. When an attempt's answer was lost and a later
    /// one finds the lock no longer ours, the lost attempt may have freed it: the release
    /// returns that attempt's error, not `Ok(false)`.
    ///
    /// Cancellation-safe: a release dropped before it ends (a `select!` that took another
    /// branch, a `timeout`, a shutdown) is finished in the background like the release of
    /// a dropped lease, whether or not its command had reached Redis: the lock is freed
    /// for every Locker within a round trip (or once Redis answers again, within the same
    /// bounds), and this task's next request for the name behaves as after a completed
    /// release.
    pub async fn release(mut self) -> Result<bool, LockError> {
        // Borrowed, not cloned: the lease lives until the release ends. `released` is set
        // only once it has ended: dropped before then, the lease's `Drop` sends it again.
        let (engine, held) = (&self.engine, &self.held);
        let span = tracing::debug_span!(
            "lock.release",
            name = %held.keys.name,
            held_ms = held.acquired_at().elapsed().as_millis() as u64,
            held = tracing::field::Empty,
        );
        let recording = !span.is_disabled();
        // Pinned in place, the span around a reference to it (see `engine::acquire`).
        let released = std::pin::pin!(async move {
            let released = held.release_now(engine.backend(), false).await;
            if let Ok(still_held) = released {
                if recording {
                    tracing::Span::current().record("held", still_held);
                }
                if !still_held {
                    tracing::warn!(name = %held.keys.name, "released a lease that had already expired or been taken over");
                }
            }
            released
        });
        let released = released.instrument(span).await;
        self.released = true;
        released
    }

    /// Resets the TTL to `ttl` from now. Fails with [`LockError::Lost`] if the lock is no
    /// longer ours (it expired or was removed); the lease is then marked lost. It fails the
    /// same way when Redis applied the extension but its answer came after the lease's
    /// validity had run out (loss is final): the lock, still ours in Redis, is then given
    /// back at once rather than held for nobody. Auto-renewal does the same.
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        self.held.local.used_here(self.held.serial);
        self.held.extend(self.engine.backend(), ttl).await
    }
}

impl Deref for Lease {
    type Target = LeaseHandle;

    fn deref(&self) -> &LeaseHandle {
        // Used on another task than the one that took it: it was handed over, and no
        // longer counts as that task's for deadlock detection (see `engine/local.rs`).
        self.held.local.used_here(self.held.serial);
        self.handle.get_or_init(|| LeaseHandle {
            of: Of::Lock {
                engine: Arc::clone(&self.engine),
                held: Arc::clone(&self.held),
            },
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (engine, held) = (&self.engine, &self.held);
        // A release already started and dropped before it ended: its command may have
        // reached Redis or not, and its end (the local holder cleared, local waiters
        // woken) never ran. Sending it again is safe: a compare-and-delete that finds the
        // value gone, or already handed to the next waiter, changes nothing.
        let again = held.is_finished();
        held.finish();
        held.disown_locally();
        let releasing = Arc::clone(held);
        let owner = Arc::clone(engine);
        let spawned = engine.spawn_background(async move {
            if let Err(err) = releasing.release_now(owner.backend(), again).await {
                tracing::warn!(name = %releasing.keys.name, %err, "background release of a dropped lease failed; its TTL will free it");
            }
        });
        if !spawned {
            tracing::debug!(name = %held.keys.name, "lease dropped outside a tokio runtime; its TTL will free it");
            held.forget_locally();
        }
    }
}

impl LeaseHandle {
    /// A view of a hold that is not a lock, for `current_lease()`.
    pub(crate) fn of_hold(hold: Arc<dyn HoldView>) -> LeaseHandle {
        LeaseHandle { of: Of::Hold(hold) }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        match &self.of {
            Of::Lock { held, .. } => &held.keys.name,
            Of::Hold(hold) => hold.name(),
        }
    }

    /// The Redis key that holds the lock (for a permit, read-write lock or multi-lock
    /// hold, which spans several keys: its name).
    pub fn key(&self) -> &str {
        match &self.of {
            Of::Lock { held, .. } => &held.keys.lock,
            Of::Hold(hold) => hold.name(),
        }
    }

    /// The 128-bit random token (32 hex digits) that proves ownership.
    pub fn token(&self) -> &str {
        match &self.of {
            Of::Lock { held, .. } => held.token(),
            Of::Hold(hold) => hold.token(),
        }
    }

    /// The fencing token drawn at acquire time, when fencing was on: strictly increasing per
    /// lock name, so a store can reject writes from a holder older than the last one it saw.
    pub fn fencing_token(&self) -> Option<u64> {
        match &self.of {
            Of::Lock { held, .. } => held.fencing_token,
            Of::Hold(_) => None,
        }
    }

    /// When the lock was acquired (the start of the successful attempt).
    pub fn acquired_at(&self) -> Instant {
        match &self.of {
            Of::Lock { held, .. } => held.acquired_at(),
            Of::Hold(hold) => hold.acquired_at(),
        }
    }

    /// How long this lease is still valid by the local clock, with a margin for clock drift
    /// between this process and Redis. Zero once it has run out.
    pub fn expires_in(&self) -> Duration {
        match &self.of {
            Of::Lock { held, .. } => held.expires_in(),
            Of::Hold(hold) => hold.expires_in(),
        }
    }

    /// True once the lease is known to be lost: its validity ran out, or Redis said the lock
    /// is no longer ours. A cheap local check; [`LeaseHandle::is_held`] asks Redis.
    pub fn is_lost(&self) -> bool {
        match &self.of {
            Of::Lock { held, .. } => held.is_lost(),
            Of::Hold(hold) => hold.is_lost(),
        }
    }

    /// Completes when the lease is lost: at the end of its local validity (unless extended
    /// before, by hand or by auto-renewal), or as soon as an operation or the renewer learns
    /// that the lock is no longer ours.
    pub async fn lost(&self) {
        match &self.of {
            Of::Lock { held, .. } => held.lost().await,
            Of::Hold(hold) => hold.lost().await,
        }
    }

    /// Asks Redis whether the lock still holds this lease's token. Marks the lease lost if not.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        match &self.of {
            Of::Lock { engine, held } => held.is_held(engine.backend()).await,
            Of::Hold(hold) => hold.is_held().await,
        }
    }

    /// True when this is a lease on the lock `name` taken through `engine` (a clone of one
    /// Locker); never for other holds.
    pub(crate) fn same_lock(&self, engine: &Arc<Engine>, name: &str) -> bool {
        match &self.of {
            Of::Lock { engine: ours, held } => Arc::ptr_eq(ours, engine) && held.keys.name == name,
            Of::Hold(_) => false,
        }
    }

    /// The state of this lease when it is a lock's lease of `engine` (one Locker's clones).
    pub(crate) fn held_of(&self, engine: &Arc<Engine>) -> Option<Arc<Held>> {
        match &self.of {
            Of::Lock { engine: ours, held } if Arc::ptr_eq(ours, engine) => Some(Arc::clone(held)),
            _ => None,
        }
    }

    /// True for a lock's lease (which nested calls may borrow), false for other holds.
    pub(crate) fn is_lock(&self) -> bool {
        matches!(self.of, Of::Lock { .. })
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .field("expires_in", &self.expires_in())
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a secret: whoever has it can release the lock.
        f.debug_struct("LeaseHandle")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .field("expires_in", &self.expires_in())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}
