//! `--primitive latch`: countdown latches, round after round under each name.
//!
//! - Client 0 arms the rounds of every name ([`armer`]), one at a time: a count of one per
//!   client (every client counts each round down once), or one in five a count of one
//!   more, which nobody ever gives (a counting process that died): that round must expire
//!   and its waiters be told. It then waits for the round itself, and re-arms 80 to 150 ms
//!   after it opened or expired.
//! - Every client counts down each round it sees counting, once ([`counter`]).
//! - `--tasks` waiters per client wait on a random name with a random timeout, again and
//!   again ([`waiter`]).
//!
//! Every call is logged with its stamps; the checker (`check/latch.rs`) judges them.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockError;
use tokio::task::JoinSet;

use super::failure::fail_kind;
use super::Ctx;
use crate::clock;
use crate::event::{Event, LatchArm, LatchCount, LatchWait, WaitOutcome};

/// How long a round lives, in TTLs of the run (4 × 200 ms): counting takes a few tens of
/// milliseconds, so only an abandoned round (or one whose counter was killed) expires.
pub const ROUND_TTLS: u32 = 4;

/// One round in this many is abandoned: armed with one count more than anybody gives.
const ABANDONED_ODDS: u8 = 5;

/// Starts the latch tasks of this client.
pub(super) fn spawn(ctx: &Arc<Ctx>, tasks: &mut JoinSet<()>) {
    if ctx.args.id == 0 {
        for index in 0..ctx.args.names.max(1) {
            let ctx = Arc::clone(ctx);
            tasks.spawn(async move { armer(&ctx, index).await });
        }
    }
    let counting = Arc::clone(ctx);
    tasks.spawn(async move { counter(&counting).await });
    for task in 0..ctx.args.tasks {
        let ctx = Arc::clone(ctx);
        tasks.spawn(async move { waiter(&ctx, task).await });
    }
}

fn rng(ctx: &Ctx, salt: u64) -> fastrand::Rng {
    fastrand::Rng::with_seed(ctx.args.seed ^ (u64::from(ctx.args.id) << 32) ^ salt)
}

fn name(ctx: &Ctx, index: u32) -> String {
    crate::names::name(index, ctx.args.name_kind)
}

fn round_ttl(ctx: &Ctx) -> Duration {
    ctx.ttl() * ROUND_TTLS
}

/// Arms the rounds of one name, waits for each, and re-arms.
async fn armer(ctx: &Ctx, index: u32) {
    let mut rng = rng(ctx, 0xa7 + u64::from(index));
    let name = name(ctx, index);
    let latch = ctx.locker.latch(name.clone());
    let ttl = round_ttl(ctx);
    while !ctx.stopped() {
        let abandoned = rng.u8(0..ABANDONED_ODDS) == 0;
        let count = u64::from(ctx.args.clients.max(1)) + u64::from(abandoned);
        let t_sent = clock::now();
        let result = latch.arm(count, ttl).await;
        let t_reply = clock::now();
        let (round, outcome) = match &result {
            Ok(round) => (Some(*round), "armed".to_owned()),
            Err(LockError::LatchStillCounting { .. }) => (None, "counting".to_owned()),
            Err(err) => (None, format!("{:?}", fail_kind(err)).to_lowercase()),
        };
        ctx.log(&Event::LatchArm(LatchArm {
            client: ctx.args.id,
            name: name.clone(),
            t_sent,
            t_reply,
            count,
            ttl_ms: super::millis(ttl),
            round,
            outcome,
        }));
        if round.is_some() {
            // The armer waits for its round like any waiter, past its TTL.
            let timeout = ttl + ctx.ttl() * 2;
            wait_logged(ctx, &latch, &name, timeout).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(80..150))).await;
    }
}

/// Counts down every round it sees counting, once per round, after a short random delay.
async fn counter(ctx: &Ctx) {
    let mut rng = rng(ctx, 0xc0);
    let names: Vec<String> = (0..ctx.args.names.max(1)).map(|i| name(ctx, i)).collect();
    let mut counted: HashSet<(usize, u64)> = HashSet::new();
    while !ctx.stopped() {
        for (i, name) in names.iter().enumerate() {
            let latch = ctx.locker.latch(name.clone());
            let Ok(Some(state)) = latch.state().await else {
                continue;
            };
            if state.remaining == 0 || !counted.insert((i, state.round)) {
                continue;
            }
            let delay = rng.u64(0..=ctx.args.ttl_ms / 4);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let t_sent = clock::now();
            let result = latch.count_down().await;
            let t_reply = clock::now();
            let (left, outcome) = match &result {
                Ok(left) => (Some(*left), "counted".to_owned()),
                Err(LockError::LatchCountBelowZero { .. }) => (None, "below_zero".to_owned()),
                Err(LockError::LatchNotFound { .. }) => (None, "not_found".to_owned()),
                Err(err) => (None, format!("{:?}", fail_kind(err)).to_lowercase()),
            };
            ctx.log(&Event::LatchCount(LatchCount {
                client: ctx.args.id,
                name: name.clone(),
                t_sent,
                t_reply,
                round_seen: Some(state.round),
                left,
                outcome,
            }));
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(2..8))).await;
    }
}

/// Waits on a random name with a random timeout (half a TTL to six TTLs: some end before a
/// round opens or expires, most after), again and again.
async fn waiter(ctx: &Ctx, task: u32) {
    let mut rng = rng(ctx, 0x3a17 + u64::from(task));
    while !ctx.stopped() {
        let name = name(ctx, rng.u32(0..ctx.args.names.max(1)));
        let latch = ctx.locker.latch(name.clone());
        let ttl = ctx.args.ttl_ms;
        let timeout = Duration::from_millis(rng.u64(ttl / 2..=ttl * 6));
        if wait_logged(ctx, &latch, &name, timeout).await == WaitOutcome::NotFound {
            tokio::time::sleep(Duration::from_millis(rng.u64(5..20))).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..30))).await;
    }
}

/// One wait, logged; an opening bumps the run's progress counter.
async fn wait_logged(
    ctx: &Ctx,
    latch: &lock_core::Latch,
    name: &str,
    timeout: Duration,
) -> WaitOutcome {
    let t_start = clock::now();
    let result = latch.wait(timeout).await;
    let t_end = clock::now();
    let outcome = match result {
        Ok(()) => WaitOutcome::Open,
        Err(LockError::LatchExpired { .. }) => WaitOutcome::Expired,
        Err(LockError::LatchTimeout { .. }) => WaitOutcome::Timeout,
        Err(LockError::LatchNotFound { .. }) => WaitOutcome::NotFound,
        Err(_) => WaitOutcome::Error,
    };
    ctx.log(&Event::LatchWait(LatchWait {
        client: ctx.args.id,
        name: name.to_owned(),
        t_start,
        t_end,
        timeout_ms: super::millis(timeout),
        outcome,
    }));
    if outcome == WaitOutcome::Open {
        let _ = ctx.store.progress().await;
    }
    outcome
}
