//! `LockLayer`: a tower layer that runs each request under a lock named after it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower_layer::Layer;
use tower_service::Service;

use super::body::LockBody;
use super::held::{Held, Settings};
use super::hold_times::HoldTimes;
use super::problem::{error_responses, ErrorResponses};
use super::rejection::Rejection;
use super::LockKey;
use crate::current::with_current_lease;
use crate::{LockError, Locker};

/// How long a guarded request keeps its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HoldUntil {
    /// Until the inner service has produced the response (the handler returned). The lock
    /// is released, and the release awaited, before the response goes out, so a client that
    /// got an answer can take the lock again at once. A streaming body is then produced
    /// *outside* the lock. The default, and what `#[redis_locked]` on a handler does.
    #[default]
    Response,
    /// Until the response body has been streamed to the end: use it when the body itself
    /// does the guarded work (a stream that computes as it goes). The release runs before
    /// the last frame is handed to the server, so the client still sees the end only once
    /// the lock is free. A client that disconnects drops the body, which releases the lock in
    /// the background; a slow reader keeps the lock (bound it with
    /// [`LockLayer::max_hold`]).
    BodyEnd,
}

type Responder = dyn Fn(&Rejection) -> Response<Bytes> + Send + Sync;

/// A tower [`Layer`] that runs every request under a lock named after it: requests with the
/// same key never run at once, across every process that shares the Redis; the others are
/// answered at once (or after [`wait`](LockLayer::wait)) with 409 Conflict, a `Retry-After`
/// header and a problem body, without reaching the inner service.
///
/// The key comes from the request head: a closure over [`http::request::Parts`], or a
/// ready-made [`key::header`](super::key::header) / `key::path` (feature `axum`). A request
/// with no key is answered 400 without touching Redis.
///
/// Works on any tower service over `http` requests and responses whose body yields
/// [`Bytes`] (axum routes, tonic services, hyper services): the response body becomes
/// [`LockBody`]. Guarding costs one Redis round trip to acquire and one to release.
///
/// Defaults: the locker's TTL, `wait` zero (a busy lock is answered at once), auto-renewal
/// on (a slow handler keeps its lock; the TTL only bounds how long a crashed process blocks
/// others), the lock held until the response is produced ([`HoldUntil::Response`]), and the
/// process-wide [`ErrorResponses`].
///
/// If the lease turns out to have been lost when it is released (possible only with
/// auto-renewal off or Redis trouble), the response goes out as produced, and a warning is
/// logged: the work has been done, and an error status would invite a retry that repeats it.
///
/// ```
/// use axum::{routing::post, Router};
/// use lock_core::web::{key, LockLayer};
/// use lock_core::Locker;
/// use std::time::Duration;
///
/// let locker = Locker::memory(); // Locker::from_env()? in production
/// let app: Router = Router::new()
///     .route("/webhooks/payments", post(|| async { "processed" }))
///     .route_layer(
///         LockLayer::new(locker, key::header("Idempotency-Key").prefix("webhooks:"))
///             .ttl(Duration::from_secs(5)),
///     );
/// ```
#[derive(Clone)]
#[must_use = "a layer does nothing until it wraps a service (`Router::route_layer`, `ServiceBuilder::layer`)"]
pub struct LockLayer {
    config: Config,
}

#[derive(Clone)]
struct Config {
    locker: Locker,
    key: Arc<dyn LockKey>,
    ttl: Option<Duration>,
    wait: Duration,
    renew: bool,
    max_hold: Option<Duration>,
    /// A per-key semaphore of this many permits instead of a lock.
    permits: Option<u64>,
    /// With `permits`: how many of them each request takes.
    weight: u64,
    hold: HoldUntil,
    responses: Option<ErrorResponses>,
    on_reject: Option<Arc<Responder>>,
    /// Hold times of this layer's requests, for the `Retry-After` hint.
    holds: Arc<HoldTimes>,
}

impl LockLayer {
    /// Guards requests with locks on `locker`, named by `key`.
    pub fn new(locker: Locker, key: impl LockKey) -> LockLayer {
        LockLayer {
            config: Config {
                locker,
                key: Arc::new(key),
                ttl: None,
                wait: crate::defaults::HANDLER_WAIT,
                renew: true,
                max_hold: None,
                permits: None,
                weight: 1,
                hold: HoldUntil::Response,
                responses: None,
                on_reject: None,
                holds: Arc::default(),
            },
        }
    }

    /// How long the lock outlives a process that crashed while holding it (default: the
    /// locker's). With auto-renewal on, a request may run longer than this.
    pub fn ttl(mut self, ttl: Duration) -> LockLayer {
        self.config.ttl = Some(ttl);
        self
    }

