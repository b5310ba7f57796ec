//! What a task does with a lease it got: log the grant, hold it (auto-renewed holds in
//! [`holding`](super::holding)), perhaps extend it, write to the fenced store with its
//! fencing token (or do its work), and release it, logging every step.

use std::time::Duration;

use lock_core::LockError;

use super::failure::fail_kind;
use super::guard::Guard;
use super::holding::{self, observe};
use super::{millis, Ctx};
use crate::clock::{self, Nanos};
use crate::event::{Acquired, Downgraded, Event, HoldKind, ReleaseOutcome, WriteOutcome};
use crate::profile::Profile;

/// What a task knows about the lease it just got.
pub(super) struct Held {
    pub(super) id: String,
    pub(super) task: u32,
    pub(super) name: String,
    pub(super) call_start: Nanos,
    pub(super) wait: Duration,
    pub(super) auto_renew: bool,
    /// A weighted semaphore request's permits at once.
    pub(super) weight: Option<u64>,
}

pub(super) async fn hold(ctx: &Ctx, rng: &mut fastrand::Rng, mut lease: Guard, held: Held) {
    let Held {
        id,
        task,
        name,
        call_start,
        wait,
        auto_renew,
        weight,
    } = held;
    let sabotage = clock::nanos(Duration::from_millis(ctx.args.sabotage_ms));
    let valid = lease.valid_until() + sabotage;
    let acquired = clock::now();
    let fence = lease.fencing_token();
    let kind = lease.kind();
    ctx.log(&Event::Acquired(Acquired {
        id: id.clone(),
        client: ctx.args.id,
        task,
        name: name.clone(),
        token: lease.token().to_owned(),
        fence,
        call_start,
        attempt_start: clock::stamp_past(lease.acquired_at()),
        acquired,
        valid_until: valid,
        ttl_ms: ctx.args.ttl_ms,
        auto_renew,
        wait_ms: Some(millis(wait)),
        annotated: false,
        kind,
        permits: (kind == HoldKind::Permit).then_some(ctx.permits()),
        weight,
        set: lease.set(),
    }));
    let _ = ctx.store.progress().await;

    // Most holds end well within the TTL; some overrun it (seed 002's holder that does not
    // know its lock expired), and auto-renewed ones may outlive max_hold.
    let ttl_ms = ctx.args.ttl_ms;
    let holds = if ctx.args.queue_rounds {
        Profile::Throughput
    } else {
        ctx.args.profile
    };
    let hold_ms = holds.hold_ms(rng, ttl_ms, auto_renew);
    // A careful holder stops as soon as the library says the lease is lost; a naive one
    // carries on and writes anyway, and only fencing stands between it and the data.
    let careful = rng.bool();
    let mut lost = false;
    let lost_detected = |how: &str| {
        ctx.log(&Event::LostDetected {
            id: id.clone(),
            t: clock::now(),
            how: how.to_owned(),
        });
    };
    let hold = Duration::from_millis(hold_ms);
    if auto_renew {
        lost = holding::renewed(ctx, &lease, &id, hold, careful, sabotage).await;
    } else if careful || ctx.args.steal_watch {
        // `--mode steal`: a naive holder listens too, and holds on once told.
        let until = tokio::time::Instant::now() + hold;
        tokio::select! {
            () = tokio::time::sleep_until(until) => {}
            () = lease.lost() => {
                lost = true;
                lost_detected("signal");
                if !careful {
                    tokio::time::sleep_until(until).await;
                }
            }
        }
    } else {
        tokio::time::sleep(hold).await;
    }

    if !lost && kind == HoldKind::Write && rng.bool() {
        // Half the writers step down to reader (`RwLease::downgrade`) and hold on as
        // readers for a while: no writer may get in between, readers may join.
        lost = downgrade(ctx, rng, &mut lease, &id).await;
    }

    if !lost && !auto_renew && ctx.args.profile.extend(rng) {
        // A holder that let its lease run out may still try to extend it (the library must
        // refuse): look first, so that a success after a loss shows in the history.
        if lease.is_lost() {
            lost = true;
            lost_detected("is_lost");
        }
        let t_sent = clock::now();
        // The cancellation fault drops one extension in three at a random await: the
        // lease must stay as it was (its validity not moved) and be released as usual.
        if ctx.args.cancel && rng.u8(0..3) == 0 {
            let polls = rng.u32(1..4);
            dropped_after(lease.extend(ctx.ttl()), polls).await;
            ctx.log(&Event::Extended {
                id: id.clone(),
                t_sent,
                t_reply: clock::now(),
                valid_until: None,
                outcome: "dropped".to_owned(),
            });
        } else {
            // Listen for the loss signal while the extension is in flight: a reply that comes
            // after the validity ran out must not revive the lease.
            let extend = lease.extend(ctx.ttl());
            tokio::pin!(extend);
            let result = if lost {
                extend.await
            } else {
                tokio::select! {
                    result = &mut extend => result,
                    () = lease.lost() => {
                        lost = true;
                        lost_detected("signal");
                        extend.await
                    }
                }
            };
            let t_reply = clock::now();
            let (valid_until, outcome) = match &result {
                Ok(()) => (Some(lease.valid_until() + sabotage), "ok".to_owned()),
                Err(LockError::Lost { .. }) => (None, "lost".to_owned()),
                Err(err) => (None, format!("{:?}", fail_kind(err)).to_lowercase()),
            };
            ctx.log(&Event::Extended {
                id: id.clone(),
                t_sent,
                t_reply,
                valid_until,
                outcome,
            });
            if matches!(result, Err(LockError::Lost { .. })) && !lost {
                lost = true;
                lost_detected("extend");
            }
            if result.is_ok() {
                let pause = tokio::time::sleep(Duration::from_millis(rng.u64(0..ttl_ms / 2)));
                if ctx.args.steal_watch && !lost {
                    // `--mode steal`: the holder keeps listening after its extension.
                    tokio::select! {
                        () = pause => {}
                        () = lease.lost() => {
                            lost = true;
                            lost_detected("signal");
                        }
                    }
                } else {
                    pause.await;
                }
            }
        }
    }

    if !(careful && lost) {
        // Stamp first, then ask: if the stamp is past the validity, is_lost() must say so.
        let t_sent = clock::now();
        let lost_reported = lease.is_lost();
        if lost_reported && !lost {
            lost = true;
            lost_detected("is_lost");
        }
        if auto_renew && !lost_reported {
            observe(ctx, &lease, &id, sabotage);
        }
        if kind == HoldKind::Lock && fence.is_some() {
            fenced_write(ctx, &id, &name, fence, t_sent, lost_reported).await;
        } else {
            // No fencing token to write with: the work is the look at `is_lost()`.
            ctx.log(&Event::Work {
                id: id.clone(),
                name: name.clone(),
                t: t_sent,
                lost_reported,
            });
        }
    }

    let t_sent = clock::now();
    let lost_reported = lease.is_lost();
    if lost_reported && !lost {
        lost_detected("is_lost");
    }
    if auto_renew && !lost_reported {
        observe(ctx, &lease, &id, sabotage);
    }
    ctx.log(&Event::Releasing {
        id: id.clone(),
        t: t_sent,
    });
    if ctx.args.cancel && rng.u8(0..3) == 0 {
        // The cancellation fault drops one release in three at a random await (a
        // `select!` that took its other branch as the work ended): after one poll its
        // command may not have gone out yet, after more it is on the wire unanswered.
        dropped_after(lease.release(), rng.u32(1..4)).await;
        ctx.log(&Event::Release {
            id,
            t_sent,
            t_reply: clock::now(),
            outcome: ReleaseOutcome::Dropped,
            lost_reported,
        });
        return;
    }
    log_release(ctx, id, t_sent, lost_reported, lease.release()).await;
}

