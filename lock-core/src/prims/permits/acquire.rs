//! Taking a permit, waiting for one up to a deadline.
//!
//! One plain attempt first (no queue, no subscription: the uncontended case is one script),
//! unless the request may wait and its Locker listens on its channel already: then the
//! first attempt also queues it if it is busy (one script either way). A waiting request
//! stands in the name's queue under an id of its own, hears its turn on its Locker's
//! channel (routed to this request alone: a permit granted outright, with the server time
//! of the grant, placed on this process's clock by [`Anchors`]; or a reservation to claim)
//! or from the reply of a request of its own Locker that handed it a permit, and otherwise
//! sleeps until the first permit ends (a crashed holder; the first two in line read that
//! end exactly, the rest a lower bound on it, and look sooner on a safety-net timer). A
//! waiter that comes to the head is told when to look again only if the first end moved
//! sooner since it arrived; otherwise the timer it has already looks in time.
//!
//! Cancellation: from the first attempt sent until a grant, a guard gives the permit back
//! and leaves the queue if the request ends any other way (error, timeout, or the future
//! dropped at any await point), in the background, queued behind each attempt left without
//! an answer on the connection that attempt went out on (see [`SentOn`]), even once the
//! shared connection was replaced.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tracing::Instrument as _;

use crate::backend::permits::{
    member, queue_entry, Ask, Attempt, Leaving, PermitKeys, QueueWaiter, Store,
};
use crate::backend::prim_scripts::SentOn;
use crate::connection::notifier::Notifier;
use crate::engine::validity::validity;
use crate::prims::env::Env;
use crate::signal::{Hint, Wake};
use crate::token::new_value;
use crate::wait::{Backoff, Outage, LOOK_WHILE_LISTENING};
use crate::{LockError, WaitSetting};

/// Slack after a permit's end before looking (Redis expires at millisecond granularity).
const SLACK: Duration = Duration::from_millis(1);

/// Longest pause of a waiter nobody tells its turn (it polls): under the claim window, so
/// that a permit reserved for it is claimed before the reservation lapses.
const POLL_CAP: Duration = Duration::from_millis(40);

/// What to take.
pub(crate) struct Request<'a> {
    pub env: &'a Env,
    pub store: Store,
    pub keys: &'a PermitKeys,
    /// `token[:label]`.
    pub value: String,
    pub ask: Ask,
    pub ttl: Duration,
    pub wait: Duration,
}

/// A permit taken: its holder entry, and when the successful attempt started.
pub(crate) struct Granted {
    pub member: String,
    pub started: Instant,
}

/// Gives back what an unfinished request may hold (a permit whose reply never came, a
/// reservation, its queue entry) when it is dropped before a grant.
struct Abandon<'a> {
    env: &'a Env,
    store: Store,
    keys: &'a PermitKeys,
    /// The holder entry: taken out by the grant.
    member: String,
    id: String,
    /// Its member of the queue on Redis ('' until it may stand there).
    entry: String,
    /// A reply never came, or the request stands in the queue: something may need undoing.
    dirty: bool,
    in_queue: bool,
    /// The connections of the attempts, for the give-back to follow them.
    sent: SentOn,
}

impl Abandon<'_> {
    /// One attempt that does not queue (the first, and each look while listening), given up
    /// at `cap`; `outage` learns whether Redis answered.
    async fn attempt_unqueued(
        &self,
        ttl: Duration,
        ask: Ask,
        local: Option<&Notifier>,
        cap: Option<Instant>,
        outage: &mut Outage,
        started: Instant,
    ) -> Option<Result<Attempt, LockError>> {
        let attempt = bounded(
            cap,
            self.store
                .acquire(self.keys, &self.member, ttl, ask, None, &self.sent, local),
        )
        .await;
        answered(outage, attempt.as_ref(), started);
        attempt
    }
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if !self.dirty && !self.in_queue {
            return;
        }
        let store = self.store.clone();
        let keys = self.keys.clone();
        let member = std::mem::take(&mut self.member);
        let leaving = self.in_queue.then(|| {
            (
                std::mem::take(&mut self.id),
                std::mem::take(&mut self.entry),
            )
        });
        // Nothing sent on a connection (in memory, or no attempt got that far): the store's
        // own release.
        let routes = self.sent.take().unwrap_or_else(|| vec![None]);
        let env = self.env.clone();
        self.env.spawn_background(async move {
            let name = keys.name.clone();
            let leaving = leaving.as_ref().map(|(id, entry)| Leaving { id, entry });
            let local = env.queue_notifier();
            let undone = join_all(routes.iter().map(|sent_on| {
                env.run(
                    &name,
                    store.release(&keys, &member, leaving, sent_on.as_ref(), local),
                )
            }))
            .await;
            if let Some(Err(err)) = undone.into_iter().find(Result::is_err) {
                tracing::debug!(%name, %err, "undoing an abandoned permit request failed; its TTL and queue entry expire by themselves");
            }
        });
    }
}

