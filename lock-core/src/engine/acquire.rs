//! One acquisition from start to end: the request's settings resolved against the
//! Locker's, the `lock.acquire` span and metrics, the fast path (one plain `SET`), then the
//! slow path of [`turn`](crate::engine::turn) when the lock is busy and the request waits.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::backend::AttemptKind;
use crate::engine::attempt::{Acquire, Busy, Tried, THIS_LOCKER};
use crate::engine::deadlock::Holds;
use crate::engine::held::{Held, Renewal};
use crate::engine::local::Owner;
use crate::engine::turn::wait_for_turn;
use crate::engine::Engine;
use crate::key::LockKeys;
use crate::limits::{validate_hold_at_least, validate_ttl, validate_wait};
use crate::out_of_line::boxed;
use crate::token::new_value;
use crate::wait::Outage;
use crate::LockError;

/// What a request asks for; `None` takes the Locker's default.
#[derive(Debug)]
pub(crate) struct Spec {
    pub name: String,
    pub ttl: Option<Duration>,
    pub wait: Option<Duration>,
    pub fencing: Option<bool>,
    pub renew: Option<Renewal>,
    /// A release before this long after the acquisition leaves the lock to expire then
    /// (a scheduled run's minimum hold) instead of deleting it.
    pub hold_at_least: Option<Duration>,
    /// The leases this request's task holds: a wait is checked for deadlocks when there
    /// are any (see `engine/deadlock.rs`).
    pub holds: Holds,
}

