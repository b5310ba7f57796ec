//! Rounds that take the lock through a `#[redis_locked]` function, whose critical section
//! is a nested annotated function on the same key.
//!
//! The outer function holds the lock (no renewal) for a while, half the time past its
//! validity, then calls the nested one. The nested call is the reentrant path: it does not
//! acquire, and the library promises to run its body only while the enclosing lease is
//! still held, or to return `Err(Lost)` without running it. The nested body writes to the
//! fenced store with the lease's fencing token (the locker draws one on every acquisition),
//! so a body that ran on a lost lease shows up in the history as a `Nested` event with a
//! body stamp, and its write as any other write.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{current_lease, redis_locked, LeaseHandle, LockError};

use super::{fail_kind, millis, valid_until, Ctx};
use crate::clock::{self, Nanos};
use crate::event::{Acquired, Event, ReleaseOutcome, WriteOutcome};

/// The wait of the outer function (the attribute needs a literal: keep the two equal).
const WAIT: Duration = Duration::from_millis(150);

/// What the outer body tells the round about itself.
#[derive(Debug, Default)]
struct Trace {
    /// The acquisition id, once the body runs.
    id: Option<String>,
    /// When the body ended (the macro releases right after), and whether `is_lost()` said
    /// true then.
    ended: Option<(Nanos, bool)>,
}

/// One round: call the outer function on `torture:{index}` and log what happened.
pub(super) async fn round(
    ctx: &Arc<Ctx>,
    rng: &mut fastrand::Rng,
    task: u32,
    seq: &mut u64,
    index: u32,
) {
    let ttl_ms = ctx.args.ttl_ms;
    // Half the holds end well inside the validity; half run past it, where the nested
    // call must be refused.
    let hold = Duration::from_millis(if rng.bool() {
        rng.u64(0..ttl_ms / 2)
    } else {
        rng.u64(ttl_ms..ttl_ms * 3 / 2)
    });
    let id = ctx.acq_id(task, *seq + 1);
    let mut trace = Trace::default();
    // Half the rounds call two siblings of one key concurrently instead of the single
    // nested call (rule `sibling-overlap`).
    let siblings = match rng.u8(0..6) {
        0 | 1 => Some(Siblings::Join),
        2 => Some(Siblings::Select),
        // A spawned sibling only on a lease well inside its validity: it is another task,
        // not reentrant, and must be refused while the lock is held; past the validity it
        // could rightly get the lock.
        3 if hold < Duration::from_millis(ttl_ms / 2) => Some(Siblings::Spawn),
        _ => None,
    };
    let call_start = clock::now();
    let round = Round {
        index,
        call_start,
        id: &id,
        task,
        hold,
        siblings,
    };
    let result = outer(ctx, round, &mut trace).await;
    let t_return = clock::now();
    match (trace, result) {
        (
            Trace {
                id: Some(id),
                ended,
            },
            result,
        ) => {
            *seq += 1;
            let (t_sent, lost_reported) = ended.unwrap_or((t_return, true));
            ctx.log(&Event::Release {
                id,
                t_sent,
                t_reply: t_return,
                outcome: match result {
                    Ok(()) => ReleaseOutcome::Implicit,
                    Err(LockError::Lost { .. }) => ReleaseOutcome::NotHeld,
                    Err(_) => ReleaseOutcome::Error,
                },
                lost_reported,
            });
        }
        (Trace { id: None, .. }, Err(err)) => {
            let request = super::failure::Request {
                name: format!("torture:{index}"),
                call_start,
                wait: WAIT,
                hold: crate::event::HoldKind::Lock,
                set: None,
                weight: None,
            };
            super::failure::failed(ctx, rng, request, &err).await;
        }
        // The body ran, so it recorded its id.
        (Trace { id: None, .. }, Ok(())) => {}
    }
}

