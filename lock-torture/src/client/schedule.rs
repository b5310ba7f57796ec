//! The scheduled-run workload: the client is one replica of a fleet, with one task per job
//! (a lock name). Each task fires every tick of the shared schedule ([`Cadence`]) a random
//! offset late and calls `run_once` with the schedule's minimum hold; the job logs its
//! start ([`Event::RunStarted`]) and sleeps for up to a quarter of a TTL. Every fire is
//! logged with its outcome ([`Event::TickDone`]).

use std::time::Duration;

use lock_core::{LockError, Tick};

use super::{fail_kind, Ctx};
use crate::cadence::Cadence;
use crate::clock::{self, Nanos};
use crate::event::{Event, RunStarted, TickDone};

/// One job's timer on this replica, until the client stops.
pub(super) async fn replica(ctx: &Ctx, job_index: u32) {
    let seed = ctx.args.seed ^ (u64::from(ctx.args.id) << 32) ^ u64::from(job_index);
    let mut rng = fastrand::Rng::with_seed(seed);
    let cadence = Cadence::for_ttl(ctx.args.ttl_ms);
    let job = crate::names::name(job_index, ctx.args.name_kind);
    let as_ms = |n: Nanos| n / 1_000_000;
    while !ctx.stopped() {
        let tick = cadence.next_tick(clock::now());
        let fire = cadence.start(tick) + rng.u64(0..=cadence.max_offset);
        while !ctx.stopped() && clock::now() < fire {
            let left = fire.saturating_sub(clock::now());
            tokio::time::sleep(Duration::from_nanos(left.min(20_000_000))).await;
        }
        if ctx.stopped() {
            return;
        }
        let t_call = clock::now();
        let outcome = if t_call > cadence.start(tick) + cadence.max_offset + cadence.too_late {
            "late".to_owned()
        } else {
            let work = Duration::from_nanos(rng.u64(0..cadence.job_max));
            let hold = Duration::from_nanos(cadence.hold);
            let job = job.clone();
            let result = ctx
                .locker
                .lock(job.clone())
                .ttl(hold)
                .hold_at_least(hold)
                .run_once(|lease| async move {
                    ctx.log(&Event::RunStarted(RunStarted {
                        client: ctx.args.id,
                        job,
                        tick,
                        attempt_start: clock::stamp_past(lease.acquired_at()),
                        t: clock::now(),
                        token: lease.token().to_owned(),
                    }));
                    let _ = ctx.store.progress().await;
                    tokio::time::sleep(work).await;
                    Ok::<_, LockError>(())
                })
                .await;
            match result {
                Ok(Tick::Ran(())) => "ran".to_owned(),
                Ok(_) => "skipped".to_owned(),
                Err(err) => format!("{:?}", fail_kind(&err)).to_lowercase(),
            }
        };
        ctx.log(&Event::TickDone(TickDone {
            client: ctx.args.id,
            job: job.clone(),
            tick,
            t_call,
            t_return: clock::now(),
            outcome,
            interval_ms: as_ms(cadence.interval),
            max_offset_ms: as_ms(cadence.max_offset),
            hold_ms: as_ms(cadence.hold),
        }));
    }
}
