//! A lock request being configured, and the acquire loop behind its `.await`.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::backend::{Attempt, AttemptKind, Backend as _, Place, Waiter, CLAIM_WINDOW};
use crate::key::{validate_ttl, validate_wait, LockKeys};
use crate::lease::{validity, Grant, Renewal};
use crate::local::NameRef;
use crate::notifier::{Interest, Notifier, Subscription};
use crate::signal::Hint;
use crate::token::{decode_value, new_value};
use crate::wait::Backoff;
use crate::{Lease, LockError, Locker};

/// A lock request: set what differs from the locker's defaults, then `.await` it.
///
/// ```
/// # use lock_core::Locker;
/// # use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory();
/// let lease = locker
///     .lock("inventory:sku-19")
///     .ttl(Duration::from_secs(5))       // the lock frees itself after 5 s
///     .wait(Duration::from_millis(500))  // keep trying for up to 0.5 s
///     .fencing()                          // draw a fencing token
///     .await?;
/// assert_eq!(lease.fencing_token(), Some(1));
/// # Ok(())
/// # }
/// ```
#[must_use = "a lock request does nothing until it is awaited"]
#[derive(Debug)]
pub struct LockRequest {
    /// Owned (a `Locker` is one `Arc`), so that a request can be spawned.
    locker: Locker,
    name: String,
    ttl: Option<Duration>,
    wait: Option<Duration>,
    fencing: Option<bool>,
    renew: Option<Renewal>,
}

impl LockRequest {
    pub(crate) fn new(locker: Locker, name: String) -> LockRequest {
        LockRequest {
            locker,
            name,
            ttl: None,
            wait: None,
            fencing: None,
            renew: None,
        }
    }

    /// How long the lock lives if it is not released or extended (between
    /// [`MIN_TTL`](crate::MIN_TTL) and [`MAX_TTL`](crate::MAX_TTL)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long to keep trying while someone else holds the lock. Zero tries once and fails
    /// with [`LockError::Busy`] (that one attempt is bounded by the locker's
    /// `command_timeout`); otherwise the request fails with [`LockError::Timeout`] when the
    /// time is up.
    ///
    /// The wait is a deadline, also against a slow or stalled server: an attempt still in
    /// flight when it passes is abandoned, and undone in the background like a cancelled
    /// acquire, so the request returns within its wait plus the timer's granularity (about
    /// a millisecond) and never grants a lease after it.
    ///
    /// A waiting request rides out transient failures (a dropped connection, a server
    /// restarting, no Redlock quorum) by trying again within its wait; if the wait runs
    /// out first, it fails with the last such error rather than [`LockError::Timeout`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Draw a fencing token: a number that strictly increases with every acquisition of this
    /// name, available as [`LeaseHandle::fencing_token`](crate::LeaseHandle::fencing_token).
    pub fn fencing(mut self) -> Self {
        self.fencing = Some(true);
        self
    }

