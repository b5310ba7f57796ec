//! `#[redis_locked]` with `permits = N` (and `weight = W`), `mode = "read"|"write"` or `keys = [..]`: the body
//! runs under a semaphore permit, one side of a read-write lock, or a multi-lock, with the
//! same release and loss policies as under a lock. Unlike a lock, these are not reentrant;
//! inside the body, `current_lease()` is a view of the hold.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt as _;

use crate::current::with_current_lease;
use crate::{GuardHandle, LockError, Locker, MultiLease, Permit, RwLease};

/// What the body runs under, besides a plain lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hold {
    /// `weight` of the `permits` permits of a semaphore on the key.
    Permits { permits: u64, weight: u64 },
    /// The shared side of a read-write lock on the key.
    Read,
    /// The exclusive side of a read-write lock on the key.
    Write,
    /// Every lock of these keys, taken together.
    All(Vec<String>),
}

/// The settings of the annotated function that apply to every kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    pub ttl: Option<Duration>,
    pub wait: Option<Duration>,
    pub renew: bool,
    pub cancel_on_lost: bool,
    pub error_on_lost: bool,
}

enum Held {
    Permit(Permit),
    Rw(RwLease),
    All(MultiLease),
}

impl Held {
    fn handle(&self) -> GuardHandle {
        match self {
            Held::Permit(permit) => permit.handle(),
            Held::Rw(lease) => lease.handle(),
            Held::All(lease) => lease.handle(),
        }
    }

    async fn release(self) -> Result<bool, LockError> {
        match self {
            Held::Permit(permit) => permit.release().await,
            Held::Rw(lease) => lease.release().await,
            Held::All(lease) => lease.release().await,
        }
    }
}

/// Applies the policy's settings to any of the request types.
macro_rules! configured {
    ($request:expr, $policy:expr) => {{
        let mut request = $request;
        if let Some(ttl) = $policy.ttl {
            request = request.ttl(ttl);
        }
        if let Some(wait) = $policy.wait {
            request = request.wait(wait);
        }
        if $policy.renew {
            request = request.auto_renew();
        }
        request
    }};
}

async fn acquire(
    locker: &Locker,
    key: String,
    hold: Hold,
    policy: Policy,
) -> Result<Held, LockError> {
    Ok(match hold {
        Hold::Permits { permits, weight } => Held::Permit(
            configured!(locker.semaphore(key, permits).acquire_many(weight), policy).await?,
        ),
        Hold::Read => Held::Rw(configured!(locker.rwlock(key).read(), policy).await?),
        Hold::Write => Held::Rw(configured!(locker.rwlock(key).write(), policy).await?),
        Hold::All(keys) => Held::All(configured!(locker.lock_all(keys), policy).await?),
    })
}

/// Runs `body` under `hold`; the same contract as `run_locked` otherwise.
pub(crate) async fn run<F, T, E>(
    locker: Locker,
    key: String,
    hold: Hold,
    policy: Policy,
    body: std::pin::Pin<Box<F>>,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let held = acquire(&locker, key, hold, policy).await.map_err(E::from)?;
    let handle = held.handle();
    let name = handle.name().to_owned();
    let current = crate::LeaseHandle::of_hold(std::sync::Arc::new(handle.clone()));
    let guarded = AssertUnwindSafe(with_current_lease(current, body)).catch_unwind();
    let outcome = if policy.cancel_on_lost {
        tokio::select! {
            biased;
            outcome = guarded => Some(outcome),
            () = handle.lost() => None,
        }
    } else {
        Some(guarded.await)
    };
    let Some(outcome) = outcome else {
        let _ = held.release().await;
        tracing::warn!(%name, "lost: the guarded body was cancelled");
        return Err(E::from(LockError::Lost { name }));
    };
    let lost_before = handle.is_lost();
    let released = held.release().await;
    let result = match outcome {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    let lost = lost_before || matches!(released, Ok(false));
    if let Err(err) = &released {
        tracing::warn!(%name, %err, "release failed; the TTL will free it");
    }
    match result {
        Ok(_) if lost && policy.error_on_lost => Err(E::from(LockError::Lost { name })),
        result => {
            if lost {
                tracing::warn!(%name, "lost while the guarded body ran; its result stands");
            }
            result
        }
    }
}
