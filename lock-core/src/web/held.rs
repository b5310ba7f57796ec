//! What a guarded request holds: a lock's lease, or one permit of a per-key semaphore
//! ([`LockLayer::permits`](super::LockLayer::permits)).

use std::time::Instant;

use crate::{Lease, LeaseHandle, LockError, Locker, Permit};

pub(crate) enum Held {
    Lease(Lease),
    Permit(Permit),
}

impl Held {
    /// Takes `name` on `locker`: its lock, or `weight` of the `permits` permits of its
    /// semaphore (`permits` is `(permits, weight)`).
    pub async fn acquire(
        locker: &Locker,
        name: String,
        permits: Option<(u64, u64)>,
        settings: Settings,
    ) -> Result<Held, LockError> {
        if let Some((permits, weight)) = permits {
            let mut request = locker
                .semaphore(name, permits)
                .acquire_many(weight)
                .wait(settings.wait);
            if let Some(ttl) = settings.ttl {
                request = request.ttl(ttl);
            }
            if settings.renew {
                request = match settings.max_hold {
                    Some(max_hold) => request.max_hold(max_hold),
                    None => request.auto_renew(),
                };
            }
            return request.await.map(Held::Permit);
        }
        let mut request = locker.lock(name).wait(settings.wait);
        if let Some(ttl) = settings.ttl {
            request = request.ttl(ttl);
        }
        if settings.renew {
            request = request.auto_renew();
            if let Some(max_hold) = settings.max_hold {
                request = request.max_hold(max_hold);
            }
        }
        request.await.map(Held::Lease)
    }

    /// What the handler sees as `current_lease()`: a lock's lease only.
    pub fn lease_handle(&self) -> Option<LeaseHandle> {
        match self {
            Held::Lease(lease) => Some(lease.handle()),
            Held::Permit(_) => None,
        }
    }

    pub fn acquired_at(&self) -> Instant {
        match self {
            Held::Lease(lease) => lease.acquired_at(),
            Held::Permit(permit) => permit.acquired_at(),
        }
    }

    /// Releases it, logging what the client can no longer be told.
    pub async fn release(self) {
        let (name, released) = match self {
            Held::Lease(lease) => (lease.name().to_owned(), lease.release().await),
            Held::Permit(permit) => (permit.name().to_owned(), permit.release().await),
        };
        match released {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                lock = %name,
                "the lease of a guarded request had expired before its release; another request may have run beside it"
            ),
            Err(err) => {
                tracing::warn!(lock = %name, error = %err, "release failed; the TTL will free the lock")
            }
        }
    }
}

/// The layer's acquisition settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub ttl: Option<std::time::Duration>,
    pub wait: std::time::Duration,
    pub renew: bool,
    pub max_hold: Option<std::time::Duration>,
}

/// The problem for a key at its limit: 429 with `Retry-After` for contention, otherwise
/// what `responses` says about the error.
pub(crate) fn limit_problem(
    err: &LockError,
    permits: u64,
    responses: &super::ErrorResponses,
) -> super::Problem {
    if !err.is_contention() {
        return responses.problem(err);
    }
    let name = err.name().unwrap_or_default();
    let asked = match err {
        LockError::LimitReached { asked, .. } => *asked,
        _ => 1,
    };
    let detail = if asked > 1 {
        format!(
            "{asked} of the {permits} permits of `{name}` are not free: this request takes \
             {asked}; retry later"
        )
    } else {
        format!(
            "all {permits} permits of `{name}` are taken: at most {permits} requests for it run \
             at once; retry later"
        )
    };
    let mut problem =
        super::Problem::new(http::StatusCode::TOO_MANY_REQUESTS, detail).with_lock(name);
    if let Some(after) = err.retry_after() {
        problem = problem.with_retry_after(after);
    }
    problem
}
