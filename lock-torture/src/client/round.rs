//! The task loop of the plain rounds: take a lock (or a permit, a read-write lock's side, a
//! multi-lock) with a random wait, TTL and renewal, then hold it ([`held`](super::held)) or
//! log the failure ([`failure`](super::failure)). Some rounds go through a
//! `#[redis_locked]` function ([`nested`](super::nested)) or are cancelled
//! ([`cancel`](super::cancel)) instead.

use std::sync::Arc;
use std::time::Duration;

use super::failure::{failed, Request};
use super::guard::Guard;
use super::held::{hold, Held};
use super::{cancel, nested, Ctx, LONG_WAIT_TTLS};
use crate::clock;
use crate::event::HoldKind;
use crate::primitive::{Primitive, LARGE_WEIGHT, WEIGHTED_CAPACITY, WRITER_ODDS};

pub(super) async fn task_loop(ctx: Arc<Ctx>, task: u32) {
    let seed = ctx.args.seed ^ (u64::from(ctx.args.id) << 32) ^ u64::from(task);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut seq = 0u64;
    while !ctx.stopped() {
        let index = rng.u32(0..ctx.args.names.max(1));
        let name = crate::names::name(index, ctx.args.name_kind);
        let profile = ctx.args.profile;
        let primitive = ctx.args.primitive;
        // Annotated functions with `permits` or `mode` do not expose their guard to the
        // body (no `current_lease()`): the other primitives' rounds are all imperative.
        // Hostile names take no annotated rounds: their key template is `torture:{index}`.
        // Neither do queue rounds: their 150 ms wait is no place in line, and their holds
        // run past the TTL.
        if primitive == Primitive::Mutex
            && ctx.args.name_kind == crate::names::NameKind::Plain
            && !ctx.args.queue_rounds
            && !ctx.args.steal_watch
            && profile.annotated_round(&mut rng)
        {
            // One round in five goes through a `#[redis_locked]` function instead.
            nested::round(&ctx, &mut rng, task, &mut seq, index).await;
            continue;
        }
        if primitive == Primitive::Mutex && ctx.args.cancel && rng.u8(0..3) == 0 {
            cancel::round(&ctx, &mut rng, task, &mut seq, name).await;
            continue;
        }
        let ttl = ctx.ttl();
        let wait = match profile.wait_ms(&mut rng, ctx.args.ttl_ms) {
            // Long enough that a fair queue serves every waiter (rule `starvation`).
            waits if waits > 0 && ctx.args.queue_rounds => ctx.ttl() * LONG_WAIT_TTLS,
            waits => Duration::from_millis(waits),
        };
        // A weighted request takes one, two or LARGE_WEIGHT permits at once; the large
        // ones wait long, so that a stream of small ones would starve them if it could.
        let weight = (primitive == Primitive::Weighted).then(|| match rng.u8(0..20) {
            0..=11 => 1,
            12..=15 => 2,
            _ => LARGE_WEIGHT,
        });
        let wait = if weight == Some(LARGE_WEIGHT) {
            ctx.ttl() * LONG_WAIT_TTLS
        } else {
            wait
        };
        // Queue rounds hold briefly and let go: no renewed holds of up to two TTLs. The
        // weighted workload's holds are not renewed either: rule `revoked` judges a
        // holder's validity as it was told at the grant.
        let auto_renew = !ctx.args.queue_rounds
            && primitive != Primitive::Weighted
            && profile.auto_renew(&mut rng);
        // The same settings on each primitive's request type.
        macro_rules! configured {
            ($request:expr) => {{
                let request = $request.ttl(ttl).wait(wait);
                if auto_renew {
                    request.auto_renew().max_hold(ttl * 3)
                } else {
                    request
                }
            }};
        }
        // A multi-lock round takes two or three of the names, in either order (the library
        // sorts them); the other rounds take one of the same names alone.
        let set = (primitive == Primitive::Multi && rng.bool()).then(|| {
            let mut all: Vec<String> = (0..ctx.args.names.max(2))
                .map(|i| format!("torture:{i}"))
                .collect();
            rng.shuffle(&mut all);
            all.truncate(rng.usize(2..=all.len().min(3)));
            all
        });
        let name = set.as_ref().map_or(name, |set| set.join("+"));
        let hold_kind = match primitive {
            Primitive::Semaphore | Primitive::Weighted => HoldKind::Permit,
            Primitive::Rwlock => HoldKind::Read,
            _ => HoldKind::Lock,
        };
        let call_start = clock::now();
        let result = match primitive {
            Primitive::Multi => match &set {
                Some(set) => configured!(ctx.locker.lock_all(set.clone()))
                    .await
                    .map(Guard::Multi),
                None => configured!(ctx.locker.lock(name.clone()).fencing())
                    .await
                    .map(Guard::Lock),
            },
            Primitive::Semaphore => {
                let semaphore = ctx.locker.semaphore(name.clone(), ctx.permits());
                configured!(semaphore.acquire()).await.map(Guard::Permit)
            }
            Primitive::Weighted => {
                let semaphore = ctx.locker.semaphore(name.clone(), WEIGHTED_CAPACITY);
                configured!(semaphore.acquire_many(weight.unwrap_or(1)))
                    .await
                    .map(Guard::Permit)
            }
            Primitive::Rwlock => {
                let lock = ctx.locker.rwlock(name.clone());
                let request = if rng.u8(0..WRITER_ODDS) == 0 {
                    lock.write()
                } else {
                    lock.read()
                };
                configured!(request).await.map(Guard::Rw)
            }
            Primitive::Mutex
            | Primitive::Election
            | Primitive::Schedule
            | Primitive::Deadlock
            | Primitive::Latch
            | Primitive::All => configured!(ctx.locker.lock(name.clone()).fencing())
                .await
                .map(Guard::Lock),
        };
        match result {
            Ok(lease) => {
                seq += 1;
                let id = ctx.acq_id(task, seq);
                let held = Held {
                    id,
                    task,
                    name,
                    call_start,
                    wait,
                    auto_renew,
                    weight,
                };
                hold(&ctx, &mut rng, lease, held).await;
            }
            Err(err) => {
                let request = Request {
                    name,
                    call_start,
                    wait,
                    hold: hold_kind,
                    set,
                    weight,
                };
                failed(&ctx, &mut rng, request, &err).await;
            }
        }
        if primitive == Primitive::Multi {
            // Room between rounds, so that a name is free now and then: a waiter must not
            // sleep through it.
            tokio::time::sleep(Duration::from_millis(rng.u64(0..ctx.args.ttl_ms / 2))).await;
        }
    }
}
