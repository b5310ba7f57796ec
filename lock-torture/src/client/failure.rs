//! A failed acquire: how its error is counted ([`fail_kind`]), and what the client logs and
//! does after it.

use std::time::Duration;

use lock_core::LockError;

use super::{millis, probe, Ctx};
use crate::clock::{self, Nanos};
use crate::event::{Capacity, Event, FailKind, HoldKind};
use crate::primitive::Primitive;

/// A request that failed, for the log.
pub(super) struct Request {
    pub(super) name: String,
    pub(super) call_start: Nanos,
    pub(super) wait: Duration,
    pub(super) hold: HoldKind,
    pub(super) set: Option<Vec<String>>,
    /// A weighted semaphore request: the permits it asked for at once.
    pub(super) weight: Option<u64>,
}

/// Logs a failed acquire, looks for leftovers after a `WrongType`, and backs off after
/// anything but contention.
pub(super) async fn failed(ctx: &Ctx, rng: &mut fastrand::Rng, request: Request, err: &LockError) {
    let Request {
        name,
        call_start,
        wait,
        hold,
        set,
        weight,
    } = request;
    let t_end = clock::now();
    let kind = fail_kind(err);
    ctx.log(&Event::AcquireFailed {
        client: ctx.args.id,
        name: name.clone(),
        t_start: call_start,
        t_end,
        kind,
        message: if kind == FailKind::Contention {
            String::new()
        } else {
            err.to_string()
        },
        wait_ms: Some(millis(wait)),
        hold,
        set,
        capacity: (hold == HoldKind::Permit).then(|| Capacity {
            asked: ctx.permits(),
            stored: match err {
                LockError::CapacityMismatch { stored, .. } => Some(*stored),
                _ => None,
            },
            weight,
        }),
    });
    // The probe reads the lock's key on every node (a Redlock attempt's leftovers); a
    // semaphore or read-write lock runs on one server, in one script per attempt.
    if kind == FailKind::WrongType && ctx.args.primitive == Primitive::Mutex {
        probe::after_wrong_type(ctx, &name, t_end).await;
    }
    if kind != FailKind::Contention {
        // The server is down or unreachable: do not spin on it.
        tokio::time::sleep(Duration::from_millis(rng.u64(10..40))).await;
    }
}

/// How an acquire failure is counted.
pub fn fail_kind(err: &LockError) -> FailKind {
    match err {
        LockError::Busy { .. } | LockError::Timeout { .. } | LockError::LimitReached { .. } => {
            FailKind::Contention
        }
        // A Cluster slot's move that outlasted the request's wait: the library retried
        // through it, as through an unreachable node.
        LockError::Connection { .. } | LockError::SlotMigrating { .. } => FailKind::Connection,
        LockError::NoQuorum { .. } => FailKind::NoQuorum,
        LockError::NotReplicated { .. } => FailKind::NotReplicated,
        LockError::WrongType { .. } => FailKind::WrongType,
        LockError::Redis { .. } => FailKind::Redis,
        LockError::CapacityMismatch { .. } => FailKind::Mismatch,
        _ => FailKind::Other,
    }
}