/// Holds `torture:{index}` for `hold`, then runs the critical section nested.
#[redis_locked(key = "torture:{round.index}", wait = "150ms", renew = false, locker = ctx.locker)]
async fn outer(ctx: &Arc<Ctx>, round: Round<'_>, trace: &mut Trace) -> Result<(), LockError> {
    let Round {
        index,
        call_start,
        id,
        task,
        hold,
        siblings,
    } = round;
    let Some(lease) = current_lease() else {
        panic!("harness bug: an annotated body runs without a current lease");
    };
    granted(ctx, &lease, index, call_start, id, task);
    trace.id = Some(id.to_owned());
    let _ = ctx.store.progress().await;
    tokio::time::sleep(hold).await;

    if let Some(how) = siblings {
        run_siblings(ctx, index, id, how).await;
        let t_end = clock::now();
        trace.ended = Some((t_end, lease.is_lost()));
        ctx.log(&Event::Releasing {
            id: id.to_owned(),
            t: t_end,
        });
        return Ok(());
    }
    let mut ran = None;
    let t_call = clock::now();
    let nested = critical_section(ctx, index, id, &lease, &mut ran).await;
    let t_return = clock::now();
    let outcome = match &nested {
        Ok(()) => "ok".to_owned(),
        Err(LockError::Lost { .. }) => "lost".to_owned(),
        Err(err) => format!("{:?}", fail_kind(err)).to_lowercase(),
    };
    ctx.log(&Event::Nested {
        id: id.to_owned(),
        t_call,
        t_body: ran,
        t_return,
        outcome,
        t_body_end: None,
        sibling: None,
    });
    if matches!(nested, Err(LockError::Lost { .. })) {
        ctx.log(&Event::LostDetected {
            id: id.to_owned(),
            t: t_return,
            how: "nested".to_owned(),
        });
    }
    // The body's own result is always Ok: what the macro returns then says what its
    // release found.
    let t_end = clock::now();
    trace.ended = Some((t_end, lease.is_lost()));
    // The macro releases as soon as the body returns.
    ctx.log(&Event::Releasing {
        id: id.to_owned(),
        t: t_end,
    });
    Ok(())
}

/// One annotated round's settings.
#[derive(Debug, Clone, Copy)]
struct Round<'a> {
    index: u32,
    call_start: Nanos,
    id: &'a str,
    task: u32,
    hold: Duration,
    siblings: Option<Siblings>,
}

/// How two sibling calls of one key run inside a locked body.
#[derive(Debug, Clone, Copy)]
enum Siblings {
    /// `tokio::join!`: both to completion.
    Join,
    /// `tokio::select!`: the first to finish wins, the other is dropped.
    Select,
    /// One sibling in a spawned task (not reentrant: it must be refused as busy), one in
    /// the body, joined.
    Spawn,
}

/// When a sibling's body ran.
#[derive(Debug, Default)]
struct Body {
    start: Option<Nanos>,
    end: Option<Nanos>,
}

/// Two sibling calls of the enclosing key, concurrently; logs a `Nested` event for each.
async fn run_siblings(ctx: &Arc<Ctx>, index: u32, id: &str, how: Siblings) {
    let (a, b) = (
        Mutex::new(Body::default()),
        Arc::new(Mutex::new(Body::default())),
    );
    let t_call = clock::now();
    let (ra, rb) = match how {
        Siblings::Spawn => {
            let spawned = tokio::spawn(spawned_sibling(Arc::clone(ctx), index, Arc::clone(&b)));
            let (x, y) = tokio::join!(sibling(ctx, index, &a), spawned);
            // A spawned task that panicked or was cancelled ran nothing we can judge.
            (Some(x), y.ok())
        }
        Siblings::Join => {
            let (x, y) = tokio::join!(sibling(ctx, index, &a), sibling(ctx, index, &b));
            (Some(x), Some(y))
        }
        Siblings::Select => tokio::select! {
            x = sibling(ctx, index, &a) => (Some(x), None),
            y = sibling(ctx, index, &b) => (None, Some(y)),
        },
    };
    let t_return = clock::now();
    let how = match how {
        Siblings::Join => "join",
        Siblings::Select => "select",
        Siblings::Spawn => "spawn",
    };
    // The spawned task has finished (joined): its copy of the stamps is the only other.
    let b = {
        let body = b.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Mutex::new(Body {
            start: body.start,
            end: body.end,
        })
    };
    // The spawned sibling is another task: not a nested call on the enclosing lease but a
    // request of its own, judged as such (rule `spawned-beside-holder`, not
    // `nested-on-lost`: past the enclosing lease it may rightly take the lock anew).
    let labels = match how {
        "spawn" => ["spawn", "spawned"],
        other => [other, other],
    };
    for ((body, result), label) in [(a, ra), (b, rb)].into_iter().zip(labels) {
        let body = body
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let outcome = match &result {
            None => "dropped".to_owned(),
            Some(Ok(())) => "ok".to_owned(),
            Some(Err(LockError::Lost { .. })) => "lost".to_owned(),
            Some(Err(err)) => format!("{:?}", fail_kind(err)).to_lowercase(),
        };
        ctx.log(&Event::Nested {
            id: id.to_owned(),
            t_call,
            t_body: body.start,
            t_return,
            outcome,
            // A body dropped by `select!` ran until the winner returned.
            t_body_end: body.end.or(body.start.map(|_| t_return)),
            sibling: Some(label.to_owned()),
        });
    }
}