/// Runs `work`, giving up at `bound`: `None` when the deadline passed first.
async fn bounded<T>(bound: Option<Instant>, work: impl Future<Output = T>) -> Option<T> {
    match bound {
        None => Some(work.await),
        Some(deadline) => tokio::time::timeout_at(deadline.into(), work).await.ok(),
    }
}

/// Counts an attempt started at `started` that ended with `result` (`None`: cut short) in
/// `outage`: Redis answered, or it did not.
fn answered<T>(outage: &mut Outage, result: Option<&Result<T, LockError>>, started: Instant) {
    match result {
        None | Some(Err(LockError::Connection { .. } | LockError::NoQuorum { .. })) => {
            outage.may_retry(started);
        }
        Some(_) => outage.answered(),
    }
}

/// What a request ends with when Redis stayed silent for the unreachable timeout: the last
/// transient error, or that nothing answered.
fn unanswered(name: &str, outage: &Outage, transient: Option<LockError>) -> LockError {
    transient.unwrap_or_else(|| {
        LockError::connection(
            name,
            format!(
                "Redis did not answer within the locker's unreachable timeout ({:?})",
                outage.limit()
            ),
        )
    })
}

pub(crate) async fn acquire(request: Request<'_>) -> Result<Granted, LockError> {
    let span = tracing::debug_span!(
        "lock.permit.acquire",
        name = %request.keys.name,
        capacity = request.ask.capacity,
        weight = request.ask.weight,
        ttl_ms = request.ttl.as_millis() as u64,
        wait_ms = request.wait.as_millis() as u64,
        outcome = tracing::field::Empty,
    );
    let (asked, weight) = (request.ask.capacity, request.ask.weight);
    let mut judged = None;
    let result = run(request, &mut judged).instrument(span.clone()).await;
    // Judged against a capacity set with `set_capacity` (pinned), not the request's own:
    // the limit the error names is that one.
    let result = match (result, judged) {
        (Err(err @ (LockError::Busy { .. } | LockError::Timeout { .. })), Some(capacity))
            if capacity != asked =>
        {
            Err(err.into_limit_of(capacity, weight))
        }
        (result, _) => result,
    };
    span.record(
        "outcome",
        match &result {
            Ok(_) => "acquired",
            Err(LockError::Busy { .. }) => "busy",
            Err(LockError::Timeout { .. }) => "timeout",
            Err(_) => "error",
        },
    );
    result
}

