//! Guards for HTTP handlers: "two requests for the same order never run at once, across all
//! replicas". Feature `tower` (the layer and problem responses, for any tower service) or
//! `axum` (which adds `LockError: IntoResponse` and path-parameter keys).
//!
//! Two ways to guard a handler:
//!
//! - **`#[redis_locked]` on the handler** (feature `axum`). Extractor patterns are usable in
//!   the key, `locker = app.locker` finds the locker in the state, and the function stays an
//!   axum handler. It must return a `Result` (the macro cannot see through
//!   `-> impl IntoResponse`): `Result<Json<T>, LockError>` works as is, because `LockError`
//!   implements `IntoResponse`; `Result<impl IntoResponse, LockError>` works too; with your
//!   own error type, give it `From<LockError>` and build its response with
//!   [`ErrorResponses::response`] or `LockError::into_response`.
//!
//!   ```
//!   # #[cfg(feature = "axum")] mod example {
//!   use axum::{extract::{Path, State}, routing::post, Json, Router};
//!   use lock_core::{redis_locked, LockError, Locker};
//!
//!   #[derive(Clone)]
//!   struct App {
//!       locker: Locker,
//!   }
//!
//!   // A handler (it takes extractors): a busy lock is answered 409 at once, as by LockLayer.
//!   #[redis_locked(key = "orders:{order_id}", ttl = "10s", locker = app.locker)]
//!   async fn pay(
//!       State(app): State<App>,
//!       Path(order_id): Path<u64>,
//!   ) -> Result<Json<&'static str>, LockError> {
//!       Ok(Json("paid"))
//!   }
//!
//!   fn app() -> Router {
//!       Router::new()
//!           .route("/orders/{order_id}/pay", post(pay))
//!           .with_state(App { locker: Locker::memory() })
//!   }
//!   # }
//!   ```
//!
//! - **[`LockLayer`] on a route**, without touching the handler: the key comes from the
//!   request head ([`key::header`], `key::path`, or any closure over
//!   [`http::request::Parts`]). It works on any tower service, tonic's included.
//!
//!   ```
//!   use axum::{routing::post, Router};
//!   use lock_core::web::{key, LockLayer};
//!   use lock_core::Locker;
//!
//!   let app: Router = Router::new()
//!       .route("/webhooks/payments", post(|| async { "ok" }))
//!       .route_layer(LockLayer::new(
//!           Locker::memory(),
//!           key::header("Idempotency-Key").prefix("webhooks:"),
//!       ));
//!   ```
//!
//! # What the client sees
//!
//! A busy lock answers **409 Conflict** (configurable: [`ErrorResponses::busy_status`],
//! e.g. 423 Locked) with `Retry-After` (the holder's remaining TTL, rounded up to seconds)
//! and an RFC 9457 body:
//!
//! ```text
//! HTTP/1.1 409 Conflict
//! content-type: application/problem+json
//! retry-after: 10
//!
//! {"type":"about:blank","title":"Conflict","status":409,"detail":"lock `orders:7` is busy: another request holds it; retry later","lock":"orders:7"}
//! ```
//!
//! A concurrency limit that is full (all N permits of the key's semaphore are taken, with
//! [`LockLayer::permits`] or `#[redis_locked(permits = N)]` on a handler) answers **429 Too
//! Many Requests** with `Retry-After` (when the first permit ends) and a body saying "all
//! N permits of `key` are taken: at most N requests for it run at once" (for a request that
//! takes several, [`LockLayer::weight`] or `weight = W`: "W of the N permits of `key` are
//! not free").
//!
//! When Redis cannot be reached: **503** with a generic detail (no URL, host or Redis error
//! text; those go to the `tracing` log). A request without a key: **400**. See
//! [`ErrorResponses`] for the full table.
//!
//! # How long the lock is held
//!
//! Both ways hold the lock until the handler has returned its response, and release it
//! (awaiting the release) before the response is sent. The body of a *streaming* response
//! is then produced outside the lock; with the layer, [`HoldUntil::BodyEnd`] keeps the lock
//! until the body has been streamed to its end.
//!
//! `Retry-After` is a hint, in whole seconds. From `LockLayer`, when the holder is the same
//! service (its label has the same application name: a replica, or this process), it is
//! twice the typical time the layer's requests have held the lock in this process (at least
//! 1 s), capped by when the holder's lease would expire: with auto-renewal on, that expiry is renewed all along and
//! would tell a client to wait a full TTL for a request that takes 200 ms. Before the layer
//! has seen a request finish, for any other holder, and from `#[redis_locked]` handlers, it
//! is the holder's remaining TTL: an upper bound while the holder does not renew.

mod body;
mod held;
mod hold_times;
pub mod key;
mod layer;
mod problem;
mod rejection;

#[cfg(feature = "axum")]
mod axum;

pub use body::LockBody;
pub use key::{IntoLockKey, KeyRejection, LockKey};
pub use layer::{HoldUntil, LockFuture, LockLayer, LockService};
pub use problem::{error_responses, set_error_responses, ErrorResponses, Problem, PROBLEM_JSON};
pub use rejection::Rejection;
