//! The election workload: each task campaigns for one of the names, acts as leader while
//! the library says it leads, and steps down; one more task per client observes an
//! election.
//!
//! A leader's action is a write to the fenced store with its term (as the token
//! `term * ACTIONS + n` for its `n`-th action, so that one leader's actions follow each
//! other and every later term's follow them all), logged with what
//! [`Leadership::is_leader`] said just before it (rule `leader-late-action`: no action by
//! a leader whose lease had ended while it still said true). Half the leaders are naive:
//! told they lost, they write once more anyway, and the store must refuse the stale term.
//! A leadership ends by resigning (three in four) or by being dropped.

use std::time::Duration;

use lock_core::{LeaderChange, Leadership};

use super::held::{fenced_write, log_release};
use super::{fail_kind, Ctx};
use crate::clock::{self, Nanos};
use crate::event::{Acquired, Event, FailKind, HoldKind};

/// Actions per leadership the fenced store's tokens leave room for (a leadership lasts a
/// few TTLs, with an action every third of a TTL at most). A power of two small enough
/// that `term * ACTIONS` fits in a u64 for terms drawn from the server's clock in
/// microseconds (about 2^51 today, 2^52 in 2112).
const ACTIONS: u64 = 1 << 12;

/// Completes once the client is told to stop (campaigns and observers wait indefinitely).
async fn stopped(ctx: &Ctx) {
    while !ctx.stopped() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One candidate: campaigns, leads, steps down, again until the client stops.
pub(super) async fn candidate(ctx: &Ctx, task: u32) {
    let seed = ctx.args.seed ^ (u64::from(ctx.args.id) << 32) ^ u64::from(task);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut seq = 0u64;
    while !ctx.stopped() {
        let index = rng.u32(0..ctx.args.names.max(1));
        let name = crate::names::name(index, ctx.args.name_kind);
        let election = ctx.locker.election(name.clone()).lease(ctx.ttl());
        let call_start = clock::now();
        let result = tokio::select! {
            result = election.campaign() => result,
            () = stopped(ctx) => return,
        };
        match result {
            Ok(leadership) => {
                seq += 1;
                let id = ctx.acq_id(task, seq);
                lead(ctx, &mut rng, leadership, id, task, name, call_start).await;
            }
            Err(err) => {
                let kind = fail_kind(&err);
                ctx.log(&Event::AcquireFailed {
                    client: ctx.args.id,
                    name,
                    t_start: call_start,
                    t_end: clock::now(),
                    kind,
                    message: if kind == FailKind::Contention {
                        String::new()
                    } else {
                        err.to_string()
                    },
                    // A campaign waits as long as it takes: no deadline to judge.
                    wait_ms: None,
                    hold: HoldKind::Leader,
                    set: None,
                    capacity: None,
                });
                tokio::time::sleep(Duration::from_millis(rng.u64(10..40))).await;
            }
        }
    }
}

/// The validity the leadership reports now, as a stamp (with the checker self-test's
/// sabotage).
fn valid_until(ctx: &Ctx, leadership: &Leadership) -> Nanos {
    let handle = leadership.handle();
    clock::stamp_ahead(|| handle.expires_in())
        + clock::nanos(Duration::from_millis(ctx.args.sabotage_ms))
}

/// Acts as leader until the hold is over, the client stops, or leadership is lost.
async fn lead(
    ctx: &Ctx,
    rng: &mut fastrand::Rng,
    leadership: Leadership,
    id: String,
    task: u32,
    name: String,
    call_start: Nanos,
) {
    let term = leadership.term();
    let handle = leadership.handle();
    // The validity first, then the stamp of the hand-over: a leadership that comes with
    // none left (its campaign was paused past the lease) is then logged as invalid when
    // handed over, not as trusted for the microseconds between the two stamps.
    let valid = valid_until(ctx, &leadership);
    let acquired = clock::now();
    ctx.log(&Event::Acquired(Acquired {
        id: id.clone(),
        client: ctx.args.id,
        task,
        name: name.clone(),
        token: handle.token().to_owned(),
        fence: Some(term),
        call_start,
        attempt_start: clock::stamp_past(handle.acquired_at()),
        acquired,
        valid_until: valid,
        ttl_ms: ctx.args.ttl_ms,
        auto_renew: true,
        wait_ms: None,
        annotated: false,
        kind: HoldKind::Leader,
        permits: None,
        weight: None,
        set: None,
    }));
    let _ = ctx.store.progress().await;
    let lost_detected = |how: &str| {
        ctx.log(&Event::LostDetected {
            id: id.clone(),
            t: clock::now(),
            how: how.to_owned(),
        });
    };
    let hold_ms = ctx.args.profile.hold_ms(rng, ctx.args.ttl_ms, true);
    let until = clock::now() + clock::nanos(Duration::from_millis(hold_ms));
    let careful = rng.bool();
    let mut action = 0u64;
    loop {
        // Stamp first, then ask: if the stamp is past the validity, is_leader() must say
        // false.
        let t = clock::now();
        let leader = leadership.is_leader();
        // The validity it reports now (none left: the claim is not renewed, whatever
        // is_leader() said).
        if leader && !handle.expires_in().is_zero() {
            ctx.log(&Event::Observed {
                id: id.clone(),
                t,
                valid_until: valid_until(ctx, &leadership),
            });
        }
        if !leader {
            lost_detected("is_leader");
            if careful {
                break;
            }
        }
        action += 1;
        let token = term
            .saturating_mul(ACTIONS)
            .saturating_add(action.min(ACTIONS - 1));
        fenced_write(ctx, &id, &name, Some(token), t, !leader).await;
        if !leader || clock::now() >= until || ctx.stopped() {
            break;
        }
        let pause = Duration::from_millis(rng.u64(0..ctx.args.ttl_ms / 3));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = leadership.lost() => lost_detected("signal"),
        }
    }
    let t_sent = clock::now();
    let lost_reported = !leadership.is_leader();
    ctx.log(&Event::Releasing {
        id: id.clone(),
        t: t_sent,
    });
    if rng.u8(0..4) == 0 {
        // Dropped: the lock is given up in the background, without an announcement.
        drop(leadership);
        return;
    }
    log_release(ctx, id, t_sent, lost_reported, leadership.resign()).await;
}

