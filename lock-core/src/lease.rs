//! The guard of a held lock, and its shareable view.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tracing::Instrument as _;

use crate::backend::Backend as _;
use crate::key::{validate_ttl, LockKeys};
use crate::local::NameRef;
use crate::locker::Locker;
use crate::token::{decode_value, is_ours};
use crate::LockError;

/// A held lock. Release it with [`Lease::release`]; dropping it releases it in the
/// background (when a tokio runtime is available), and its TTL frees it in any case.
///
/// Prefer `release().await` where you can: it reports whether the lease was still ours, and a
/// background release spawned just before the runtime shuts down (a lease dropped at the end
/// of `main`) may never run, leaving the lock to its TTL, unless the program awaits
/// [`Locker::shutdown`] last.
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
    handle: LeaseHandle,
    released: bool,
}

/// A cheap, cloneable view of a lease: who, until when, and whether it was lost. It does not
/// keep the lock held and cannot release it.
#[derive(Clone)]
pub struct LeaseHandle {
    pub(crate) shared: Arc<Shared>,
}

/// Numbers leases of one process, to tell a lease from its successor on the same name.
static SERIALS: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Shared {
    pub locker: Locker,
    pub keys: LockKeys,
    /// `token[:label]`, exactly as stored in Redis.
    pub value: String,
    token_len: usize,
    fencing_token: Option<u64>,
    acquired_at: Instant,
    pub serial: u64,
    /// The TTL each extension (manual or automatic) asks for.
    pub ttl: Duration,
    /// Local end of validity: the start of the last successful acquire or extend, plus TTL,
    /// minus the clock-drift allowance. Its mutex also orders the transitions of `lost`
    /// and `finished` against extensions, so that a renewal reply applied after the lease
    /// ended (released, dropped or lost) can never make it valid, or a local holder, again.
    valid_until: Mutex<Instant>,
    /// Sticky: once set, never cleared.
    lost: AtomicBool,
    /// Set once release has started (sticky): the renewer stops renewing.
    finished: AtomicBool,
    lost_signal: Notify,
    local: NameRef,
}

/// What the acquire loop knows about a fresh lease.
pub(crate) struct Grant {
    pub keys: LockKeys,
    pub value: String,
    pub fencing_token: Option<u64>,
    pub attempt_started: Instant,
    pub ttl: Duration,
    pub local: NameRef,
    /// Keep the lease alive until released, up to this long (`None`: no auto-renewal).
    pub renew: Option<Renewal>,
}

/// Auto-renewal settings of one lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal {
    pub max_hold: Option<Duration>,
}

impl Lease {
    pub(crate) fn new(locker: Locker, grant: Grant) -> Lease {
        let token_len = decode_value(&grant.value).0.len();
        let serial = SERIALS.fetch_add(1, Ordering::Relaxed);
        let valid_until = grant.attempt_started + validity(grant.ttl);
        grant.local.set_holder(serial, valid_until);
        let renew = grant.renew;
        let lease = Lease {
            handle: LeaseHandle {
                shared: Arc::new(Shared {
                    locker,
                    keys: grant.keys,
                    value: grant.value,
                    token_len,
                    fencing_token: grant.fencing_token,
                    acquired_at: grant.attempt_started,
                    serial,
                    ttl: grant.ttl,
                    valid_until: Mutex::new(valid_until),
                    lost: AtomicBool::new(false),
                    finished: AtomicBool::new(false),
                    lost_signal: Notify::new(),
                    local: grant.local,
                }),
            },
            released: false,
        };
        if let Some(renewal) = renew {
            let shared = &lease.handle.shared;
            shared
                .locker
                .renewer()
                .register(&shared.locker, shared, renewal.max_hold);
        }
        lease
    }

    /// A cloneable view of this lease (for a watchdog, a log line, or a task that must stop
    /// when the lease is lost).
    pub fn handle(&self) -> LeaseHandle {
        self.handle.clone()
    }

    /// Gives the lock back. `Ok(true)` if we still held it and it is now free; `Ok(false)` if
    /// it had already expired or been taken over, in which case nothing was deleted: the
    /// current holder's lock is left alone.
    pub async fn release(mut self) -> Result<bool, LockError> {
        self.released = true;
        let shared = Arc::clone(&self.handle.shared);
        let span = tracing::debug_span!(
            "lock.release",
            name = %shared.keys.name,
            held_ms = shared.acquired_at.elapsed().as_millis() as u64,
            held = tracing::field::Empty,
        );
        async move {
            let released = shared.release_now().await;
            if let Ok(held) = released {
                tracing::Span::current().record("held", held);
                if !held {
                    tracing::warn!(name = %shared.keys.name, "released a lease that had already expired or been taken over");
                }
            }
            released
        }
        .instrument(span)
        .await
    }

    /// Resets the TTL to `ttl` from now. Fails with [`LockError::Lost`] if the lock is no
    /// longer ours (it expired or was removed); the lease is then marked lost.
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let shared = &self.handle.shared;
        validate_ttl(&shared.keys.name, ttl)?;
        let started = Instant::now();
        let backend = shared.locker.backend();
        let extended = backend
            .extend(&shared.keys, &shared.value, ttl)
            .await
            .inspect_err(|err| {
                // A foreign value sits on the key: our lock is certainly gone.
                if matches!(err, LockError::WrongType { .. }) {
                    shared.mark_lost();
                }
            })?;
        if !extended || !shared.extended(started, ttl) {
            shared.mark_lost();
            return Err(LockError::Lost {
                name: shared.keys.name.clone(),
            });
        }
        Ok(())
    }
}