/// Steps a write lease down to a read lease, logs it, and holds on as a reader for up to a
/// quarter TTL; true if the lease turned out lost.
async fn downgrade(ctx: &Ctx, rng: &mut fastrand::Rng, lease: &mut Guard, id: &str) -> bool {
    let t_sent = clock::now();
    let result = lease.downgrade().await;
    let t_reply = clock::now();
    let outcome = match &result {
        Ok(()) => "ok".to_owned(),
        Err(LockError::Lost { .. }) => "lost".to_owned(),
        Err(err) => format!("{:?}", fail_kind(err)).to_lowercase(),
    };
    ctx.log(&Event::Downgraded(Downgraded {
        id: id.to_owned(),
        t_sent,
        t_reply,
        outcome,
    }));
    if matches!(result, Err(LockError::Lost { .. })) {
        ctx.log(&Event::LostDetected {
            id: id.to_owned(),
            t: clock::now(),
            how: "downgrade".to_owned(),
        });
        return true;
    }
    let pause = tokio::time::sleep(Duration::from_millis(rng.u64(0..=ctx.args.ttl_ms / 4)));
    tokio::select! {
        () = pause => false,
        () = lease.lost() => {
            ctx.log(&Event::LostDetected {
                id: id.to_owned(),
                t: clock::now(),
                how: "signal".to_owned(),
            });
            true
        }
    }
}

/// Polls `work` `polls` times (fewer if it ends first), letting the runtime run between
/// polls so that what it handed a connection goes out, then drops it.
pub(super) async fn dropped_after<F: std::future::Future>(work: F, polls: u32) {
    let mut work = std::pin::pin!(work);
    for _ in 0..polls {
        let ended =
            std::future::poll_fn(|cx| std::task::Poll::Ready(work.as_mut().poll(cx).is_ready()))
                .await;
        if ended {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// Sends a release (or a resignation) and logs what it returned.
pub(super) async fn log_release(
    ctx: &Ctx,
    id: String,
    t_sent: Nanos,
    lost_reported: bool,
    release: impl std::future::Future<Output = Result<bool, LockError>>,
) {
    let outcome = match release.await {
        Ok(true) => ReleaseOutcome::Released,
        Ok(false) => ReleaseOutcome::NotHeld,
        Err(_) => ReleaseOutcome::Error,
    };
    ctx.log(&Event::Release {
        id,
        t_sent,
        t_reply: clock::now(),
        outcome,
        lost_reported,
    });
}

/// A write to the fenced store with the lease's fencing token, logged.
pub(super) async fn fenced_write(
    ctx: &Ctx,
    id: &str,
    name: &str,
    fence: Option<u64>,
    t_sent: Nanos,
    lost_reported: bool,
) {
    let outcome = match fence {
        Some(token) => match ctx.store.write(name, token, id).await {
            Ok(true) => WriteOutcome::Accepted,
            Ok(false) => WriteOutcome::Rejected,
            Err(_) => WriteOutcome::Error,
        },
        None => WriteOutcome::Error,
    };
    ctx.log(&Event::Write {
        id: id.to_owned(),
        name: name.to_owned(),
        fence: fence.unwrap_or(0),
        t_sent,
        t_reply: clock::now(),
        outcome,
        lost_reported,
    });
}