/// Observes election `client % names`, logging each change; a new observer after an error.
pub(super) async fn observer(ctx: &Ctx) {
    let index = ctx.args.id % ctx.args.names.max(1);
    let name = crate::names::name(index, ctx.args.name_kind);
    observe(ctx, name).await;
}

/// (term, elected, expired) of a change, `None` for one this harness does not know;
/// `Err` for an error (a new observer follows).
#[allow(clippy::result_unit_err)]
fn seen(
    change: Result<LeaderChange, lock_core::LockError>,
) -> Result<Option<(u64, bool, bool)>, ()> {
    match change {
        Ok(LeaderChange::Elected(leader)) => Ok(Some((leader.term, true, false))),
        Ok(LeaderChange::Resigned { term, .. }) => Ok(Some((term, false, false))),
        Ok(LeaderChange::Expired { term, .. }) => Ok(Some((term, false, true))),
        Ok(_) => Ok(None),
        Err(_) => Err(()),
    }
}

/// The one candidate of this client's own election: leads it, renewed, until the client
/// stops; campaigns again if it lost it (a pause past the lease). Nobody else campaigns
/// for it, so a lapse of its lease is a vacancy the observers of the partner client
/// (`id ^ 1`) must see (rule `vacancy-unseen`).
pub(super) async fn lonely(ctx: &Ctx) {
    let election = ctx
        .locker
        .election(crate::names::lonely_election(ctx.args.id))
        .lease(ctx.ttl());
    while !ctx.stopped() {
        let leadership = tokio::select! {
            result = election.campaign() => result,
            () = stopped(ctx) => return,
        };
        match leadership {
            Ok(leadership) => {
                tokio::select! {
                    () = leadership.lost() => {}
                    () = stopped(ctx) => {
                        let _ = leadership.resign().await;
                        return;
                    }
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Observes the partner client's own election (`lonely-{id ^ 1}`).
pub(super) async fn lonely_observer(ctx: &Ctx) {
    observe(ctx, crate::names::lonely_election(ctx.args.id ^ 1)).await;
}

/// Observes election `name`, logging each change; a new observer after an error.
async fn observe(ctx: &Ctx, name: String) {
    let election = ctx.locker.election(name.clone()).lease(ctx.ttl());
    let mut number = 0u32;
    while !ctx.stopped() {
        let mut observer = tokio::select! {
            observer = election.observe() => match observer {
                Ok(observer) => observer,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = stopped(ctx) => return,
        };
        number += 1;
        loop {
            let change = tokio::select! {
                change = observer.next() => change,
                () = stopped(ctx) => return,
            };
            let (term, elected, expired) = match seen(change) {
                Ok(Some(seen)) => seen,
                Ok(None) => continue,
                Err(()) => break,
            };
            ctx.log(&Event::LeaderSeen {
                client: ctx.args.id,
                observer: number,
                name: name.clone(),
                t: clock::now(),
                term,
                elected,
                expired,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
