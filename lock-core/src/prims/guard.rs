//! What every guard of the primitives shares: a validity by the local clock, a loss signal,
//! optional auto-renewal, and a release on drop. The primitive says how to release, extend
//! and check its hold ([`Ops`]); the guard does the rest, like `Lease` does for a lock.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tracing::Instrument as _;

use crate::engine::validity::Validity;
use crate::prims::env::Env;
use crate::LockError;

/// How one primitive's hold is released, extended and checked.
pub(crate) trait Ops: Send + Sync + 'static {
    /// Gives the hold back; true if it was still ours.
    fn release(&self) -> BoxFuture<'_, Result<bool, LockError>>;
    /// Resets its TTL; false if it was no longer ours.
    fn extend(&self, ttl: Duration) -> BoxFuture<'_, Result<bool, LockError>>;
    /// Asks the store whether it is still ours.
    fn held(&self) -> BoxFuture<'_, Result<bool, LockError>>;
    /// Makes the hold lighter in place (`weight`, the same end), handing what it frees to
    /// the waiters in one step; false if it was no longer ours. Only permits have a weight.
    fn reweigh(&self, weight: u64) -> BoxFuture<'_, Result<bool, LockError>> {
        let _ = weight;
        Box::pin(async {
            Err(LockError::Config(
                "this hold has no weight to change".into(),
            ))
        })
    }
    /// Whether [`Ops::release`] says only that the hold was still there, not whether it
    /// had ended (a release that reads no clock): then the guard's own validity judges,
    /// and a hold released after its local validity ran out counts as ended.
    fn release_reads_no_clock(&self) -> bool {
        false
    }
    /// A release of the hold was dropped before its reply was read, and has now been sent
    /// again and answered (so the first one has run, if it ever will): waiters of this
    /// Locker that it may have handed something to in that lost reply look at the store
    /// themselves.
    fn after_lost_reply(&self) {}
}

/// A cheap, cloneable view of a held permit, read-write lease or multi-lock: who, until
/// when, and whether it was lost. It does not keep anything held and cannot release it.
///
/// ```
/// # use lock_core::Locker;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory();
/// let permit = locker.semaphore("exports", 2).acquire().await?;
/// let handle = permit.handle();
/// assert_eq!(handle.name(), "exports");
/// assert!(!handle.is_lost());
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct GuardHandle {
    shared: Arc<Shared>,
}

struct Shared {
    env: Env,
    name: String,
    token: String,
    ops: Box<dyn Ops>,
    ttl: Duration,
    acquired_at: Instant,
    validity: Validity,
}

/// The owning side: releases on drop.
pub(crate) struct Guard {
    handle: GuardHandle,
    released: bool,
}

/// What a fresh guard is made of.
pub(crate) struct Parts {
    pub env: Env,
    pub name: String,
    pub token: String,
    pub ops: Box<dyn Ops>,
    pub ttl: Duration,
    pub started: Instant,
    /// `Some(max_hold)` to auto-renew (`Some(None)`: until released).
    pub renew: Option<Option<Duration>>,
}

/// Leases are extended once a third of their TTL has passed (two renewals may fail before
/// the lease runs out), as the lock's renewer does.
const RENEW_AFTER: u32 = 3;

impl Guard {
    pub fn new(parts: Parts) -> Guard {
        let shared = Arc::new(Shared {
            env: parts.env,
            name: parts.name,
            token: parts.token,
            ops: parts.ops,
            ttl: parts.ttl,
            acquired_at: parts.started,
            validity: Validity::new(parts.started, parts.ttl),
        });
        if let Some(max_hold) = parts.renew {
            spawn_renewal(&shared, max_hold);
        }
        Guard {
            handle: GuardHandle { shared },
            released: false,
        }
    }

    pub fn handle(&self) -> &GuardHandle {
        &self.handle
    }