impl Deref for Lease {
    type Target = LeaseHandle;

    fn deref(&self) -> &LeaseHandle {
        &self.handle
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let shared = Arc::clone(&self.handle.shared);
        shared.finish();
        let locker = shared.locker.clone();
        let releasing = Arc::clone(&shared);
        let spawned = locker.spawn_background(async move {
            if let Err(err) = releasing.release_now().await {
                tracing::warn!(name = %releasing.keys.name, %err, "background release of a dropped lease failed; its TTL will free it");
            }
        });
        if !spawned {
            tracing::debug!(name = %shared.keys.name, "lease dropped outside a tokio runtime; its TTL will free it");
            shared.local.clear_holder(shared.serial);
        }
    }
}

impl Shared {
    async fn release_now(&self) -> Result<bool, LockError> {
        self.finish();
        let backend = self.locker.backend();
        let result = backend.release(&self.keys, &self.value).await;
        match result {
            Ok(true) => crate::metrics::released(&self.keys.name, self.acquired_at.elapsed()),
            Ok(false) => self.mark_lost(),
            Err(_) => {}
        }
        // Local waiters may go now: after the DEL, so their attempt finds the lock free.
        self.local.clear_holder(self.serial);
        result
    }

    /// Marks the lease as ended by its holder (release or drop): no renewal applies to it
    /// any more.
    fn finish(&self) {
        let _transition = self.state_lock();
        self.finished.store(true, Ordering::Release);
    }

    /// Applies a successful extension that was sent at `sent_at`, unless the lease has
    /// ended meanwhile: released, dropped, lost, or past its validity (its holder may
    /// already have been told it was lost, and loss is final). False when not applied.
    pub fn extended(&self, sent_at: Instant, ttl: Duration) -> bool {
        let mut valid_until = self.state_lock();
        if self.is_finished() || self.is_marked_lost() || Instant::now() >= *valid_until {
            return false;
        }
        let until = sent_at + validity(ttl);
        *valid_until = until;
        // Under the state lock: a release or loss that follows clears it after this.
        self.local.set_holder(self.serial, until);
        drop(valid_until);
        // A `lost()` future sleeping until the old deadline must look again.
        self.lost_signal.notify_waiters();
        true
    }

    fn state_lock(&self) -> std::sync::MutexGuard<'_, Instant> {
        self.valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn mark_lost(&self) {
        let newly_lost = {
            let _transition = self.state_lock();
            !self.lost.swap(true, Ordering::AcqRel)
        };
        if newly_lost {
            crate::metrics::lost(&self.keys.name);
            tracing::warn!(name = %self.keys.name, "lease lost: the lock is no longer held by this holder");
        }
        self.lost_signal.notify_waiters();
        self.local.clear_holder(self.serial);
    }

    pub fn valid_until(&self) -> Instant {
        *self.state_lock()
    }

    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    pub fn is_marked_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }
}

impl LeaseHandle {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.shared.keys.name
    }

    /// The Redis key that holds the lock.
    pub fn key(&self) -> &str {
        &self.shared.keys.lock
    }

    /// The 128-bit random token (32 hex digits) that proves ownership.
    pub fn token(&self) -> &str {
        &self.shared.value[..self.shared.token_len]
    }

    /// The fencing token drawn at acquire time, when fencing was on: strictly increasing per
    /// lock name, so a store can reject writes from a holder older than the last one it saw.
    pub fn fencing_token(&self) -> Option<u64> {
        self.shared.fencing_token
    }

    /// When the lock was acquired (the start of the successful attempt).
    pub fn acquired_at(&self) -> Instant {
        self.shared.acquired_at
    }

    /// How long this lease is still valid by the local clock, with a margin for clock drift
    /// between this process and Redis. Zero once it has run out.
    pub fn expires_in(&self) -> Duration {
        self.shared
            .valid_until()
            .saturating_duration_since(Instant::now())
    }

    /// True once the lease is known to be lost: its validity ran out, or Redis said the lock
    /// is no longer ours. A cheap local check; [`LeaseHandle::is_held`] asks Redis.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.load(Ordering::Acquire) || self.expires_in().is_zero()
    }

    /// Completes when the lease is lost: at the end of its local validity (unless extended
    /// before, by hand or by auto-renewal), or as soon as an operation or the renewer learns
    /// that the lock is no longer ours.
    pub async fn lost(&self) {
        loop {
            let notified = self.shared.lost_signal.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_lost() {
                return;
            }
            let deadline = tokio::time::Instant::from_std(self.shared.valid_until());
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Asks Redis whether the lock still holds this lease's token. Marks the lease lost if not.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        let shared = &self.shared;
        let backend = shared.locker.backend();
        let state = backend.inspect(&shared.keys).await?;
        let held = state
            .value
            .as_deref()
            .is_some_and(|stored| is_ours(stored.as_bytes(), &shared.value));
        if !held {
            shared.mark_lost();
        }
        Ok(held)
    }

    pub(crate) fn same_lock(&self, locker: &Locker, name: &str) -> bool {
        self.shared.locker.same_as(locker) && self.shared.keys.name == name
    }
}

/// The part of a TTL the holder may count on: TTL minus an allowance for the drift between
/// this process's clock and Redis's (1% plus 2 ms, as in the Redlock analysis).
pub(crate) fn validity(ttl: Duration) -> Duration {
    ttl.saturating_sub(crate::backend::redlock::drift(ttl))
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
