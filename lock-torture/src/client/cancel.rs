//! The cancellation fault: requests dropped at random points.
//!
//! Half the cancellation rounds wrap one request in a timeout of a random fraction of its
//! wait (the future is dropped wherever it is: at the local gate, in its first queued
//! attempt, asleep in the queue). The other half start two tasks that share this client's
//! Locker and ask for the same name, and abort both together at a random moment (a task
//! aborted with two requests of one Locker on one name). A request that completes first is
//! logged and held as any other. After a round that dropped a request and got no lease,
//! the task looks at the lock's key every 10 ms for as long as the dropped request's queue
//! place could have lived (its wait plus a claim window), and logs what it saw (rule
//! `ghost-grant`).

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockError;

use super::failure::{failed, Request};
use super::guard::Guard;
use super::held::{hold, Held};
use super::{millis, Ctx};
use crate::check::liveness::CLAIM_WINDOW;
use crate::clock::{self, Nanos};
use crate::event::{Event, HoldKind, Look};

/// What one request of the round came to.
enum Outcome {
    Granted(Guard),
    Failed(LockError),
    Dropped,
}

/// One cancellation round on `name`.
pub(super) async fn round(
    ctx: &Arc<Ctx>,
    rng: &mut fastrand::Rng,
    task: u32,
    seq: &mut u64,
    name: String,
) {
    let ttl_ms = ctx.args.ttl_ms;
    let wait = Duration::from_millis(rng.u64(ttl_ms..ttl_ms * 2));
    let cut = Duration::from_millis(rng.u64(0..ttl_ms));
    let call_start = clock::now();
    let (how, outcomes) = if rng.bool() {
        (
            "timeout",
            vec![one_under_timeout(ctx, &name, wait, cut).await],
        )
    } else {
        ("abort", two_aborted(ctx, &name, wait, cut).await)
    };
    let t_end = clock::now();
    let mut dropped = false;
    let mut got_lease = false;
    for outcome in outcomes {
        match outcome {
            Outcome::Dropped => {
                dropped = true;
                ctx.log(&Event::Cancelled {
                    client: ctx.args.id,
                    name: name.clone(),
                    t_start: call_start,
                    t_end,
                    wait_ms: millis(wait),
                    how: how.to_owned(),
                });
            }
            Outcome::Failed(err) => {
                let request = Request {
                    name: name.clone(),
                    call_start,
                    wait,
                    hold: HoldKind::Lock,
                    set: None,
                    weight: None,
                };
                failed(ctx, rng, request, &err).await;
            }
            Outcome::Granted(lease) => {
                got_lease = true;
                *seq += 1;
                let held = Held {
                    id: ctx.acq_id(task, *seq),
                    task,
                    name: name.clone(),
                    call_start,
                    wait,
                    auto_renew: false,
                    weight: None,
                };
                hold(ctx, rng, lease, held).await;
            }
        }
    }
    if dropped && !got_lease {
        // The dropped request's queue entry counts for its wait plus a claim window.
        let until = call_start + clock::nanos(wait) + CLAIM_WINDOW + 50_000_000;
        probe(ctx, &name, t_end, until).await;
    }
}

async fn one_under_timeout(ctx: &Ctx, name: &str, wait: Duration, cut: Duration) -> Outcome {
    let request = ctx
        .locker
        .lock(name.to_owned())
        .ttl(ctx.ttl())
        .wait(wait)
        .fencing();
    match tokio::time::timeout(cut, request.into_future()).await {
        Ok(Ok(lease)) => Outcome::Granted(Guard::Lock(lease)),
        Ok(Err(err)) => Outcome::Failed(err),
        Err(_) => Outcome::Dropped,
    }
}

/// Two tasks on this client's Locker ask for `name`; both are aborted at `cut`, or, as soon
/// as one of them gets the lock, the other is.
async fn two_aborted(ctx: &Arc<Ctx>, name: &str, wait: Duration, cut: Duration) -> Vec<Outcome> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let ctx = Arc::clone(ctx);
        let name = name.to_owned();
        tasks.spawn(async move {
            let request = ctx.locker.lock(name).ttl(ctx.ttl()).wait(wait).fencing();
            match request.await {
                Ok(lease) => Outcome::Granted(Guard::Lock(lease)),
                Err(err) => Outcome::Failed(err),
            }
        });
    }
    let mut outcomes = Vec::new();
    let deadline = tokio::time::sleep(cut);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => break,
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(outcome)) => {
                    let granted = matches!(outcome, Outcome::Granted(..));
                    outcomes.push(outcome);
                    if granted {
                        break;
                    }
                }
                Some(Err(_)) => outcomes.push(Outcome::Dropped),
            },
        }
    }
    tasks.abort_all();
    while let Some(joined) = tasks.join_next().await {
        outcomes.push(joined.unwrap_or(Outcome::Dropped));
    }
    outcomes
}

/// Reads the lock's key every 10 ms until `until`, and logs the values seen.
async fn probe(ctx: &Ctx, name: &str, t_cancel: Nanos, until: Nanos) {
    let key = format!("lock:{{{name}}}");
    // On Redlock a look at one master tells nothing of the others: no probe (rule
    // `liveness` still judges the waiters).
    let [url] = ctx.args.lock_urls.as_slice() else {
        return;
    };
    let Ok(client) = redis::Client::open(url.as_str()) else {
        return;
    };
    let limit = ctx.ttl();
    let Ok(Ok(mut conn)) =
        tokio::time::timeout(limit, client.get_multiplexed_async_connection()).await
    else {
        return;
    };
    let mut looks = Vec::new();
    while clock::now() < until && !ctx.stopped() {
        let value: Option<String> =
            tokio::time::timeout(limit, redis::cmd("GET").arg(&key).query_async(&mut conn))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten();
        looks.push(Look {
            t: clock::now(),
            node: 0,
            value,
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ctx.log(&Event::CancelProbe {
        client: ctx.args.id,
        name: name.to_owned(),
        t_cancel,
        looks,
    });
}