    /// How long a request waits for a busy lock before it is answered 409 (default zero:
    /// at once).
    pub fn wait(mut self, wait: Duration) -> LockLayer {
        self.config.wait = wait;
        self
    }

    /// Whether the lease is renewed while the request runs (default true). Without it, a
    /// request that outlives the TTL shares its lock with the next one.
    pub fn auto_renew(mut self, renew: bool) -> LockLayer {
        self.config.renew = renew;
        self
    }

    /// With auto-renewal: stop renewing this long after the lock was taken, so a hung
    /// request (or, with [`HoldUntil::BodyEnd`], a client that reads very slowly) cannot keep
    /// it forever.
    pub fn max_hold(mut self, max_hold: Duration) -> LockLayer {
        self.config.max_hold = Some(max_hold);
        self
    }

    /// Limits concurrency per key instead of excluding: up to `permits` requests with the
    /// same key run at once across every replica (a [`Semaphore`](crate::Semaphore) per
    /// key); one more is answered **429 Too Many Requests** with `Retry-After` (when the
    /// first permit's TTL or this layer's hold times say) and a problem body naming the
    /// key, after waiting up to [`wait`](LockLayer::wait). 429 rather than the busy
    /// status: the key is not locked, it is at its limit, and clients and gateways already
    /// back off on 429. Needs a locker on one Redis, a Cluster or memory. The handler's
    /// `current_lease()` is `None` (a permit is not a lock's lease).
    ///
    /// ```
    /// use lock_core::web::{key, LockLayer};
    /// use lock_core::Locker;
    ///
    /// // At most 3 exports per tenant at once, fleet-wide.
    /// let layer = LockLayer::new(Locker::memory(), key::header("x-tenant").prefix("exports:"))
    ///     .permits(3);
    /// # drop(layer);
    /// ```
    pub fn permits(mut self, permits: u64) -> LockLayer {
        self.config.permits = Some(permits);
        self
    }

    /// With [`permits`](LockLayer::permits): each request takes `weight` permits instead of
    /// one ([`Semaphore::acquire_many`](crate::Semaphore::acquire_many)), so routes of
    /// different cost can share one limit: give their layers the same key and `permits`,
    /// and a heavier `weight` to the costly route. Requests wait in one FIFO line, and a
    /// heavy one is not starved by light ones. A weight above `permits` is refused as
    /// [`LockError::PermitsAboveCapacity`](crate::LockError::PermitsAboveCapacity) (500: a
    /// configuration error); one that does not fit now is answered 429 like a full limit.
    /// Without `permits` it changes nothing.
    ///
    /// ```
    /// use lock_core::web::{key, LockLayer};
    /// use lock_core::Locker;
    ///
    /// let locker = Locker::memory();
    /// // 8 export slots per tenant: a full export takes 4 of them, a preview 1.
    /// let full = LockLayer::new(locker.clone(), key::header("x-tenant").prefix("exports:"))
    ///     .permits(8)
    ///     .weight(4);
    /// let preview = LockLayer::new(locker, key::header("x-tenant").prefix("exports:"))
    ///     .permits(8);
    /// # drop((full, preview));
    /// ```
    pub fn weight(mut self, weight: u64) -> LockLayer {
        self.config.weight = weight;
        self
    }

    /// How long the lock is kept: until the response is produced (default) or until its
    /// body has been streamed.
    pub fn hold_until(mut self, hold: HoldUntil) -> LockLayer {
        self.config.hold = hold;
        self
    }

    /// The statuses used for rejections (default: the process-wide
    /// [`error_responses`](super::error_responses)).
    pub fn responses(mut self, responses: ErrorResponses) -> LockLayer {
        self.config.responses = Some(responses);
        self
    }

    /// Replaces the rejection response entirely: `respond` gets the [`Rejection`] and
    /// returns the response to send (e.g. [`Rejection::grpc_response`] for gRPC). Nothing is
    /// logged for you.
    ///
    /// ```
    /// use lock_core::web::{key, LockLayer, Rejection};
    /// use lock_core::Locker;
    ///
    /// let layer = LockLayer::new(Locker::memory(), key::header("x-job-id"))
    ///     .on_reject(|rejection: &Rejection| rejection.grpc_response());
    /// # drop(layer);
    /// ```
    pub fn on_reject<F, T>(mut self, respond: F) -> LockLayer
    where
        F: Fn(&Rejection) -> Response<T> + Send + Sync + 'static,
        T: Into<Bytes>,
    {
        self.config.on_reject = Some(Arc::new(move |rejection: &Rejection| {
            respond(rejection).map(Into::into)
        }));
        self
    }
}

