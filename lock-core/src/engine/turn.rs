//! The slow path of an acquisition: queue behind this Locker's other waiters for the name,
//! then stand in the lock's Redis-side queue (told our turn on the Locker's channel) or
//! listen to its release channel, or poll, until the lock is ours or the deadline passes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::backend::{AnyBackend, AttemptKind, Backend as _, Place, Waiter, CLAIM_WINDOW};
use crate::connection::notifier::{Interest, Notifier, Subscription};
use crate::engine::attempt::{Acquire, Busy, Tried, THIS_LOCKER};
use crate::engine::held::Held;
use crate::engine::local::{NameRef, Queued};
use crate::engine::Engine;
use crate::key::LockKeys;
use crate::signal::Hint;
use crate::wait::{Backoff, Outage, LOOK_WHILE_LISTENING};
use crate::LockError;

/// Slack after a lease's end before looking: Redis expires keys at millisecond
/// granularity, so a waiter that looks exactly at the end may find the key still there.
const EXPIRY_SLACK: Duration = Duration::from_millis(1);

/// How a waiter learns that it may try again.
enum Listening {
    /// Told its turn in the lock's Redis-side queue, on the locker's own channel (kept for
    /// its `Drop`, which stops routing the lock's messages here; on Redlock, one per master
    /// that could be listened to: a turn is told by every master that reserves it).
    Queue { _interests: Vec<Interest> },
    /// Woken by every release of the lock (its release channel; kept for its `Drop`).
    Broadcast { _subscription: Subscription },
    /// Nothing tells it: timed retries.
    Polling,
}

/// This request's place in the locker's local queue for the name. When the request ends
/// without the lock (timeout, error, cancellation) and it is the last of the locker's
/// waiters for the name, it also takes the locker out of the lock's Redis-side queue,
/// whichever of the locker's waiters put it there: a place left behind would have the next
/// release reserved for a locker that no longer wants the lock.
struct InLine<'a> {
    queued: Option<Queued<'a>>,
    engine: &'a Arc<Engine>,
    keys: &'a LockKeys,
    /// The locker's member in the Redis queue (`None`: it never queues there).
    member: Option<&'a str>,
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        let Some(leaving) = self.queued.take().and_then(Queued::leave) else {
            return;
        };
        let Some(member) = self.member else { return };
        // Outside a runtime nothing runs (and `leaving`, dropped with the task, lets
        // newcomers queue): the entry costs the line one claim window when its turn comes.
        let engine = Arc::clone(self.engine);
        let keys = self.keys.clone();
        let member = member.to_owned();
        self.engine.spawn_background(async move {
            let left = engine.backend().leave_queue(&keys, &member).await;
            if let Err(err) = left {
                tracing::debug!(name = %keys.name, %err, "leaving the waiter queue failed; the entry expires by itself");
            }
            drop(leaving);
        });
    }
}

/// What came first while a waiter's listening was being set up.
enum WhileListening<T> {
    /// Listening is up, or failed: what it ended with.
    Up(T),
    /// A look took the lock.
    Took { started: Instant, answered: Instant },
    /// A look was cut at the request's deadline, unanswered.
    OutOfTime,
    /// A look failed with an error that is not transient.
    Failed(LockError),
}

/// Awaits `listening` (the waiter's subscriptions being set up), trying the lock meanwhile
/// every [`LOOK_WHILE_LISTENING`] without queueing: nothing would tell this waiter of a
/// release before it listens. Dropped, it drops `listening`, whose interests then stop.
async fn look_while_listening<T>(
    acq: &mut Acquire<'_>,
    bound: Option<Instant>,
    listening: impl std::future::Future<Output = T>,
) -> WhileListening<T> {
    tokio::pin!(listening);
    let mut looks = Backoff::steady(LOOK_WHILE_LISTENING);
    loop {
        tokio::select! {
            biased;
            up = &mut listening => return WhileListening::Up(up),
            () = tokio::time::sleep(looks.next(None)) => {}
        }
        match acq.attempt(bound, AttemptKind::Try).await {
            Ok(Tried::Acquired { started, answered }) => {
                return WhileListening::Took { started, answered };
            }
            Ok(Tried::OutOfTime) => return WhileListening::OutOfTime,
            Ok(Tried::NotYet) => acq.transient = None,
            Err(err) if err.is_transient() => {
                tracing::debug!(name = %acq.keys.name, %err, "a look while listening failed; listening goes on");
                acq.transient = Some(err);
            }
            Err(err) => return WhileListening::Failed(err),
        }
    }
}