/// `judged`: the capacity the last busy answer was judged against.
async fn run(request: Request<'_>, judged: &mut Option<u64>) -> Result<Granted, LockError> {
    let Request {
        env,
        store,
        keys,
        value,
        ask,
        ttl,
        wait,
    } = request;
    let begun = Instant::now();
    env.server_ready(&keys.name, begun, wait).await?;
    let deadline = begun + wait;
    let bound = (!wait.is_zero()).then_some(deadline);
    let mut undo = Abandon {
        env,
        store: store.clone(),
        keys,
        member: member(ask.weight, &value),
        id: String::new(),
        entry: String::new(),
        dirty: true,
        in_queue: false,
        sent: SentOn::default(),
    };
    let mut first_end = None;
    let mut transient = None;
    let timeout = |first_end: Option<Duration>, transient: Option<LockError>| {
        transient.unwrap_or_else(|| LockError::Timeout {
            name: keys.name.clone(),
            waited: begun.elapsed(),
            holder: None,
            retry_after: first_end,
            wait_setting: WaitSetting::default(),
        })
    };
    let local = match &store {
        Store::Server(_) => env.queue_notifier(),
        Store::Memory(_) => None,
    };
    // A Locker that listens already queues a waiting request from its first attempt.
    let queue_at_once = !wait.is_zero() && local.is_some_and(|n| n.listens());

    let mut outage = env.outage();
    let mut channel = "";
    let mut _interest = None;
    let mut told = matches!(store, Store::Memory(_));
    if !queue_at_once {
        let started = Instant::now();
        // A waiting request's attempts end when Redis has been silent for the unreachable
        // timeout; a try's one attempt has the command timeout.
        let (cap, outage_ends) = match bound {
            Some(_) => outage.cap(bound, started),
            None => (None, false),
        };
        let first = undo
            .attempt_unqueued(ttl, ask, local, cap, &mut outage, started)
            .await;
        match first {
            None if outage_ends => return Err(unanswered(&keys.name, &outage, None)),
            None => return Err(timeout(None, None)),
            Some(Ok(Attempt::Taken)) => return grant(undo, started, ttl),
            Some(Ok(Attempt::Busy {
                first_end: end,
                capacity,
                ..
            })) => {
                undo.dirty = false;
                first_end = end;
                *judged = Some(capacity);
            }
            Some(Ok(Attempt::Mismatch { stored })) => {
                undo.dirty = false;
                return Err(mismatch(keys, stored, ask));
            }
            Some(Err(err)) if !wait.is_zero() && err.is_transient() && outage.keeps_trying() => {
                transient = Some(err);
            }
            Some(Err(err)) => return Err(err),
        }
        if wait.is_zero() {
            return Err(LockError::Busy {
                name: keys.name.clone(),
                holder: None,
                retry_after: first_end,
                wait_setting: WaitSetting::default(),
            });
        }
    }
    // The waiter's signal: its turn (a message, or the reply of a release of its own
    // Locker), its hints when to look again.
    let wake = Arc::new(Wake::default());
    // Listen before queueing, so that a turn announced right after the queued attempt is
    // not missed.
    undo.id = new_value(&keys.name, None)?;
    if let Some(notifier) = local {
        let route = keys.route(&undo.id);
        let listening = bounded(bound, notifier.listen_permits(&keys.holders, &route, &wake));
        tokio::pin!(listening);
        let mut looks = Backoff::steady(LOOK_WHILE_LISTENING);
        let listened = loop {
            tokio::select! {
                biased;
                up = &mut listening => break up,
                () = tokio::time::sleep(looks.next(None)) => {}
            }
            // Nothing tells this waiter of a release before it listens: it looks meanwhile,
            // without queueing, as its first attempt did.
            undo.dirty = true;
            let started = Instant::now();
            let (cap, _) = outage.cap(bound, started);
            let look = undo
                .attempt_unqueued(ttl, ask, local, cap, &mut outage, started)
                .await;
            match look {
                // Unanswered in time: the listening's own bound decides what follows.
                None => {}
                Some(Ok(Attempt::Taken)) => return grant(undo, started, ttl),
                Some(Ok(Attempt::Busy {
                    first_end: end,
                    capacity,
                    ..
                })) => {
                    undo.dirty = false;
                    transient = None;
                    first_end = end;
                    *judged = Some(capacity);
                }
                Some(Ok(Attempt::Mismatch { stored })) => {
                    undo.dirty = false;
                    return Err(mismatch(keys, stored, ask));
                }
                Some(Err(err)) if err.is_transient() => {
                    tracing::debug!(name = %keys.name, %err, "a look while listening failed; listening goes on");
                    transient = Some(err);
                }
                Some(Err(err)) => return Err(err),
            }
        };
        match listened {
            None => return Err(timeout(first_end, transient)),
            Some(Ok(interest)) => {
                _interest = Some(interest);
                channel = notifier.own_channel();
                told = true;
            }
            Some(Err(err)) => {
                tracing::debug!(name = %keys.name, %err, "no turn notifications; polling");
            }
        }
    }
    undo.entry = queue_entry(
        ask.weight,
        deadline.saturating_duration_since(Instant::now()),
        ttl,
        &undo.id,
        channel,
        crate::backend::permits::parse_member(&undo.member).1,
    );
    // Where a permit granted outright (at a server time its message tells) falls on this
    // process's clock: the first and the latest queued attempt answered.
    let mut anchors = Anchors::default();

    // Wait in the queue.
    let mut backoff = Backoff::new(told);
    let mut retry = Backoff::new(false);
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(timeout(first_end, transient));
        }
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let _before_this_look = wake.take_hint();
        if let Some(at) = wake.take_taken() {
            return grant(undo, handed_at(at, begun), ttl);
        }
        // Granted outright: valid from the earliest instant the grant can have happened.
        // (Not placed on this clock, or replicas must acknowledge it: the attempt below
        // claims it like a reservation.)
        if let Some(at) = wake
            .take_given()
            .and_then(|ms| anchors.place(ms))
            .filter(|_| store.takes_outright(keys))
        {
            return grant(undo, at, ttl);
        }
        let waiter = QueueWaiter {
            id: &undo.id,
            entry: &undo.entry,
            channel,
            wake: &wake,
            life: deadline - now,
        };
        undo.dirty = true;
        undo.in_queue = true;
        let started = Instant::now();
        let (cap, outage_ends) = outage.cap(bound, started);
        let attempt = bounded(
            cap,
            store.acquire(
                keys,
                &undo.member,
                ttl,
                ask,
                Some(&waiter),
                &undo.sent,
                local,
            ),
        )
        .await;
        answered(&mut outage, attempt.as_ref(), started);
        let pause = match attempt {
            None if outage_ends => return Err(unanswered(&keys.name, &outage, transient)),
            None => return Err(timeout(first_end, transient)),
            Some(Ok(Attempt::Taken)) => return grant(undo, now, ttl),
            Some(Ok(Attempt::Busy {
                first_end: end,
                place,
                capacity,
                server_ms,
            })) => {
                if let Some(server_ms) = server_ms {
                    anchors.answered(started, server_ms);
                }
                transient = None;
                first_end = end;
                *judged = Some(capacity);
                // Every queued waiter looks by the first end it was told: a head is told
                // when to look again only if the first end moved sooner since it arrived.
                let pause = match (place, end) {
                    (Some(0 | 1), Some(end)) => end + SLACK,
                    (Some(_), Some(end)) => (end + SLACK).min(backoff.next(None)),
                    _ => backoff.next(None),
                };
                if told {
                    pause
                } else {
                    pause.min(backoff.next(None)).min(POLL_CAP)
                }
            }
            // Nothing was queued or taken by this attempt; the guard still takes back an
            // entry an earlier attempt left.
            Some(Ok(Attempt::Mismatch { stored })) => return Err(mismatch(keys, stored, ask)),
            Some(Err(err)) if err.is_transient() && outage.keeps_trying() => {
                tracing::debug!(name = %keys.name, %err, "permit attempt failed; retrying within the wait and the unreachable timeout");
                transient = Some(err);
                retry.next(None)
            }
            Some(Err(err)) => return Err(err),
        };
        let mut pause_until = (Instant::now() + pause)
            .min(deadline)
            .min(outage.gives_up_at().unwrap_or(deadline));
        // A message that only moves the timer costs no Redis call.
        loop {
            tokio::select! {
                () = notified.as_mut() => {}
                () = tokio::time::sleep_until(pause_until.into()) => break,
            }
            notified.set(wake.notified());
            notified.as_mut().enable();
            if let Some(at) = wake.take_taken() {
                return grant(undo, handed_at(at, begun), ttl);
            }
            if let Some(given) = wake.take_given() {
                match anchors.place(given) {
                    Some(at) if store.takes_outright(keys) => return grant(undo, at, ttl),
                    // Claimed by the next attempt instead.
                    _ => break,
                }
            }
            match wake.take_hint() {
                Some(Hint::Head(left) | Hint::Standby(left)) => {
                    pause_until = (Instant::now() + left + SLACK).min(deadline);
                }
                Some(Hint::Granted) | None => break,
            }
        }
    }
}