    /// Cancellation-safe as [`Lease::release`](crate::Lease::release) is: dropped before
    /// it ends, the release is finished by the guard's `Drop`, in the background.
    pub async fn release(mut self) -> Result<bool, LockError> {
        let shared = &self.handle.shared;
        let span = tracing::debug_span!(
            "lock.permit.release",
            name = %shared.name,
            held_ms = shared.acquired_at.elapsed().as_millis() as u64,
        );
        let released = shared.release_now(false).instrument(span).await;
        self.released = true;
        released
    }

    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let shared = &self.handle.shared;
        crate::limits::validate_ttl(&shared.name, ttl)?;
        let sent_at = Instant::now();
        let extended = shared.ops.extend(ttl).await.inspect_err(|err| {
            if matches!(err, LockError::WrongType { .. }) {
                shared.mark_lost();
            }
        })?;
        if !extended {
            shared.mark_lost();
        } else if !shared.extended(sent_at, ttl) {
            shared.give_back_late().await;
        } else {
            return Ok(());
        }
        Err(LockError::Lost {
            name: shared.name.clone(),
        })
    }
}

impl Guard {
    /// Makes the hold lighter in place ([`Ops::reweigh`]); [`LockError::Lost`] (and the
    /// guard marked lost) if it was no longer ours.
    pub async fn reweigh(&self, weight: u64) -> Result<(), LockError> {
        let shared = &self.handle.shared;
        if shared.validity.is_lost() {
            return Err(LockError::Lost {
                name: shared.name.clone(),
            });
        }
        if !shared.ops.reweigh(weight).await? {
            shared.mark_lost();
            return Err(LockError::Lost {
                name: shared.name.clone(),
            });
        }
        Ok(())
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let shared = Arc::clone(&self.handle.shared);
        // A release started and dropped before it ended (it may have run): sent again, as
        // a lease's is (see `Lease`'s `Drop`).
        let again = shared.validity.is_finished();
        shared.finish();
        let env = shared.env.clone();
        let spawned = env.spawn_background(async move {
            if let Err(err) = shared.release_now(again).await {
                tracing::warn!(name = %shared.name, %err, "background release of a dropped guard failed; its TTL will free it");
            }
            if again {
                shared.ops.after_lost_reply();
            }
        });
        if !spawned {
            tracing::debug!(name = %self.handle.shared.name, "guard dropped outside a tokio runtime; its TTL will free it");
        }
    }
}

impl Shared {
    /// `again`: a release started before and dropped unfinished (it may have run): a hold
    /// found gone is then not a loss.
    async fn release_now(&self, again: bool) -> Result<bool, LockError> {
        let ended = self.ops.release_reads_no_clock() && self.validity.is_lost();
        self.finish();
        let released = match self.ops.release().await {
            // Tried again through a blip, as a lock's release is (see `Held::release_now`).
            Err(err) if err.is_transient() => {
                let bounds = (self.env.outage().limit(), self.validity.valid_until());
                let retried =
                    crate::wait::retry_release(err, Instant::now(), bounds, || self.ops.release());
                Box::pin(retried).await
            }
            released => released,
        };
        let released = released.map(|ours| ours && !ended);
        if !again && matches!(released, Ok(false)) {
            self.mark_lost();
        }
        released
    }

    fn finish(&self) {
        self.validity.finish();
    }

    /// Applies an extension sent at `sent_at`, unless the guard ended meanwhile (loss is
    /// final: a late reply never makes a lost guard valid again).
    fn extended(&self, sent_at: Instant, ttl: Duration) -> bool {
        self.validity.extended(sent_at, ttl, |_| {})
    }

    /// An extension applied by Redis but answered after the local validity ran out: lost,
    /// and given back at once (see `Held::give_back_late`), unless its holder has begun to
    /// release it.
    async fn give_back_late(&self) {
        self.mark_lost();
        if self.validity.is_finished() {
            return;
        }
        if let Err(err) = self.release_now(true).await {
            tracing::debug!(name = %self.name, %err, "giving back a hold lost to a late extension failed; its TTL will free it");
        }
    }

    fn mark_lost(&self) {
        if self.validity.mark_lost() {
            tracing::warn!(name = %self.name, "lost: the permit or lock is no longer held by this holder");
        }
    }
}

