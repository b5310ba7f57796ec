//! The state of one held lock: its keys and value, its local validity, whether it was lost
//! or ended by its holder. Shared by the lease, its handles and the renewer; the operations
//! that talk to Redis take the backend from whoever calls them.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{AnyBackend, Backend as _};
use crate::engine::local::{NameRef, Owner};
use crate::engine::validity::{validity, Validity};
use crate::key::LockKeys;
use crate::limits::validate_ttl;
use crate::out_of_line::boxed;
use crate::token::{decode_value, is_ours};
use crate::LockError;

/// Numbers leases of one process, to tell a lease from its successor on the same name:
/// each thread takes a block of [`SERIAL_BLOCK`] numbers at a time and hands them out
/// itself, so that the tasks of a Locker on different threads do not all increment one
/// shared counter per lease (a cache line bounced between cores).
static SERIALS: AtomicU64 = AtomicU64::new(1);
const SERIAL_BLOCK: u64 = 1 << 16;

thread_local! {
    /// This thread's next serial and the end of its block.
    static SERIAL_RANGE: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// A serial no other lease of this process has had.
fn next_serial() -> u64 {
    SERIAL_RANGE.with(|range| {
        let (mut next, mut end) = range.get();
        if next == end {
            next = SERIALS.fetch_add(SERIAL_BLOCK, Ordering::Relaxed);
            end = next + SERIAL_BLOCK;
        }
        range.set((next + 1, end));
        next
    })
}

pub(crate) struct Held {
    pub keys: LockKeys,
    /// `token[:label]`, exactly as stored in Redis.
    pub value: String,
    pub fencing_token: Option<u64>,
    acquired_at: Instant,
    pub serial: u64,
    /// The TTL each extension (manual or automatic) asks for.
    pub ttl: Duration,
    /// Until when, lost, ended (read through `Deref`). Its end is also the name's local
    /// holder's, set under the same lock, so a lease that ended is never a local holder
    /// again.
    validity: Validity,
    pub local: NameRef,
    /// A release before `acquired_at` plus this leaves the lock to expire then.
    hold_at_least: Option<Duration>,
    /// The value was stored with the listened-for mark: its release hands over at once
    /// (otherwise it tries a bare compare-and-delete first).
    listened: bool,
    /// The locker's unreachable timeout: how long a release keeps trying through a
    /// transient error.
    unreachable: Duration,
}

/// What the acquire loop knows about a fresh lease.
pub(crate) struct Grant {
    pub keys: LockKeys,
    pub value: String,
    pub fencing_token: Option<u64>,
    pub attempt_started: Instant,
    /// When the grant's answer was read: the instant the lease counts as taken for
    /// deadlock detection (see `NameState::take`).
    pub answered: Instant,
    pub ttl: Duration,
    pub local: NameRef,
    /// Keep the lease alive until released, up to this long (`None`: no auto-renewal).
    pub renew: Option<Renewal>,
    /// The minimum hold (see [`Held::release_now`]).
    pub hold_at_least: Option<Duration>,
    /// Stored with the listened-for mark (see [`Held::release_now`]).
    pub listened: bool,
}

/// Auto-renewal settings of one lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal {
    pub max_hold: Option<Duration>,
}

impl Held {
    /// The state of a fresh lease, recorded as its name's local holder, owned by `owner`
    /// (the code that awaited the request; see `NameState::take`).
    pub fn new(grant: Grant, owner: Owner, unreachable: Duration) -> Arc<Held> {
        let serial = next_serial();
        let valid_until = grant.attempt_started + validity(grant.ttl);
        let granted = grant.answered;
        let held = Arc::new(Held {
            keys: grant.keys,
            value: grant.value,
            fencing_token: grant.fencing_token,
            acquired_at: grant.attempt_started,
            serial,
            ttl: grant.ttl,
            validity: Validity::new(grant.attempt_started, grant.ttl),
            local: grant.local,
            hold_at_least: grant.hold_at_least,
            listened: grant.listened,
            unreachable,
        });
        held.local.take(serial, valid_until, &held, owner, granted);
        held
    }

    /// The 128-bit random token (32 hex digits) that proves ownership. Found when asked
    /// (rarely), rather than measured for every grant.
    pub fn token(&self) -> &str {
        decode_value(&self.value).0
    }