/// A sibling critical section: stamps when its body runs, for a few milliseconds.
#[redis_locked(key = "torture:{index}", wait = "0s", renew = false, locker = ctx.locker)]
async fn sibling(ctx: &Ctx, index: u32, body: &Mutex<Body>) -> Result<(), LockError> {
    let stamp = |f: &dyn Fn(&mut Body)| {
        let mut b = body
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut b);
    };
    stamp(&|b| b.start = Some(clock::now()));
    tokio::time::sleep(Duration::from_millis(fastrand::u64(5..20))).await;
    stamp(&|b| b.end = Some(clock::now()));
    Ok(())
}

/// The sibling run in a task of its own (owns what it uses).
async fn spawned_sibling(
    ctx: Arc<Ctx>,
    index: u32,
    body: Arc<Mutex<Body>>,
) -> Result<(), LockError> {
    sibling(&ctx, index, &body).await
}

/// The critical section: a fenced write, reached only through the reentrant path.
#[redis_locked(key = "torture:{index}", wait = "0s", renew = false, locker = ctx.locker)]
async fn critical_section(
    ctx: &Ctx,
    index: u32,
    id: &str,
    lease: &LeaseHandle,
    ran: &mut Option<Nanos>,
) -> Result<(), LockError> {
    let t_sent = clock::now();
    *ran = Some(t_sent);
    let lost_reported = lease.is_lost();
    let name = format!("torture:{index}");
    let fence = lease.fencing_token();
    let outcome = match fence {
        Some(token) => match ctx.store.write(&name, token, id).await {
            Ok(true) => WriteOutcome::Accepted,
            Ok(false) => WriteOutcome::Rejected,
            Err(_) => WriteOutcome::Error,
        },
        None => WriteOutcome::Error,
    };
    ctx.log(&Event::Write {
        id: id.to_owned(),
        name,
        fence: fence.unwrap_or(0),
        t_sent,
        t_reply: clock::now(),
        outcome,
        lost_reported,
    });
    Ok(())
}

/// Logs the grant of the outer function's lease.
fn granted(ctx: &Ctx, lease: &LeaseHandle, index: u32, call_start: Nanos, id: &str, task: u32) {
    let sabotage = clock::nanos(Duration::from_millis(ctx.args.sabotage_ms));
    let valid = valid_until(lease) + sabotage;
    let acquired = clock::now();
    ctx.log(&Event::Acquired(Acquired {
        id: id.to_owned(),
        client: ctx.args.id,
        task,
        name: format!("torture:{index}"),
        token: lease.token().to_owned(),
        fence: lease.fencing_token(),
        call_start,
        attempt_start: clock::stamp_past(lease.acquired_at()),
        acquired,
        valid_until: valid,
        ttl_ms: ctx.args.ttl_ms,
        auto_renew: false,
        wait_ms: Some(millis(WAIT)),
        annotated: true,
        kind: crate::event::HoldKind::Lock,
        permits: None,
        weight: None,
        set: None,
    }));
}
