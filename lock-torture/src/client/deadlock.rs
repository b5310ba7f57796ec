//! The deadlock workload (`--primitive deadlock`), two kinds of task in each client:
//!
//! - One task takes two or three of a few names in a random order, nested, each level at
//!   random through `using` (as nested `#[redis_locked]` functions do) or through plain
//!   `lock()` with the lease kept in a variable (auto-renewed, released after the inner
//!   levels), with pauses while holding, and one inner request in four dropped at a random
//!   point (cancellation), after which the task keeps holding what it holds for a while.
//! - Ring tasks ([`ring_member`]): every [`RING_PERIOD`], the ring tasks of all clients
//!   take one name each (plain `lock()`) and then, together, the next member's: a ring of
//!   8, 16, [`MAX_WAIT_CHAIN`] or more than [`MAX_WAIT_CHAIN`] members across the clients
//!   (one size per round, in turn). One member of a ring up to the limit must be told
//!   `Deadlock`; a longer ring must not stand (a member refused with `WaitChainTooLong`).
//!
//! Every nested request is logged as a [`Waited`]: what the task held, what it asked for,
//! when the wait began and ended, and how (a grant, `Deadlock` with its cycle,
//! `WaitChainTooLong`, a timeout, a cancellation). The rules are in `check/deadlock.rs`.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use lock_core::{LockError, MAX_WAIT_CHAIN};

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
        let request = ctx.locker.lock(name.clone()).ttl(ctx.ttl()).wait(wait);
        let request: Pin<Box<dyn Future<Output = Result<(), LockError>> + Send + '_>> =
            if rng.bool() {
                Box::pin(request.using(|_| async {
                    end("granted", Vec::new());
                    tokio::time::sleep(pause_inside).await;
                    level(ctx, &mut inner_rng, names, depth + 1).await;
                    Ok::<(), LockError>(())
                }))
            } else {
                // The imperative form: nothing tells the library this lease is held but
                // that this task took it.
                Box::pin(async {
                    let lease = request.auto_renew().await?;
                    end("granted", Vec::new());
                    tokio::time::sleep(pause_inside).await;
                    level(ctx, &mut inner_rng, names, depth + 1).await;
                    lease.release().await.map(drop)
                })
            };
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
            Some(Err(LockError::WaitChainTooLong { .. })) => "chain-too-long",
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

/// How often a ring round starts (on the machine's monotonic clock, which every client
/// reads alike): long enough for a ring that was told to unwind within it.
pub const RING_PERIOD: Duration = Duration::from_secs(6);

/// When in a round the members ask for the next name: by then every member holds its
/// own.
const RING_ASK_AFTER: Duration = Duration::from_millis(500);

/// How long a member waits for the next name: past the detection bound of the rule
/// `deadlock-persists`, and enough for a told ring to unwind member by member.
const RING_WAIT: Duration = Duration::from_millis(4000);

/// Ring tasks per client: enough that the clients' together make a ring longer than
/// [`MAX_WAIT_CHAIN`].
pub fn ring_tasks(clients: u32) -> u32 {
    let clients = clients.max(1);
    u32::try_from(MAX_WAIT_CHAIN + 2)
        .unwrap_or(u32::MAX)
        .div_ceil(clients)
}

/// The ring size of round `round` of a run with `clients` clients: 8, 16,
/// [`MAX_WAIT_CHAIN`], then every ring task (more than [`MAX_WAIT_CHAIN`]), in turn.
pub fn ring_size(round: u64, clients: u32) -> usize {
    let all = ring_tasks(clients) as usize * clients.max(1) as usize;
    [8, 16, MAX_WAIT_CHAIN, all][(round % 4) as usize].min(all)
}

/// Ring member `member` of this client: ring index `member * clients + id`, so that
/// neighbours are other clients' tasks. Each round, if its index is in the ring, it takes
/// `ring:<round>:<index>`, and once all hold theirs, `ring:<round>:<index + 1>` (the last
/// member the first's) inside it.
pub(super) async fn ring_member(ctx: &Ctx, member: u32) {
    let clients = ctx.args.clients.max(1);
    let index = (member * clients + ctx.args.id) as usize;
    let period = crate::clock::nanos(RING_PERIOD);
    while !ctx.stopped() {
        let round = clock::now() / period + 1;
        sleep_until(round * period).await;
        if ctx.stopped() {
            return;
        }
        let size = ring_size(round, clients);
        if index >= size {
            continue;
        }
        let own = format!("ring:{round}:{index}");
        let next = format!("ring:{round}:{}", (index + 1) % size);
        let Ok(lease) = ctx
            .locker
            .lock(own.clone())
            .ttl(ctx.ttl())
            .auto_renew()
            .wait(RING_ASK_AFTER / 2)
            .await
        else {
            continue; // not part of this round's ring: its neighbour waits for nobody
        };
        sleep_until(round * period + crate::clock::nanos(RING_ASK_AFTER)).await;
        let mut waited = Waited {
            client: ctx.args.id,
            holding: vec![own],
            wants: next.clone(),
            t_start: clock::now(),
            t_end: 0,
            outcome: String::new(),
            cycle: Vec::new(),
        };
        let result = ctx
            .locker
            .lock(next)
            .ttl(ctx.ttl())
            .auto_renew()
            .wait(RING_WAIT)
            .await;
        waited.t_end = clock::now();
        waited.outcome = match &result {
            Ok(_) => "granted",
            Err(LockError::Deadlock { cycle, .. }) => {
                waited.cycle = cycle
                    .iter()
                    .map(|link| (link.name().to_owned(), link.holder().map(str::to_owned)))
                    .collect();
                "deadlock"
            }
            Err(LockError::WaitChainTooLong { .. }) => "chain-too-long",
            Err(LockError::Timeout { .. }) => "timeout",
            Err(_) => "error",
        }
        .to_owned();
        ctx.log(&Event::Waited(waited));
        if let Ok(inner) = result {
            let _ = inner.release().await;
        }
        let _ = lease.release().await;
    }
}

/// Sleeps until the monotonic stamp `at`.
async fn sleep_until(at: crate::clock::Nanos) {
    let left = at.saturating_sub(clock::now());
    tokio::time::sleep(Duration::from_nanos(left)).await;
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
