//! `--primitive weighted`: client 0's task that changes each name's capacity while the
//! semaphore is in use (`Semaphore::set_capacity`), up and down, logging every call with
//! its stamps (rules `weight` and `revoked`).

use std::time::Duration;

use lock_core::LockError;

use super::failure::fail_kind;
use super::Ctx;
use crate::clock;
use crate::event::{CapacitySet, Event};
use crate::primitive::{LARGE_WEIGHT, WEIGHTED_CAPACITY};

/// Every 50 to 250 ms, one name's capacity set to a number between [`LARGE_WEIGHT`] (so
/// that no request is above it) and [`WEIGHTED_CAPACITY`].
pub(super) async fn change_capacity(ctx: &Ctx) {
    let mut rng = fastrand::Rng::with_seed(ctx.args.seed ^ 0xca9a_c17e);
    while !ctx.stopped() {
        tokio::time::sleep(Duration::from_millis(rng.u64(50..250))).await;
        let name = crate::names::name(rng.u32(0..ctx.args.names.max(1)), ctx.args.name_kind);
        let permits = rng.u64(LARGE_WEIGHT..=WEIGHTED_CAPACITY);
        let semaphore = ctx.locker.semaphore(name.clone(), WEIGHTED_CAPACITY);
        let t_sent = clock::now();
        let result = semaphore.set_capacity(permits).await;
        let t_reply = clock::now();
        let (before, outcome) = match result {
            Ok(before) => (before, "ok".to_owned()),
            Err(LockError::Config(_)) => (None, "refused".to_owned()),
            Err(err) => (None, format!("{:?}", fail_kind(&err)).to_lowercase()),
        };
        ctx.log(&Event::CapacitySet(CapacitySet {
            client: ctx.args.id,
            name,
            t_sent,
            t_reply,
            permits,
            before,
            outcome,
        }));
    }
}