impl fmt::Debug for LockLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockLayer")
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("renew", &self.renew)
            .field("max_hold", &self.max_hold)
            .field("permits", &self.permits)
            .field("weight", &self.weight)
            .field("hold", &self.hold)
            .field("responses", &self.responses)
            .field("on_reject", &self.on_reject.is_some())
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for LockLayer {
    type Service = LockService<S>;

    fn layer(&self, inner: S) -> LockService<S> {
        LockService {
            inner,
            config: Arc::new(self.config.clone()),
        }
    }
}

/// The service [`LockLayer`] wraps around an inner one.
#[derive(Clone)]
pub struct LockService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S: fmt::Debug> fmt::Debug for LockService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

/// The future of a [`LockService`] call.
pub type LockFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for LockService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<LockBody<ResBody>>;
    type Error = S::Error;
    type Future = LockFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The instance that was polled ready goes into the future; a fresh clone stays.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let name = match config.key.lock_key(&mut parts) {
                Ok(name) => name,
                Err(rejection) => return Ok(config.reject(&Rejection::Key(rejection))),
            };
            let lease = match config.acquire(name).await {
                Ok(lease) => lease,
                Err(mut err) => {
                    config.tighten_retry_after(&mut err);
                    let rejection = match config.permits {
                        Some(permits) => Rejection::Limit { err, permits },
                        None => Rejection::Lock(err),
                    };
                    return Ok(config.reject(&rejection));
                }
            };
            // The handler sees its lease through `lock_core::current_lease()`.
            let call = inner.call(Request::from_parts(parts, body));
            let called = match lease.lease_handle() {
                Some(handle) => with_current_lease(handle, call).await,
                None => call.await,
            };
            let response = match called {
                Ok(response) => response,
                Err(err) => {
                    lease.release().await;
                    return Err(err);
                }
            };
            if config.hold == HoldUntil::BodyEnd && !response.body().is_end_stream() {
                return Ok(response.map(|body| LockBody::holding(body, lease)));
            }
            config.holds.record(lease.acquired_at().elapsed());
            lease.release().await;
            Ok(response.map(LockBody::inner))
        })
    }
}

impl Config {
    async fn acquire(&self, name: String) -> Result<Held, LockError> {
        let settings = Settings {
            ttl: self.ttl,
            wait: self.wait,
            renew: self.renew,
            max_hold: self.max_hold,
        };
        let permits = self.permits.map(|permits| (permits, self.weight));
        Held::acquire(&self.locker, name, permits, settings)
            .await
            // A busy answer's advice (in logs) names this layer's `wait`, not `.wait(..)`.
            .map_err(|err| err.waiting_through(crate::WaitSetting::Layer))
    }

    /// A busy answer's `Retry-After`: from the hold times this layer has seen rather than the
    /// holder's (renewed) TTL, when they say sooner, and only when the holder is this same
    /// service (same application name in its label: a replica, or this process), whose
    /// requests those hold times describe. Any other holder keeps its own TTL as the bound.
    fn tighten_retry_after(&self, err: &mut LockError) {
        if let LockError::Busy {
            retry_after,
            holder,
            ..
        }
        | LockError::Timeout {
            retry_after,
            holder,
            ..
        } = err
            && same_service(holder.as_deref(), self.locker.holder_label())
        {
            *retry_after = self.holds.hint(*retry_after);
        }
    }

    fn reject<B>(&self, rejection: &Rejection) -> Response<LockBody<B>> {
        let response = match &self.on_reject {
            Some(respond) => respond(rejection),
            None => rejection.response(&self.responses.unwrap_or_else(error_responses)),
        };
        response.map(LockBody::full)
    }
}

/// Whether two holder labels name the same service: equal labels, or the same application
/// name (`app@host:pid`).
fn same_service(holder: Option<&str>, ours: Option<&str>) -> bool {
    // Another task of this very Locker holds it (found in the local registry, before Redis
    // was asked): this layer's own requests, whatever the label.
    if holder == Some(crate::engine::THIS_LOCKER) {
        return true;
    }
    let (Some(holder), Some(ours)) = (holder, ours) else {
        return false;
    };
    if holder == ours {
        return true;
    }
    let app = |label: &str| crate::Holder::parse(label).app;
    app(holder).is_some_and(|theirs| app(ours).is_some_and(|mine| theirs == mine))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_service_means_the_same_application_name() {
        assert!(same_service(Some("web@a:1"), Some("web@b:2")));
        assert!(same_service(Some("a:1"), Some("a:1")));
        assert!(!same_service(Some("a:1"), Some("a:2")));
        assert!(!same_service(Some("cron@a:1"), Some("web@a:1")));
        assert!(!same_service(None, Some("web@a:1")));
        let this_locker = Some(crate::engine::THIS_LOCKER);
        assert!(same_service(this_locker, Some("web@a:1")));
        assert!(same_service(this_locker, None));
    }

    #[test]
    fn layer_and_service_are_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<LockLayer>();
        check::<LockService<()>>();
    }
}