/// The slow path: queue (locally, then in Redis or on the release channel) until the
/// lock is ours or the deadline passes.
pub(super) async fn wait_for_turn(
    mut acq: Acquire<'_>,
    deadline: Instant,
    bound: Option<Instant>,
    local: NameRef,
    queue: Option<&Notifier>,
    plain_first: bool,
) -> Result<Arc<Held>, LockError> {
    // Slow path. Queue behind this locker's other waiters: only the head of the queue
    // talks to Redis, so N local waiters cost Redis what one does.
    let engine = acq.engine;
    let keys = acq.keys.clone();
    let in_line = InLine {
        queued: Some(local.enqueue()),
        engine,
        keys: &keys,
        member: queue.and(engine.queue_member()),
    };
    let Ok(turn) = tokio::time::timeout_at(deadline.into(), local.gate.lock()).await else {
        return Err(acq.timeout());
    };
    let mut listening = Listening::Polling;
    // This request's place in line on Redlock's masters (see `Waiter::ticket`): now, on
    // the masters' clock (only Redlock's queues are ordered by it).
    let ticket = match (queue, engine.backend()) {
        (Some(_), AnyBackend::Redlock(redlock)) => {
            match tokio::time::timeout_at(deadline.into(), redlock.ticket(&acq.keys.name)).await {
                Ok(ticket) => ticket,
                Err(_) => return Err(acq.timeout()),
            }
        }
        _ => 0,
    };
    if let Some(notifier) = queue {
        // Stand in the lock's Redis-side queue. Listen first, so that a turn announced
        // right after the queued attempt is not missed.
        let listen = notifier.listen(&keys.lock, &local.released);
        // Redlock's other masters, at once and best effort: one that cannot be reached
        // within the per-command timeout is not listened to for this request.
        let others = join_all(engine.other_masters().iter().map(|other| {
            let listen = other.listen(&keys.lock, &local.released);
            async move {
                let limit = engine.settings().command_timeout;
                match tokio::time::timeout(limit, listen).await {
                    Ok(Ok(interest)) => Some(interest),
                    Ok(Err(err)) => {
                        tracing::debug!(%err, "no turn messages from one Redlock master");
                        None
                    }
                    Err(_) => None,
                }
            }
        }));
        let listened = async {
            tokio::join!(
                tokio::time::timeout_at(deadline.into(), listen),
                tokio::time::timeout_at(deadline.into(), others)
            )
        };
        // Listening takes a round trip or two, but on a cold start (the pub/sub
        // connection still opening on a starved machine) or while a subscription moves
        // to its slot's new master it took up to 113 ms, during which nothing would tell
        // this waiter of a release: it looks meanwhile, without queueing.
        let (listened, others) = match look_while_listening(&mut acq, bound, listened).await {
            WhileListening::Up(listened) => listened,
            WhileListening::Took { started, answered } => {
                let contended = local.contended_lately(acq.begun);
                let held = acq.grant(started, answered, local.clone(), contended);
                drop((turn, in_line));
                return Ok(held);
            }
            WhileListening::OutOfTime => return Err(acq.timeout()),
            WhileListening::Failed(err) => return Err(err),
        };
        let mut interests: Vec<Interest> =
            others.unwrap_or_default().into_iter().flatten().collect();
        match listened {
            Ok(Ok(interest)) => interests.push(interest),
            Ok(Err(err)) => {
                tracing::debug!(name = %acq.keys.name, %err, "no waiter-queue notifications from the first server");
            }
            Err(_) => return Err(acq.timeout()),
        }
        if interests.is_empty() {
            tracing::debug!(name = %acq.keys.name, "no waiter-queue notifications; falling back to timed retries");
        } else {
            listening = Listening::Queue {
                _interests: interests,
            };
        }
    }
    // Without the queue, release notifications are subscribed to only once Redis says
    // someone else holds the name: while a lease of this locker holds it, its release is
    // signalled locally.
    let mut subscribe_pending = queue.is_none() && acq.engine.notifier().is_some();
    // Out of the Redis queue, a plain SET comes first: after a release by this very
    // locker, or with nobody queued, it is all it takes (one command, no script).
    let mut plain_next = plain_first;
    // Pauses between attempts that failed with a transient error (a dropped connection,
    // a server restarting): short, since nothing will announce the recovery.
    let mut retry = Backoff::new(false);
    let mut backoff = Backoff::new(!matches!(listening, Listening::Polling));
    // Told its turn (the lock is reserved for this waiter) since its last queued attempt.
    let mut told_turn = false;
    loop {
        // Nothing starts after the deadline, whatever woke this waiter.
        if Instant::now() >= deadline {
            return Err(acq.timeout());
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
            acq.last_busy = Busy {
                remaining: Some(holder_until.saturating_duration_since(Instant::now())),
                holder: Some(THIS_LOCKER.to_owned()),
                place: None,
            };
            plain_next = true;
            holder_until.min(deadline)
        } else {
            let tried = match (&listening, queue) {
                (Listening::Queue { .. }, Some(_)) if plain_next && !local.in_redis_queue() => {
                    plain_next = false;
                    let tried = acq.attempt(bound, AttemptKind::BeforeQueueing).await;
                    if matches!(tried, Ok(Tried::NotYet)) {
                        continue; // busy: queue at once
                    }
                    tried
                }
                (Listening::Queue { .. }, Some(_)) => {
                    // A leave of the queue by this locker's previous request may still be
                    // on its way: landing after this attempt, it would take our new entry.
                    if tokio::time::timeout_at(deadline.into(), local.no_leave_in_flight())
                        .await
                        .is_err()
                    {
                        return Err(acq.timeout());
                    }
                    let waiter = Waiter {
                        member: engine.queue_member().unwrap_or_default(),
                        life: deadline.saturating_duration_since(Instant::now()),
                        ticket,
                        told_turn,
                    };
                    // Before it is sent: dropped with the attempt in flight, the request
                    // must still leave the queue the attempt may have put it in.
                    local.may_be_in_redis_queue();
                    told_turn = false;
                    let tried = acq.attempt(bound, AttemptKind::Queued(&waiter)).await;
                    if matches!(tried, Ok(Tried::NotYet)) {
                        local.note_contended(Instant::now());
                    }
                    tried
                }
                // Told of releases on the release channel (or about to be): a busy answer
                // marks the holder's value, so that its release is announced whatever
                // protocol its holder uses (an unmarked release is a silent delete).
                (Listening::Broadcast { .. }, _) => {
                    acq.attempt(bound, AttemptKind::Listening).await
                }
                (Listening::Polling, _) if subscribe_pending => {
                    acq.attempt(bound, AttemptKind::Listening).await
                }
                (Listening::Polling, _) | (Listening::Queue { .. }, None) => {
                    acq.attempt(bound, AttemptKind::Try).await
                }
            };
            let tried = match tried {
                // Cut at the deadline unanswered: that says nothing new, so an earlier
                // attempt's transient error (a majority out of reach, a dropped connection)
                // is still what the request ends with, not a plain timeout.
                Ok(Tried::OutOfTime) => Tried::OutOfTime,
                Ok(tried) => {
                    acq.transient = None;
                    tried
                }
                Err(err) if err.is_transient() && acq.keeps_trying() => {
                    tracing::debug!(name = %acq.keys.name, %err, "attempt failed; retrying within the wait and the unreachable timeout");
                    acq.transient = Some(err);
                    let now = Instant::now();
                    let gives_up_at = acq.outage.as_ref().and_then(Outage::gives_up_at);
                    let pause_until = (now + retry.next(None))
                        .min(deadline)
                        .min(gives_up_at.unwrap_or(deadline));
                    tokio::select! {
                        () = released.as_mut() => {}
                        () = tokio::time::sleep_until(pause_until.into()) => {}
                    }
                    continue;
                }
                Err(err) => return Err(err),
            };
            tracing::trace!(
                name = %acq.keys.name,
                acquired = matches!(tried, Tried::Acquired { .. }),
                place = ?acq.last_busy.place,
                remaining = ?acq.last_busy.remaining,
                holder = ?acq.last_busy.holder,
                "attempt answered"
            );
            match tried {
                Tried::Acquired { started, answered } => {
                    // A queued attempt took us out of the Redis queue. Record the new holder
                    // before leaving the local queue, so that the next in line waits for
                    // its release instead of asking Redis.
                    local.out_of_redis_queue();
                    let contended = local.contended_lately(acq.begun);
                    let held = acq.grant(started, answered, local.clone(), contended);
                    drop((turn, in_line, listening));
                    return Ok(held);
                }
                Tried::OutOfTime => return Err(acq.timeout()),
                Tried::NotYet => {}
            }
            if subscribe_pending {
                // Held elsewhere: from now on, learn of its release by notification.
                // Subscribing takes a moment during which a release would go unseen,
                // so look once more right after it.
                subscribe_pending = false;
                let subscribing =
                    tokio::time::timeout_at(deadline.into(), subscribe(engine, &keys, &local));
                // Looking meanwhile, as while listening in the queue (see above).
                let subscription = match look_while_listening(&mut acq, bound, subscribing).await {
                    WhileListening::Up(subscribed) => subscribed.ok().flatten(),
                    WhileListening::Took { started, answered } => {
                        let contended = local.contended_lately(acq.begun);
                        let held = acq.grant(started, answered, local.clone(), contended);
                        drop((turn, in_line, listening));
                        return Ok(held);
                    }
                    WhileListening::OutOfTime => return Err(acq.timeout()),
                    WhileListening::Failed(err) => return Err(err),
                };
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
                return Err(acq.timeout());
            }
            let queued_in_redis = matches!(listening, Listening::Queue { .. });
            let pause = pause(&acq, &mut backoff, queued_in_redis).min(deadline - now);
            tracing::trace!(name = %acq.keys.name, ?pause, "waiting");
            now + pause
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
            let hint = local.released.take_hint();
            tracing::trace!(name = %acq.keys.name, ?hint, "woken");
            match hint {
                Some(Hint::Standby(left)) => {
                    pause_until = (Instant::now() + left + EXPIRY_SLACK).min(deadline);
                }
                Some(Hint::Head(left)) => {
                    // First in line now: the holder's TTL, within the head's safety net.
                    let pause = (left + EXPIRY_SLACK).min(backoff.next(None));
                    pause_until = (Instant::now() + pause).min(deadline);
                }
                Some(Hint::Granted) => {
                    told_turn = true;
                    break;
                }
                None => break,
            }
        }
    }
}