    /// Keeps the lease alive until it is released or dropped: a background task of the
    /// locker extends it every third of its TTL, batched with the locker's other renewed
    /// leases. If Redis says the lock is no longer ours, the lease is marked lost at once
    /// ([`LeaseHandle::lost`](crate::LeaseHandle::lost) fires).
    ///
    /// ```
    /// # use lock_core::Locker;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = Locker::memory();
    /// let lease = locker
    ///     .lock("import:catalog")
    ///     .ttl(Duration::from_millis(300))
    ///     .auto_renew()
    ///     .max_hold(Duration::from_secs(3600)) // a hung holder gives up after an hour
    ///     .await?;
    /// tokio::time::sleep(Duration::from_millis(700)).await; // longer than the TTL
    /// assert!(!lease.is_lost());
    /// assert!(lease.release().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn auto_renew(mut self) -> Self {
        self.renew.get_or_insert(Renewal { max_hold: None });
        self
    }

    /// With [`auto_renew`](LockRequest::auto_renew): stop renewing this long after the
    /// acquisition, so that a hung holder cannot keep the lock forever. The lease then
    /// expires at the end of its last TTL and is reported lost. Independent of `ttl` and
    /// `wait`; no default (renewal lasts until release).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.renew
            .get_or_insert(Renewal { max_hold: None })
            .max_hold = Some(max_hold);
        self
    }

    pub(crate) fn locker(&self) -> &Locker {
        &self.locker
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The acquisition itself, without the box `.await` on the request puts it in (the
    /// `IntoFuture` type must be nameable). `try_lock` and `#[redis_locked]` call this.
    pub(crate) async fn acquire(self) -> Result<Lease, LockError> {
        let LockRequest {
            locker,
            name,
            ttl,
            wait,
            fencing,
            renew,
        } = self;
        let settings = locker.settings();
        let ttl = ttl.unwrap_or(settings.default_ttl);
        let wait = wait.unwrap_or(settings.default_wait);
        let fencing = fencing.unwrap_or(settings.fencing);
        let keys = LockKeys::new(&settings.prefix, name)?;
        validate_ttl(&keys.name, ttl)?;
        validate_wait(&keys.name, wait)?;
        let value = new_value(&keys.name, settings.label.as_deref())?;
        let span = tracing::debug_span!(
            "lock.acquire",
            name = %keys.name,
            ttl_ms = ttl.as_millis() as u64,
            wait_ms = wait.as_millis() as u64,
            attempts = tracing::field::Empty,
            waited_us = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let family = crate::metrics::Family::of(&keys.name);
        let begun = Instant::now();
        // Built in the call: a local moved into `run` would keep its own place in this
        // future as well.
        let result = Acquire {
            locker: &locker,
            keys,
            value,
            ttl,
            fencing,
            begun,
            attempts: 0,
            last_busy: Busy::default(),
            fencing_token: None,
            renew,
            expired_grant: None,
            transient: None,
        }
        .run(wait)
        .instrument(span.clone())
        .await;
        let outcome = match &result {
            Ok(_) => "acquired",
            Err(LockError::Busy { .. }) => "busy",
            Err(LockError::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        family.acquire(outcome, begun.elapsed());
        result
    }
}

/// What one attempt came to.
enum Tried {
    /// A lease with validity left, from an attempt that started at this instant.
    Acquired(Instant),
    /// Busy, or a grant that came too late and was given back.
    NotYet,
    /// The request's deadline passed with the attempt in flight; it was abandoned.
    OutOfTime,
}

/// What the last busy attempt said about the holder.
#[derive(Debug, Default)]
struct Busy {
    remaining: Option<Duration>,
    holder: Option<String>,
    /// Our place in the lock's waiter queue, after a queued attempt.
    place: Option<Place>,
}

/// Slack after a lease's end before looking: Redis expires keys at millisecond
/// granularity, so a waiter that looks exactly at the end may find the key still there.
const EXPIRY_SLACK: Duration = Duration::from_millis(1);

/// How a waiter learns that it may try again.
enum Listening {
    /// Told its turn in the lock's Redis-side queue, on the locker's own channel.
    Queue {
        /// Kept for its `Drop`, which stops routing the lock's messages here.
        _interest: Interest,
        spot: QueueSpot,
    },
    /// Woken by every release of the lock (its release channel; kept for its `Drop`).
    Broadcast { _subscription: Subscription },
    /// Nothing tells it: timed retries.
    Polling,
}

/// This locker's place in a lock's Redis-side queue, given up when the request ends without
/// the lock (timeout, error, cancellation) and no other waiter of this locker follows.
struct QueueSpot {
    locker: Locker,
    keys: LockKeys,
    channel: String,
    local: NameRef,
    /// Set once a queued attempt has (or may have) put us in the queue.
    in_queue: bool,
}

impl Drop for QueueSpot {
    fn drop(&mut self) {
        // Another waiter of this locker inherits the place otherwise.
        if !self.in_queue || self.local.queued() > 1 {
            return;
        }
        // Outside a runtime nothing runs: the entry expires with the request's wait.
        let locker = self.locker.clone();
        let keys = self.keys.clone();
        let channel = std::mem::take(&mut self.channel);
        self.locker.spawn_background(async move {
            let left = locker.backend().leave_queue(&keys, &channel).await;
            if let Err(err) = left {
                tracing::debug!(name = %keys.name, %err, "leaving the waiter queue failed; the entry expires by itself");
            }
        });
    }
}

/// One acquisition in progress.
struct Acquire<'a> {
    locker: &'a Locker,
    keys: LockKeys,
    value: String,
    ttl: Duration,
    fencing: bool,
    begun: Instant,
    attempts: u32,
    last_busy: Busy,
    fencing_token: Option<u64>,
    renew: Option<Renewal>,
    /// Set when a grant arrived too late to be of use (how long it took).
    expired_grant: Option<Duration>,
    /// The error of the last attempt, when it failed with a transient error: what the
    /// request reports if its wait runs out before an attempt succeeds.
    transient: Option<LockError>,
}

impl Acquire<'_> {
    async fn run(mut self, wait: Duration) -> Result<Lease, LockError> {
        let deadline = self.begun + wait;
        // A waiting request's attempts end at its deadline; a try (wait zero) has only the
        // command timeout, or it could never make its one attempt.
        let bound = (!wait.is_zero()).then_some(deadline);
        let local = self.locker.local().get(&self.keys.name);
        let queue = if wait.is_zero() {
            None
        } else {
            self.locker.queue_notifier()
        };
        // Fast path: try once straight away, unless a lease of this locker holds the name (no
        // need to ask Redis) or this locker's waiters are queued for it (a newcomer must not
        // barge in ahead of them). A plain SET: the uncontended path runs no script.
        let held_here = local.local_holder_until().is_some();
        let fast_path = wait.is_zero() || !(local.has_queue() || held_here);
        if fast_path {
            let (kind, commands) = if queue.is_some() {
                (AttemptKind::BeforeQueueing, 1)
            } else {
                (AttemptKind::Try, 2) // a busy answer asks for the holder's TTL too
            };
            // A far deadline cannot pass during this attempt: no timer for it.
            let attempt_bound =
                bound.filter(|&deadline| !self.locker.attempt_ends_before(deadline, commands));
            match self.attempt(attempt_bound, kind).await {
                Ok(Tried::Acquired(started)) => return Ok(self.grant(started, local)),
                Ok(Tried::OutOfTime) => return Err(self.timeout()),
                Ok(Tried::NotYet) => {}
                // A waiting request rides out a dropped connection within its wait.
                Err(err) if !wait.is_zero() && err.is_transient() => self.transient = Some(err),
                Err(err) => return Err(err),
            }
            if wait.is_zero() {
                return Err(self.busy());
            }
        }

        // Slow path, in a box of its own: the uncontended acquisition above stays a small
        // future (a large one costs an allocation of several kilobytes per lock).
        Box::pin(self.wait_for_turn(deadline, bound, local, queue, fast_path)).await
    }

    /// The slow path: queue (locally, then in Redis or on the release channel) until the
    /// lock is ours or the deadline passes.
    async fn wait_for_turn(
        mut self,
        deadline: Instant,
        bound: Option<Instant>,
        local: NameRef,
        queue: Option<&Notifier>,
        fast_path: bool,
    ) -> Result<Lease, LockError> {
        // Slow path. Queue behind this locker's other waiters: only the head of the queue
        // talks to Redis, so N local waiters cost Redis what one does.
        let queued = local.enqueue();
        let Ok(turn) = tokio::time::timeout_at(deadline.into(), local.gate.lock()).await else {
            return Err(self.timeout());
        };
        let mut listening = Listening::Polling;
        if let Some(notifier) = queue {
            // Stand in the lock's Redis-side queue. Listen first, so that a turn announced
            // right after the queued attempt is not missed.
            let listen = notifier.listen(&self.keys.lock, &local.released);
            match tokio::time::timeout_at(deadline.into(), listen).await {
                Ok(Ok(interest)) => {
                    let spot = QueueSpot {
                        locker: self.locker.clone(),
                        keys: self.keys.clone(),
                        channel: notifier.own_channel().to_owned(),
                        local: local.clone(),
                        in_queue: false,
                    };
                    listening = Listening::Queue {
                        _interest: interest,
                        spot,
                    };
                }
                Ok(Err(err)) => {
                    tracing::debug!(name = %self.keys.name, %err, "no waiter-queue notifications; falling back to timed retries");
                }
                Err(_) => return Err(self.timeout()),
            }
        }
        // Without the queue, release notifications are subscribed to only once Redis says
        // someone else holds the name: while a lease of this locker holds it, its release is
        // signalled locally.
        let mut subscribe_pending = queue.is_none() && self.locker.notifier().is_some();
        // Out of the Redis queue, a plain SET comes first: after a release by this very
        // locker, or with nobody queued, it is all it takes (one command, no script).
        let mut plain_next = !fast_path;
        // Pauses between attempts that failed with a transient error (a dropped connection,
        // a server restarting): short, since nothing will announce the recovery.
        let mut retry = Backoff::new(false);
        let mut backoff = Backoff::new(!matches!(listening, Listening::Polling));
        loop {
            // Nothing starts after the deadline, whatever woke this waiter.
            if Instant::now() >= deadline {
                return Err(self.timeout());
            }
            // Armed before looking, so that a release or a turn announced between the look
            // and the wait still wakes this waiter.
            let released = local.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            // Only what is announced from here on concerns the pause below.
            let _before_this_look = local.released.take_hint();

            let mut pause_until = if let Some(holder_until) = local.local_holder_until() {
                // A lease of this very locker holds the name: its release (or the end of its
                // validity, should it have been leaked) is signalled locally; Redis need not
                // be asked until then.
                self.last_busy = Busy {
                    remaining: Some(holder_until.saturating_duration_since(Instant::now())),
                    holder: self.locker.settings().label.clone(),
                    place: None,
                };
                plain_next = true;
                holder_until.min(deadline)
            } else {
                let tried = match &listening {
                    Listening::Queue { spot, .. } if plain_next && !spot.in_queue => {
                        plain_next = false;
                        let tried = self.attempt(bound, AttemptKind::BeforeQueueing).await;
                        if matches!(tried, Ok(Tried::NotYet)) {
                            continue; // busy: queue at once
                        }
                        tried
                    }
                    Listening::Queue { spot, .. } => {
                        let waiter = Waiter {
                            channel: &spot.channel,
                            life: deadline.saturating_duration_since(Instant::now()),
                        };
                        self.attempt(bound, AttemptKind::Queued(&waiter)).await
                    }
                    Listening::Broadcast { .. } | Listening::Polling => {
                        self.attempt(bound, AttemptKind::Try).await
                    }
                };
                let tried = match tried {
                    Ok(tried) => {
                        self.transient = None;
                        tried
                    }
                    Err(err) if err.is_transient() => {
                        tracing::debug!(name = %self.keys.name, %err, "attempt failed; retrying within the wait");
                        self.transient = Some(err);
                        if let Listening::Queue { spot, .. } = &mut listening {
                            // The attempt may have queued us before the connection broke.
                            spot.in_queue = true;
                        }
                        let now = Instant::now();
                        let pause_until = (now + retry.next(None)).min(deadline);
                        tokio::select! {
                            () = released.as_mut() => {}
                            () = tokio::time::sleep_until(pause_until.into()) => {}
                        }
                        continue;
                    }
                    Err(err) => return Err(err),
                };
                match tried {
                    Tried::Acquired(started) => {
                        // The queued attempt took us out of the queue. Record the new holder
                        // before leaving the local queue, so that the next in line waits for
                        // its release instead of asking Redis.
                        if let Listening::Queue { spot, .. } = &mut listening {
                            spot.in_queue = false;
                        }
                        let lease = self.grant(started, local.clone());
                        drop((turn, queued, listening));
                        return Ok(lease);
                    }
                    Tried::OutOfTime => return Err(self.timeout()),
                    Tried::NotYet => {}
                }
                if let Listening::Queue { spot, .. } = &mut listening {
                    spot.in_queue = true;
                }
                if subscribe_pending {
                    // Held elsewhere: from now on, learn of its release by notification.
                    // Subscribing takes a moment during which a release would go unseen,
                    // so look once more right after it.
                    subscribe_pending = false;
                    let subscription =
                        tokio::time::timeout_at(deadline.into(), self.subscribe(&local))
                            .await
                            .ok()
                            .flatten();
                    if let Some(subscription) = subscription {
                        listening = Listening::Broadcast {
                            _subscription: subscription,
                        };
                        backoff = Backoff::new(true);
                        continue;
                    }
                }
                let now = Instant::now();
                if now >= deadline {
                    return Err(self.timeout());
                }
                let queued_in_redis = matches!(listening, Listening::Queue { .. });
                now + self
                    .pause(&mut backoff, queued_in_redis)
                    .min(deadline - now)
            };
            // Wait. A message that only moves this waiter's timer (its turn comes later)
            // costs no Redis call.
            loop {
                tokio::select! {
                    () = released.as_mut() => {}
                    () = tokio::time::sleep_until(pause_until.into()) => break,
                }
                released.set(local.released.notified());
                released.as_mut().enable();
                match local.released.take_hint() {
                    Some(Hint::Standby(left) | Hint::Head(left)) => {
                        pause_until = (Instant::now() + left + EXPIRY_SLACK).min(deadline);
                    }
                    Some(Hint::Granted) | None => break,
                }
            }
        }
    }

    /// How long to wait before looking again when nothing wakes this waiter sooner.
    fn pause(&self, backoff: &mut Backoff, queued_in_redis: bool) -> Duration {
        let remaining = self.last_busy.remaining;
        let place = self.last_busy.place.filter(|_| queued_in_redis);
        match (place, remaining) {
            // First in line: the holder's lease ends then, should it never release (a crash).
            (Some(Place { position: 0, .. }), Some(left)) => left + EXPIRY_SLACK,
            // Next after a head that has the lock reserved: our turn if it does not claim it.
            (
                Some(Place {
                    position: 1,
                    head_reserved: true,
                }),
                Some(left),
            ) => left + EXPIRY_SLACK,
            // Next after a head that waits for a holder: if the holder crashes and the head is
            // gone too, it is our turn one claim window after the holder's lease ends.
            (Some(Place { position: 1, .. }), Some(left)) => left + CLAIM_WINDOW + EXPIRY_SLACK,
            // Further back: our turn is announced; the timer is only a safety net.
            (Some(_), _) => backoff.next(None),
            (None, remaining) => backoff.next(remaining),
        }
    }

    async fn subscribe(&self, local: &NameRef) -> Option<Subscription> {
        let notifier = self.locker.notifier()?;
        match notifier
            .subscribe(&self.keys.channel(), &local.released)
            .await
        {
            Ok(subscription) => Some(subscription),
            Err(err) => {
                tracing::debug!(name = %self.keys.name, %err, "no release notifications; falling back to timed retries");
                None
            }
        }
    }

    /// One attempt, abandoned at `bound` if it is still in flight then (dropping a backend's
    /// acquire undoes whatever it may have set).
    async fn attempt(
        &mut self,
        bound: Option<Instant>,
        kind: AttemptKind<'_>,
    ) -> Result<Tried, LockError> {
        if self.attempts > 0 {
            // Every attempt writes a token of its own. An earlier attempt may still have a
            // compare-and-delete of its value in flight (the undo of an attempt abandoned at
            // a node's or the request's deadline, a late grant given back, a failed Redlock
            // round's clean-up); with the same token it could land after this attempt took
            // the lock and delete it under its new holder.
            self.value = new_value(&self.keys.name, self.locker.settings().label.as_deref())?;
        }
        self.attempts += 1;
        let started = Instant::now();
        let backend = self.locker.backend();
        let call = backend.acquire(&self.keys, &self.value, self.ttl, self.fencing, kind);
        let attempt = match bound {
            None => call.await?,
            Some(deadline) => match tokio::time::timeout_at(deadline.into(), call).await {
                Ok(attempt) => attempt?,
                Err(_) => return Ok(Tried::OutOfTime),
            },
        };
        match attempt {
            Attempt::Acquired { fencing_token } => {
                let took = started.elapsed();
                let trusted = validity(self.ttl);
                if !trusted.is_zero() && took >= trusted {
                    // The answer came back after the lease had run out (a slow network or
                    // server): such a lease protects nothing. Give it back and treat the
                    // attempt as failed, as Redlock does. The give-back runs in a task of
                    // its own, so that dropping this request cannot cut it short.
                    self.give_back();
                    self.expired_grant = Some(took);
                    return Ok(Tried::NotYet);
                }
                self.fencing_token = fencing_token;
                Ok(Tried::Acquired(started))
            }
            Attempt::Busy {
                remaining,
                holder_value,
                place,
            } => {
                self.last_busy = Busy {
                    remaining,
                    holder: holder_value
                        .as_deref()
                        .and_then(|v| decode_value(v).1)
                        .map(str::to_owned),
                    place,
                };
                Ok(Tried::NotYet)
            }
        }
    }

    /// Deletes this request's value from the lock in the background (compare-and-delete:
    /// nobody else's lock is touched). The TTL frees it if this fails.
    fn give_back(&self) {
        let locker = self.locker.clone();
        let keys = self.keys.clone();
        let value = self.value.clone();
        self.locker.spawn_background(async move {
            let backend = locker.backend();
            let given_back = backend.release(&keys, &value).await;
            if let Err(err) = given_back {
                tracing::debug!(name = %keys.name, %err, "giving back a late grant failed; the TTL will free the lock");
            }
        });
    }

    fn grant(self, attempt_started: Instant, local: NameRef) -> Lease {
        record(self.attempts, self.begun);
        Lease::new(
            self.locker.clone(),
            Grant {
                keys: self.keys,
                value: self.value,
                fencing_token: self.fencing_token,
                attempt_started,
                ttl: self.ttl,
                local,
                renew: self.renew,
            },
        )
    }

    fn busy(self) -> LockError {
        record(self.attempts, self.begun);
        if let Some(took) = self.expired_grant {
            return LockError::connection(
                &self.keys.name,
                format!("the lock was granted after {took:?}, when its TTL of {:?} had already run out; the network or server is too slow for this TTL", self.ttl),
            );
        }
        LockError::Busy {
            name: self.keys.name,
            holder: self.last_busy.holder,
            retry_after: self.last_busy.remaining,
        }
    }

    fn timeout(self) -> LockError {
        record(self.attempts, self.begun);
        if let Some(err) = self.transient {
            return err;
        }
        LockError::Timeout {
            name: self.keys.name,
            waited: self.begun.elapsed(),
            holder: self.last_busy.holder,
            retry_after: self.last_busy.remaining,
        }
    }
}

fn record(attempts: u32, begun: Instant) {
    let span = tracing::Span::current();
    span.record("attempts", attempts);
    span.record("waited_us", begun.elapsed().as_micros() as u64);
}

/// The boxed acquisition: `'static`, so `tokio::spawn(locker.lock("x").into_future())` works.
impl IntoFuture for LockRequest {
    type Output = Result<Lease, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.acquire())
    }
}
