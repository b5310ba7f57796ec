//! The state of one held lock: its keys and value, its local validity, whether it was lost
//! or ended by its holder. Shared by the lease, its handles and the renewer; the operations
//! that talk to Redis take the backend from whoever calls them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::backend::{AnyBackend, Backend as _};
use crate::engine::local::NameRef;
use crate::key::{validate_ttl, LockKeys};
use crate::token::{decode_value, is_ours};
use crate::LockError;

/// Numbers leases of one process, to tell a lease from its successor on the same name.
static SERIALS: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Held {
    pub keys: LockKeys,
    /// `token[:label]`, exactly as stored in Redis.
    pub value: String,
    token_len: usize,
    pub fencing_token: Option<u64>,
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
    pub local: NameRef,
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

/// The part of a TTL the holder may count on: TTL minus an allowance for the drift between
/// this process's clock and Redis's (1% plus 2 ms, as in the Redlock analysis).
pub(crate) fn validity(ttl: Duration) -> Duration {
    ttl.saturating_sub(crate::backend::redlock::drift(ttl))
}

impl Held {
    /// The state of a fresh lease, recorded as its name's local holder.
    pub fn new(grant: Grant) -> Arc<Held> {
        let token_len = decode_value(&grant.value).0.len();
        let serial = SERIALS.fetch_add(1, Ordering::Relaxed);
        let valid_until = grant.attempt_started + validity(grant.ttl);
        grant.local.set_holder(serial, valid_until);
        Arc::new(Held {
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
        })
    }

    /// The 128-bit random token (32 hex digits) that proves ownership.
    pub fn token(&self) -> &str {
        &self.value[..self.token_len]
    }

    /// Deletes the lock if it is still ours (compare-and-delete); false if it was not.
    pub async fn release_now(&self, backend: &AnyBackend) -> Result<bool, LockError> {
        self.finish();
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

    /// Resets the TTL to `ttl` from now; [`LockError::Lost`] (and the lease marked lost) if
    /// the lock is no longer ours.
    pub async fn extend(&self, backend: &AnyBackend, ttl: Duration) -> Result<(), LockError> {
        validate_ttl(&self.keys.name, ttl)?;
        let started = Instant::now();
        let extended = backend
            .extend(&self.keys, &self.value, ttl)
            .await
            .inspect_err(|err| {
                // A foreign value sits on the key: our lock is certainly gone.
                if matches!(err, LockError::WrongType { .. }) {
                    self.mark_lost();
                }
            })?;
        if !extended || !self.extended(started, ttl) {
            self.mark_lost();
            return Err(LockError::Lost {
                name: self.keys.name.clone(),
            });
        }
        Ok(())
    }

    /// Asks the store whether the lock still holds our value; marks the lease lost if not.
    pub async fn is_held(&self, backend: &AnyBackend) -> Result<bool, LockError> {
        let state = backend.inspect(&self.keys).await?;
        let held = state
            .value
            .as_deref()
            .is_some_and(|stored| is_ours(stored.as_bytes(), &self.value));
        if !held {
            self.mark_lost();
        }
        Ok(held)
    }

    /// Marks the lease as ended by its holder (release or drop): no renewal applies to it
    /// any more.
    pub fn finish(&self) {
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

    fn state_lock(&self) -> MutexGuard<'_, Instant> {
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

    /// Its name is no longer held by this lease, locally (a drop outside a runtime).
    pub fn forget_locally(&self) {
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

    /// True once the lease is known to be lost: marked, or past its local validity.
    pub fn is_lost(&self) -> bool {
        self.is_marked_lost() || Instant::now() >= self.valid_until()
    }

    /// Completes when the lease is lost (see `LeaseHandle::lost`).
    pub async fn lost(&self) {
        loop {
            let notified = self.lost_signal.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_lost() {
                return;
            }
            let deadline = tokio::time::Instant::from_std(self.valid_until());
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}