/// A server time read during a queued attempt, and when that attempt was sent: the server
/// read its clock after that instant.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    sent: Instant,
    server_ms: u64,
}

/// What a waiter needs to place a grant's server time on its own clock: its first queued
/// attempt answered, and its latest (the closer to a grant, the longer the permit counts).
#[derive(Debug, Default)]
struct Anchors {
    first: Option<Anchor>,
    latest: Option<Anchor>,
}

impl Anchors {
    fn answered(&mut self, sent: Instant, server_ms: u64) {
        let anchor = Some(Anchor { sent, server_ms });
        if self.first.is_none() {
            self.first = anchor;
        }
        self.latest = anchor;
    }

    /// The earliest instant of this clock at which a grant at server time `given` (ms) can
    /// have happened: an anchor's send instant, plus the server time from the anchor's to
    /// the grant's less a millisecond (both were truncated to whole milliseconds) and the
    /// drift allowance between the two clocks ([`validity`] of it). Counting the permit
    /// from there, it ends on this clock no later than on the server's. `None` when no
    /// anchor comes before the grant (the grant is then claimed by an attempt, as a
    /// reservation is).
    fn place(&self, given: u64) -> Option<Instant> {
        [self.latest, self.first]
            .into_iter()
            .flatten()
            .find(|anchor| anchor.server_ms <= given)
            .map(|anchor| {
                let between = Duration::from_millis((given - anchor.server_ms).saturating_sub(1));
                anchor.sent + validity(between)
            })
    }
}

