//! A lock request being configured, and the acquire loop behind its `.await`.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::backend::{Attempt, Backend as _};
use crate::key::{validate_ttl, validate_wait, LockKeys};
use crate::token::{decode_value, encode_value, new_token};
use crate::wait::Backoff;
use crate::{Lease, LockError, Locker};

/// A lock request: set what differs from the locker's defaults, then `.await` it.
///
/// ```
/// # use lock_core::Locker;
/// # use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory();
/// let lease = locker
///     .lock("inventory:sku-19")
///     .ttl(Duration::from_secs(5))       // the lock frees itself after 5 s
///     .wait(Duration::from_millis(500))  // keep trying for up to 0.5 s
///     .fencing()                          // draw a fencing token
///     .await?;
/// assert_eq!(lease.fencing_token(), Some(1));
/// # Ok(())
/// # }
/// ```
#[must_use = "a lock request does nothing until it is awaited"]
#[derive(Debug)]
pub struct LockRequest<'a> {
    locker: &'a Locker,
    name: String,
    ttl: Option<Duration>,
    wait: Option<Duration>,
    fencing: Option<bool>,
}

impl<'a> LockRequest<'a> {
    pub(crate) fn new(locker: &'a Locker, name: String) -> LockRequest<'a> {
        LockRequest {
            locker,
            name,
            ttl: None,
            wait: None,
            fencing: None,
        }
    }

    /// How long the lock lives if it is not released or extended (between
    /// [`MIN_TTL`](crate::MIN_TTL) and [`MAX_TTL`](crate::MAX_TTL)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long to keep trying while someone else holds the lock. Zero tries once and fails
    /// with [`LockError::Busy`]; otherwise the request fails with [`LockError::Timeout`]
    /// when the time is up.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Draw a fencing token: a number that strictly increases with every acquisition of this
    /// name, available as [`LeaseHandle::fencing_token`](crate::LeaseHandle::fencing_token).
    pub fn fencing(mut self) -> Self {
        self.fencing = Some(true);
        self
    }

    async fn acquire(self) -> Result<Lease, LockError> {
        let settings = self.locker.settings();
        let ttl = self.ttl.unwrap_or(settings.default_ttl);
        let wait = self.wait.unwrap_or(settings.default_wait);
        let fencing = self.fencing.unwrap_or(settings.fencing);
        let keys = LockKeys::new(&settings.prefix, &self.name)?;
        validate_ttl(&self.name, ttl)?;
        validate_wait(&self.name, wait)?;
        let token = new_token(&self.name)?;
        let value = encode_value(&token, settings.label.as_deref());

        let span = tracing::debug_span!(
            "lock.acquire",
            name = %self.name,
            ttl_ms = ttl.as_millis() as u64,
            wait_ms = wait.as_millis() as u64,
            attempts = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let locker = self.locker;
        async move {
            let begun = Instant::now();
            let deadline = begun + wait;
            let mut backoff = Backoff::new();
            let mut attempts: u32 = 0;
            loop {
                attempts += 1;
                let started = Instant::now();
                let attempt = locker
                    .run(
                        &keys.name,
                        locker.backend().acquire(&keys, &value, ttl, fencing),
                    )
                    .await;
                let (remaining, holder_value) = match attempt {
                    Ok(Attempt::Acquired { fencing_token }) => {
                        record(attempts, "acquired");
                        return Ok(Lease::new(
                            locker.clone(),
                            keys,
                            value,
                            fencing_token,
                            started,
                            ttl,
                        ));
                    }
                    Ok(Attempt::Busy {
                        remaining,
                        holder_value,
                    }) => (remaining, holder_value),
                    Err(err) => {
                        record(attempts, "error");
                        return Err(err);
                    }
                };
                let holder = holder_value
                    .as_deref()
                    .and_then(|v| decode_value(v).1)
                    .map(str::to_owned);
                let now = Instant::now();
                if wait.is_zero() {
                    record(attempts, "busy");
                    return Err(LockError::Busy {
                        name: keys.name,
                        holder,
                        retry_after: remaining,
                    });
                }
                if now >= deadline {
                    record(attempts, "timeout");
                    return Err(LockError::Timeout {
                        name: keys.name,
                        waited: now - begun,
                        holder,
                        retry_after: remaining,
                    });
                }
                let pause = backoff.next(remaining).min(deadline - now);
                tokio::time::sleep(pause).await;
            }
        }
        .instrument(span)
        .await
    }
}

fn record(attempts: u32, outcome: &'static str) {
    let span = tracing::Span::current();
    span.record("attempts", attempts);
    span.record("outcome", outcome);
}

impl<'a> IntoFuture for LockRequest<'a> {
    type Output = Result<Lease, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.acquire())
    }
}