    /// Deletes the lock if it is still ours (compare-and-delete); false if it was not.
    ///
    /// With a minimum hold not yet over, the lock is not deleted: its TTL is set to what is
    /// left of the hold (compare-and-`PEXPIRE`, the extend script), so the key expires by
    /// the server's clock no earlier than the hold's end, measured from the start of the
    /// attempt that took it. Others skip or wait until then.
    ///
    /// `again`: a release of this lease was started before and dropped unfinished (it may
    /// have run): a lock found no longer ours is then not a loss.
    pub async fn release_now(&self, backend: &AnyBackend, again: bool) -> Result<bool, LockError> {
        self.finish();
        // Only the bare compare-and-delete is awaited inline: the minimum hold's extension
        // and the hand-over are boxed, so that the future of every release (which a caller
        // moves at least once, whole) stays the size of the common one.
        let result = match self.hold_left() {
            Some(left) => boxed(|| backend.extend(&self.keys, &self.value, left)).await,
            None if self.listened => boxed(|| backend.release(&self.keys, &self.value)).await,
            None => backend.release_unlistened(&self.keys, &self.value).await,
        };
        let result = match result {
            // A dropped connection, a Cluster slot between masters: tried again (boxed, off
            // the common path) until Redis answers, within the unreachable timeout and
            // the lease's validity, so that a blip does not leave the lock to its TTL.
            Err(err) if err.is_transient() => boxed(|| self.retry_release(backend, err)).await,
            result => result,
        };
        match result {
            Ok(true) => crate::metrics::released(&self.keys.name, self.acquired_at),
            Ok(false) if !again => self.mark_lost(),
            Ok(false) | Err(_) => {}
        }
        // Local waiters may go now: after the DEL, so their attempt finds the lock free.
        self.local.clear_holder(self.serial);
        result
    }

    /// [`Held::release_now`] tried again after `err`.
    async fn retry_release(&self, backend: &AnyBackend, err: LockError) -> Result<bool, LockError> {
        let bounds = (self.unreachable, self.valid_until());
        crate::wait::retry_release(err, Instant::now(), bounds, || async {
            match self.hold_left() {
                Some(left) => backend.extend(&self.keys, &self.value, left).await,
                None if self.listened => backend.release(&self.keys, &self.value).await,
                None => backend.release_unlistened(&self.keys, &self.value).await,
            }
        })
        .await
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
        if !extended {
            self.mark_lost();
        } else if !self.extended(started, ttl) {
            self.give_back_late(backend).await;
        } else {
            return Ok(());
        }
        Err(LockError::Lost {
            name: self.keys.name.clone(),
        })
    }

    /// An extension that Redis applied, answered after the lease's local validity had run
    /// out: the lease is lost (its holder may have been told so, and loss is final), while
    /// the lock, still ours in Redis with a fresh TTL, would keep its name from everyone
    /// until the lease is released or dropped, or for that TTL. Marked lost and given back
    /// at once (to the end of a minimum hold that is not over), unless its holder has begun
    /// to release it.
    pub async fn give_back_late(&self, backend: &AnyBackend) {
        self.mark_lost();
        if self.is_finished() {
            return;
        }
        if let Err(err) = self.release_now(backend, true).await {
            tracing::debug!(name = %self.keys.name, %err, "giving back a lease lost to a late extension failed; its TTL will free it");
        }
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

    /// Applies a successful extension sent at `sent_at` (see [`Validity::extended`]), and
    /// with it the name's local holder.
    pub fn extended(&self, sent_at: Instant, ttl: Duration) -> bool {
        self.validity.extended(sent_at, ttl, |until| {
            self.local.set_holder(self.serial, until);
        })
    }

    pub fn mark_lost(&self) {
        if self.validity.mark_lost() {
            crate::metrics::lost(&self.keys.name);
            tracing::warn!(name = %self.keys.name, "lease lost: the lock is no longer held by this holder");
        }
        self.local.clear_holder(self.serial);
    }

    /// Dropped: its release runs in the background; meanwhile no task holds it (see
    /// `NameState::disown`).
    pub fn disown_locally(&self) {
        self.local.disown(self.serial);
    }

    /// Its name is no longer held by this lease, locally (a drop outside a runtime).
    pub fn forget_locally(&self) {
        self.local.clear_holder(self.serial);
    }

    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// What is left of the minimum hold, if any (a whole millisecond at least: PEXPIRE's
    /// unit, rounded up so the key never expires before the hold's end).
    fn hold_left(&self) -> Option<Duration> {
        let left = self
            .hold_at_least?
            .checked_sub(self.acquired_at.elapsed())
            .filter(|left| !left.is_zero())?;
        let millis = left.as_nanos().div_ceil(1_000_000);
        Some(Duration::from_millis(
            u64::try_from(millis).unwrap_or(u64::MAX),
        ))
    }
}

#[cfg(test)]
#[test]
fn serials_are_unique_across_threads() {
    let taken: Vec<u64> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| (0..1000).map(|_| next_serial()).collect::<Vec<_>>()))
            .collect();
        threads
            .into_iter()
            .flat_map(|thread| thread.join().unwrap_or_default())
            .collect()
    });
    let distinct: std::collections::HashSet<_> = taken.iter().collect();
    assert_eq!(distinct.len(), 4000);
}

impl Deref for Held {
    type Target = Validity;

    fn deref(&self) -> &Validity {
        &self.validity
    }
}