/// Keeps the guard alive: extends it every third of its TTL until it is released, dropped,
/// lost or past `max_hold`. One task per guard, holding it only weakly.
fn spawn_renewal(shared: &Arc<Shared>, max_hold: Option<Duration>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(name = %shared.name, "auto-renewal needs a tokio runtime; the guard will expire after its TTL");
        return;
    };
    let weak: Weak<Shared> = Arc::downgrade(shared);
    let ttl = shared.ttl;
    let stop_at = max_hold.map(|cap| shared.acquired_at + cap);
    let mut next = shared.acquired_at + ttl / RENEW_AFTER;
    runtime.spawn(async move {
        loop {
            tokio::time::sleep_until(next.into()).await;
            let Some(shared) = weak.upgrade() else { return };
            if shared.validity.has_ended() {
                return;
            }
            if stop_at.is_some_and(|stop| Instant::now() >= stop) {
                tracing::warn!(name = %shared.name, "max_hold reached: renewal stops and the guard will expire");
                return;
            }
            let sent_at = Instant::now();
            match shared.ops.extend(ttl).await {
                Ok(true) if shared.extended(sent_at, ttl) => next = sent_at + ttl / RENEW_AFTER,
                Ok(true) if shared.validity.is_finished() => return,
                Ok(true) => {
                    shared.give_back_late().await;
                    return;
                }
                Ok(false) | Err(LockError::WrongType { .. }) => {
                    shared.mark_lost();
                    return;
                }
                Err(err) => {
                    tracing::debug!(name = %shared.name, %err, "renewal failed; retrying");
                    next = sent_at + (ttl / 10).min(Duration::from_millis(200));
                }
            }
        }
    });
}

impl GuardHandle {
    /// The name (for a multi-lock, its names joined with `+`).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The 128-bit random token (32 hex digits) that proves ownership.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// When it was acquired (the start of the successful attempt).
    pub fn acquired_at(&self) -> Instant {
        self.shared.acquired_at
    }

    /// How long it is still valid by the local clock, with a margin for clock drift
    /// between this process and Redis. Zero once it has run out.
    pub fn expires_in(&self) -> Duration {
        self.shared.validity.expires_in()
    }

    /// True once it is known to be lost: its validity ran out, or the store said it is no
    /// longer ours. A cheap local check; [`GuardHandle::is_held`] asks the store.
    pub fn is_lost(&self) -> bool {
        self.shared.validity.is_lost()
    }

    /// Completes when it is lost: at the end of its local validity (unless extended
    /// before, by hand or by auto-renewal), or as soon as an operation or the renewal
    /// learns that it is no longer ours.
    pub async fn lost(&self) {
        self.shared.validity.lost().await;
    }

    /// Asks the store whether it is still held by this holder; marks it lost if not.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        let held = self.shared.ops.held().await?;
        if !held {
            self.shared.mark_lost();
        }
        Ok(held)
    }
}

impl fmt::Debug for GuardHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a secret: whoever has it can release the hold.
        f.debug_struct("GuardHandle")
            .field("name", &self.name())
            .field("expires_in", &self.expires_in())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("handle", &self.handle)
            .field("released", &self.released)
            .finish()
    }
}

/// A permit's, read-write lock side's or multi-lock's view as a
/// [`LeaseHandle`](crate::LeaseHandle), for `current_lease()` in annotated functions.
impl crate::lease::HoldView for GuardHandle {
    fn name(&self) -> &str {
        GuardHandle::name(self)
    }

    fn token(&self) -> &str {
        GuardHandle::token(self)
    }

    fn acquired_at(&self) -> Instant {
        GuardHandle::acquired_at(self)
    }

    fn expires_in(&self) -> Duration {
        GuardHandle::expires_in(self)
    }

    fn is_lost(&self) -> bool {
        GuardHandle::is_lost(self)
    }

    fn lost(&self) -> BoxFuture<'_, ()> {
        Box::pin(GuardHandle::lost(self))
    }

    fn is_held(&self) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(GuardHandle::is_held(self))
    }
}