/// How long to wait before looking again when nothing wakes this waiter sooner.
fn pause(acq: &Acquire<'_>, backoff: &mut Backoff, queued_in_redis: bool) -> Duration {
    let remaining = acq.last_busy.remaining;
    let place = acq.last_busy.place.filter(|_| queued_in_redis);
    match (place, remaining) {
        // First in line behind a waiter the lock is reserved for (it left the line): our
        // turn if it does not claim the lock within its claim window, which ends then.
        (
            Some(Place {
                position: 0,
                head_reserved: true,
            }),
            Some(left),
        ) => left + EXPIRY_SLACK,
        // First in line: the holder's lease ends then, should it never release (a crash).
        // A safety net too, should the turn message be lost with the pub/sub connection up
        // (a failover between the PUBLISH and its delivery, queue keys evicted): the lock
        // would lie free until then. It only fires under a holder that keeps the lock
        // beyond it (0.5 s growing to 5 s), one queued attempt each time.
        (Some(Place { position: 0, .. }), Some(left)) => {
            (left + EXPIRY_SLACK).min(backoff.next(None))
        }
        // Next after a head that waits for a holder (or for its reservation's claim): if
        // the holder crashes and the head is gone too, it is our turn one claim window
        // after the lease (or the reservation) ends.
        (Some(Place { position: 1, .. }), Some(left)) => left + CLAIM_WINDOW + EXPIRY_SLACK,
        // Further back: our turn is announced; the timer is only a safety net.
        (Some(_), _) => backoff.next(None),
        (None, remaining) => backoff.next(remaining),
    }
}

async fn subscribe(engine: &Engine, keys: &LockKeys, local: &NameRef) -> Option<Subscription> {
    let notifier = engine.notifier()?;
    match notifier.subscribe(&keys.channel(), &local.released).await {
        Ok(subscription) => Some(subscription),
        Err(err) => {
            tracing::debug!(name = %keys.name, %err, "no release notifications; falling back to timed retries");
            None
        }
    }
}