/// Takes the lock `spec` asks for through `engine`: `lease` of the engine and the fresh
/// lease's state, or why not. (The facade's wrapper is passed in rather than applied by the
/// caller, so that no outer future keeps a copy of what this one holds.)
// The async block is the point (see `run`).
#[allow(clippy::manual_async_fn)]
pub(crate) fn acquire<L>(
    engine: Arc<Engine>,
    spec: Spec,
    lease: fn(Arc<Engine>, Arc<Held>) -> L,
) -> impl Future<Output = Result<L, LockError>> {
    // An `async` block for the reason `run` gives.
    async move {
        let Spec {
            name,
            ttl,
            wait,
            fencing,
            renew,
            hold_at_least,
            holds,
        } = spec;
        let settings = engine.settings();
        let ttl = ttl.unwrap_or(settings.default_ttl);
        let wait = wait.unwrap_or(settings.default_wait);
        let fencing = fencing.unwrap_or(settings.fencing);
        let keys = LockKeys::new(&settings.prefix, name)?;
        validate_ttl(&keys.name, ttl)?;
        validate_wait(&keys.name, wait)?;
        if let Some(hold) = hold_at_least {
            validate_hold_at_least(&keys.name, hold)?;
        }
        let value = new_value(&keys.name, settings.label.as_deref())?;
        // The request's time starts here: a wait is a deadline (and a try ends within the
        // command timeout), the server check included.
        let begun = Instant::now();
        engine.server_ready(&keys.name, begun, wait).await?;
        // Who awaits this request: the lease will count as its (see `engine/local.rs`).
        let owner = Owner::current().await;
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
        let acquisition = Acquire {
            engine: &engine,
            span: &span,
            keys,
            value,
            ttl,
            fencing,
            begun,
            owner,
            attempts: 0,
            last_busy: Busy::default(),
            fencing_token: None,
            listened: false,
            renew,
            hold_at_least,
            expired_grant: None,
            transient: None,
            not_replicated: None,
            outage: (!wait.is_zero()).then(|| Outage::new(settings.unreachable_timeout)),
        };
        // Pinned where it is built, and the span put around a reference to it: moved into
        // `Instrumented` and then into this future's state, its kilobytes were copied twice.
        let result = {
            let attempts = std::pin::pin!(run(acquisition, wait, holds));
            attempts.instrument(span.clone()).await
        };
        let outcome = match &result {
            Ok(_) => "acquired",
            Err(LockError::Busy { .. }) => "busy",
            Err(LockError::Timeout { .. }) => "timeout",
            Err(LockError::Deadlock { .. } | LockError::WaitChainTooLong { .. }) => "deadlock",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        family.acquire(outcome, begun);
        result.map(|held| lease(engine, held))
    }
}

/// The fast path: one attempt straight away; then, unless it was a try, the slow path.
///
/// An `async` block rather than an `async fn`: a function's arguments are copied into its
/// future's locals and keep their first place too, which cost this future 312 bytes.
#[allow(clippy::manual_async_fn)]
fn run<'a>(
    mut acq: Acquire<'a>,
    wait: Duration,
    holds: Holds,
) -> impl Future<Output = Result<Arc<Held>, LockError>> + Send + 'a {
    async move {
        let deadline = acq.begun + wait;
        // A waiting request's attempts end at its deadline. A try (wait zero) has the
        // command timeout for its one attempt: connecting first, if it must, and every
        // command of the attempt included.
        let bound = if wait.is_zero() {
            Some(acq.begun + acq.engine.settings().command_timeout)
        } else {
            Some(deadline)
        };
        let local = acq.engine.local().get(&acq.keys.name);
        let queue = if wait.is_zero() {
            None
        } else {
            acq.engine.queue_notifier()
        };
        // Fast path: try once straight away, unless a lease of this locker holds the name (no
        // need to ask Redis) or this locker's waiters are queued for it (a newcomer must not
        // barge in ahead of them). A plain SET: the uncontended path runs no script.
        let held_here = local.local_holder_until().is_some();
        // A lease this very code took (see `engine/local.rs`) is waited for like any other:
        // it may have been handed to another task, which the library cannot see, and whose
        // release this wait must not refuse. (A lease on this task's call stack is refused
        // at once, in `request.rs`: that one cannot have moved.)
        // A name this locker queued for a moment ago: queue at once (the queued attempt
        // takes the lock if it is free and nobody waits), rather than try a SET first.
        // Asked once: a grant below uses it too (see `Acquire::grant`).
        let contended_lately = local.contended_lately(acq.begun);
        let contended = queue.is_some() && contended_lately;
        let fast_path = wait.is_zero() || !(local.has_queue() || held_here || contended);
        if fast_path {
            let (kind, commands) = if queue.is_some() {
                (AttemptKind::BeforeQueueing, 1)
            } else {
                (AttemptKind::Try, 2) // a busy answer asks for the holder's TTL too
            };
            // A far deadline cannot pass during this attempt, nor a try's on an open
            // connection: no timer for it.
            // Nor a deadline after the end of the unreachable timeout, which bounds the
            // attempt in its place (see `Outage::cap`): no clock read to weigh it then.
            let attempt_bound = if wait.is_zero() {
                bound.filter(|_| !acq.engine.try_ends_in_time())
            } else {
                let outage_first = acq
                    .outage
                    .as_ref()
                    .is_some_and(|outage| outage.ends_before(deadline, acq.begun));
                bound.filter(|&deadline| {
                    !outage_first && !acq.engine.attempt_ends_before(deadline, commands)
                })
            };
            // Counted from the request's start: no clock read of its own.
            match acq.attempt_at(acq.begun, attempt_bound, kind).await {
                Ok(Tried::Acquired { started, answered }) => {
                    return Ok(acq.grant(started, answered, local, contended_lately));
                }
                Ok(Tried::OutOfTime) if wait.is_zero() => return Err(acq.unanswered()),
                Ok(Tried::OutOfTime) => return Err(acq.timeout()),
                Ok(Tried::NotYet) => {}
                // A waiting request rides out a dropped connection within its wait, for
                // the locker's unreachable timeout at most.
                Err(err) if !wait.is_zero() && err.is_transient() && acq.keeps_trying() => {
                    acq.transient = Some(err);
                }
                Err(err) => return Err(err),
            }
            if wait.is_zero() {
                if held_here {
                    acq.last_busy.holder = Some(THIS_LOCKER.to_owned());
                }
                return Err(acq.busy());
            }
        }

        // Slow path, in a box of its own: the uncontended acquisition above stays a small
        // future (a large one costs an allocation of several kilobytes per lock).
        let plain_first = !(fast_path || contended);
        // Deadlock detection, beside the wait: only when the task holds other leases.
        let watch = holds.watch(acq.engine, &acq.keys, &acq.owner, acq.begun);
        // Built out of line too: its future, on this future's stack, would grow the frame
        // of every poll of the fast path (see `out_of_line.rs`).
        let waiting = move || wait_for_turn(acq, deadline, bound, local, queue, plain_first);
        match watch {
            None => boxed(waiting).await,
            Some(watch) => boxed(move || watch.around(waiting(), deadline)).await,
        }
    }
}