/// When a permit handed over inside another request's script of this Locker (sent at
/// `sent`) counts from, for a request begun at `begun`: the later of the two. Both come
/// before the grant: the script ran after it was sent, and found this request in the queue,
/// which it joined after it began. A script sent before the request began (its sender
/// preempted before writing it, while this request queued) would otherwise date the lease
/// from before its own request.
fn handed_at(sent: Instant, begun: Instant) -> Instant {
    sent.max(begun)
}

/// A request whose capacity disagrees with the one stored with the name, or (against a
/// capacity set with `Semaphore::set_capacity`, which wins over the request's) whose weight
/// is above it.
fn mismatch(keys: &PermitKeys, stored: u64, ask: Ask) -> LockError {
    if ask.weight > stored {
        return LockError::PermitsAboveCapacity {
            name: keys.name.clone(),
            asked: ask.weight,
            permits: stored,
        };
    }
    LockError::CapacityMismatch {
        name: keys.name.clone(),
        stored,
        asked: ask.capacity,
    }
}

/// The permit is ours, unless the grant came back after its TTL had run out (a slow
/// network or server): such a permit protects nothing, so it is given back (by the guard,
/// still armed) and the request fails.
fn grant(mut undo: Abandon<'_>, started: Instant, ttl: Duration) -> Result<Granted, LockError> {
    let took = started.elapsed();
    let trusted = validity(ttl);
    if !trusted.is_zero() && took >= trusted {
        undo.dirty = true;
        return Err(LockError::connection(
            &undo.keys.name,
            format!("the permit was granted after {took:?}, when its TTL of {ttl:?} had already run out; the network or server is too slow for this TTL"),
        ));
    }
    undo.dirty = false;
    undo.in_queue = false;
    Ok(Granted {
        member: std::mem::take(&mut undo.member),
        started,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_placed_no_later_than_it_can_have_happened() {
        let mut anchors = Anchors::default();
        assert_eq!(anchors.place(1_000), None, "no anchor yet: claimed instead");
        let sent = Instant::now();
        anchors.answered(sent, 10_000);
        // Granted 5 s of server time after the anchor: at most 5 s less a millisecond and
        // the drift allowance later on this clock.
        let at = anchors.place(15_000).expect("placed");
        assert!(at <= sent + Duration::from_millis(4_999));
        assert!(at >= sent + Duration::from_millis(4_900));
        // Granted in the anchor's own millisecond, or the next: from the send itself.
        assert_eq!(anchors.place(10_000), Some(sent));
        assert_eq!(anchors.place(10_001), Some(sent));
        // A later anchor places a later grant closer; an earlier grant falls back on the
        // first anchor.
        let later = sent + Duration::from_secs(3);
        anchors.answered(later, 13_000);
        assert_eq!(anchors.place(13_001), Some(later));
        let early = anchors.place(12_000).expect("placed by the first anchor");
        assert!(early < later && early > sent);
        // Before every anchor: not placed.
        assert_eq!(anchors.place(9_999), None);
    }
}
