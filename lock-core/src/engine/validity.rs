//! The local side of a lease, for locks and the primitives alike: until when the holder may
//! count on it (by this process's clock, a drift margin below its TTL), whether it is lost
//! (final) or ended by its holder, and a signal for those who wait for the loss.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The part of a TTL the holder may count on: TTL minus an allowance for the drift between
/// this process's clock and Redis's (1% plus 2 ms, as in the Redlock analysis).
pub(crate) fn validity(ttl: Duration) -> Duration {
    ttl.saturating_sub(crate::backend::redlock::drift(ttl))
}

pub(crate) struct Validity {
    /// Local end of validity: the start of the last successful acquire or extend, plus
    /// [`validity`] of its TTL. Its mutex also orders the transitions of `lost` and
    /// `finished` against extensions, so that a renewal reply applied after the lease ended
    /// (released, dropped or lost) can never make it valid again.
    valid_until: Mutex<Instant>,
    /// Sticky: once set, never cleared.
    lost: AtomicBool,
    /// Set once release has started (sticky): renewal stops.
    finished: AtomicBool,
    lost_signal: Notify,
}

impl Validity {
    /// Valid for [`validity`] of `ttl` from `started`, the start of the attempt that took it.
    pub fn new(started: Instant, ttl: Duration) -> Validity {
        Validity {
            valid_until: Mutex::new(started + validity(ttl)),
            lost: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            lost_signal: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, Instant> {
        self.valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the lease as ended by its holder (release or drop): no extension applies to it
    /// any more.
    pub fn finish(&self) {
        let _transition = self.state();
        self.finished.store(true, Ordering::Release);
    }

    /// Applies a successful extension sent at `sent_at`, unless the lease has ended
    /// meanwhile: released, dropped, lost, or past its validity (its holder may already have
    /// been told it was lost, and loss is final). `applied` runs with the new end, under the
    /// same lock as the transitions. False when not applied.
    pub fn extended(&self, sent_at: Instant, ttl: Duration, applied: impl FnOnce(Instant)) -> bool {
        let mut valid_until = self.state();
        if self.is_finished() || self.is_marked_lost() || Instant::now() >= *valid_until {
            return false;
        }
        let until = sent_at + validity(ttl);
        *valid_until = until;
        applied(until);
        drop(valid_until);
        // A `lost()` future sleeping until the old deadline must look again.
        self.lost_signal.notify_waiters();
        true
    }

    /// Marks the lease lost and wakes those waiting for it; true the first time.
    pub fn mark_lost(&self) -> bool {
        let newly_lost = {
            let _transition = self.state();
            !self.lost.swap(true, Ordering::AcqRel)
        };
        self.lost_signal.notify_waiters();
        newly_lost
    }

    pub fn valid_until(&self) -> Instant {
        *self.state()
    }

    /// How long it is still valid by the local clock; zero once it has run out.
    pub fn expires_in(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    pub fn is_marked_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Ended by its holder or lost: nothing more to renew.
    pub fn has_ended(&self) -> bool {
        self.is_finished() || self.is_marked_lost()
    }

    /// True once the lease is known to be lost: marked, or past its local validity.
    pub fn is_lost(&self) -> bool {
        self.is_marked_lost() || Instant::now() >= self.valid_until()
    }

    /// Completes when the lease is lost: at the end of its local validity (unless extended
    /// before), or as soon as it is marked lost.
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
