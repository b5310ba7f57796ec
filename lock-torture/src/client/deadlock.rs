//! The deadlock workload (`--primitive deadlock`): each client's one task takes two or three
//! of a few names in a random order, nested (`using` inside `using`, as nested
//! `#[redis_locked]` functions do), with pauses while holding, and one inner request in
//! four dropped at a random point (cancellation), after which the task keeps holding what it
//! holds for a while. Every nested request is logged as a [`Waited`]: what the task held,
//! what it asked for, when the wait began and ended, and how (a grant, `Deadlock` with
//! its cycle, a timeout, a cancellation). The rules are in `check/deadlock.rs`.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use lock_core::LockError;

use super::Ctx;
use crate::clock;
use crate::event::Event;
use crate::waits::Waited;

/// The longest a nested request waits: longer than the detection bound of the rule
/// `deadlock-persists`, so that a cycle left undetected shows.
const MAX_WAIT_MS: u64 = 2500;

/// Runs rounds until the client stops.
pub(super) async fn task(ctx: &Ctx, task: u32) {
    let seed = ctx.args.seed ^ (u64::from(ctx.args.id) << 32) ^ u64::from(task);
    let mut rng = fastrand::Rng::with_seed(seed);
    while !ctx.stopped() {
        let mut names: Vec<String> = (0..ctx.args.names.max(2))
            .map(|i| crate::names::name(i, crate::names::NameKind::Plain))
            .collect();
        rng.shuffle(&mut names);
        names.truncate(rng.usize(2..=names.len().min(3)));
        level(ctx, &mut rng, &names, 0).await;
        tokio::time::sleep(Duration::from_millis(rng.u64(0..30))).await;
    }
}

/// Takes `names[depth]` (holding `names[..depth]`), then the next level inside it.
fn level<'a>(
    ctx: &'a Ctx,
    rng: &'a mut fastrand::Rng,
    names: &'a [String],
    depth: usize,
) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
    Box::pin(async move {
        let Some(name) = names.get(depth) else {
            return;
        };
        let wait = Duration::from_millis(rng.u64(MAX_WAIT_MS / 2..=MAX_WAIT_MS));
        let cancel_after =
            (depth > 0 && rng.u8(0..4) == 0).then(|| Duration::from_millis(rng.u64(0..400)));
        let pause_inside = Duration::from_millis(rng.u64(0..40));
        let pause_after = Duration::from_millis(rng.u64(0..150));
        // Logged when the wait ends: at the grant (first thing in the body), with the
        // request's error, or, dropped unlogged (a cancellation here or further out), as
        // cancelled.
        let pending = std::sync::Mutex::new(Pending {
            ctx,
            waited: (depth > 0).then(|| Waited {
                client: ctx.args.id,
                holding: names[..depth].to_vec(),
                wants: name.clone(),
                t_start: clock::now(),
                t_end: 0,
                outcome: String::new(),
                cycle: Vec::new(),
            }),
        });
        let end = |outcome: &str, cycle: Vec<(String, Option<String>)>| {
            if let Ok(mut pending) = pending.lock() {
                pending.end(outcome, cycle);
            }
        };
        let mut inner_rng = fastrand::Rng::with_seed(rng.u64(..));
        let request = ctx
            .locker
            .lock(name.clone())
            .ttl(ctx.ttl())
            .wait(wait)
            .using(|_| async {
                end("granted", Vec::new());
                tokio::time::sleep(pause_inside).await;
                level(ctx, &mut inner_rng, names, depth + 1).await;
                Ok::<(), LockError>(())
            });
        let result = match cancel_after {
            Some(after) => tokio::time::timeout(after, request).await.ok(),
            None => Some(request.await),
        };
        let outcome = match &result {
            Some(Ok(())) => "granted",
            None => "cancelled",
            Some(Err(LockError::Deadlock { cycle, .. })) => {
                let cycle = cycle
                    .iter()
                    .map(|link| (link.name().to_owned(), link.holder().map(str::to_owned)))
                    .collect();
                end("deadlock", cycle);
                "deadlock"
            }
            Some(Err(LockError::Timeout { .. })) => "timeout",
            Some(Err(_)) => "error",
        };
        end(outcome, Vec::new());
        if outcome != "granted" {
            // Keep holding what the enclosing levels hold for a while: a wait that ended
            // must stop counting at once, not when the enclosing lease goes.
            tokio::time::sleep(pause_after).await;
        }
    })
}

/// A wait not yet logged; logged as cancelled if dropped so.
struct Pending<'a> {
    ctx: &'a Ctx,
    waited: Option<Waited>,
}

impl Pending<'_> {
    fn end(&mut self, outcome: &str, cycle: Vec<(String, Option<String>)>) {
        if let Some(mut waited) = self.waited.take() {
            waited.t_end = clock::now();
            waited.outcome = outcome.to_owned();
            waited.cycle = cycle;
            self.ctx.log(&Event::Waited(waited));
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.end("cancelled", Vec::new());
    }
}
