//! The checkout API: its state, its error type, its handlers and its router.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lock_core::web::{key, LockLayer, Problem};
use lock_core::{redis_locked, LockError, Locker};
use serde::{Deserialize, Serialize};

use crate::store::{Store, StoreError};

/// What every handler gets: the locker (shared by all requests of this replica), the data
/// store, and how long "talking to the payment provider" takes.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Locks. Each replica has its own `Locker`; they exclude each other through Redis.
    pub locker: Locker,
    /// Orders, payments and webhooks.
    pub store: Store,
    /// How long the guarded work of a payment or a webhook takes (a stand-in for the
    /// payment provider's latency).
    pub work: Duration,
    /// How many payments and webhooks are being worked on right now, and the most at once.
    pub stats: Arc<InFlight>,
}

impl AppState {
    /// A state with `work` as the guarded work's duration.
    pub fn new(locker: Locker, store: Store, work: Duration) -> AppState {
        AppState {
            locker,
            store,
            work,
            stats: Arc::default(),
        }
    }
}

/// A gauge of guarded work in progress.
#[derive(Debug, Default)]
pub struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl InFlight {
    /// Counts one piece of work until the returned guard drops.
    pub fn enter(self: &Arc<Self>) -> InFlightGuard {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        InFlightGuard(Arc::clone(self))
    }

    /// The most pieces of work that ran at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// Returned by [`InFlight::enter`].
#[derive(Debug)]
pub struct InFlightGuard(Arc<InFlight>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Everything a handler can answer besides success. `From<LockError>` is what
/// `#[redis_locked]` needs; `IntoResponse` delegates lock failures to lock-core's own
/// responses (409 + `Retry-After`, 503, ...).
#[derive(Debug)]
pub enum AppError {
    /// The lock could not be had.
    Lock(LockError),
    /// The order was paid by an earlier request.
    AlreadyPaid(u64),
    /// Redis (as the data store) failed.
    Store(StoreError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

impl From<StoreError> for AppError {
    fn from(err: StoreError) -> Self {
        AppError::Store(err)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match self {
            AppError::Lock(err) => err.into_response(),
            AppError::AlreadyPaid(id) => {
                Problem::new(StatusCode::CONFLICT, format!("order {id} is already paid"))
                    .into_response()
            }
            AppError::Store(err) => {
                tracing::error!(error = %err, "answering 503");
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the order store is unavailable; retry later",
                )
                .into_response()
            }
        }
    }
}

/// `POST /orders/{id}/pay` body.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PayRequest {
    /// The amount to charge.
    pub amount_cents: u64,
}

/// `POST /orders/{id}/pay` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Receipt {
    /// The order.
    pub order_id: u64,
    /// What was charged.
    pub amount_cents: u64,
    /// Always `"paid"`.
    pub status: String,
}

/// `GET /orders/{id}` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderStatus {
    /// The order.
    pub order_id: u64,
    /// How many payments it received: 0 or 1, never more.
    pub payments: u64,
}

/// `POST /webhooks/payments` body: an event from the payment provider.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookEvent {
    /// The provider's event type, e.g. `"charge.succeeded"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The order it is about.
    pub order_id: u64,
}

/// `POST /webhooks/payments` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookAck {
    /// `"processed"`, or `"duplicate"` for an idempotency key seen before.
    pub status: String,
}

/// Pays an order, at most once: two requests for the same order never run at once, in
/// this replica or any other (`wait = "0s"`: the second is answered 409 at once, with
/// `Retry-After`). The handler is an ordinary axum handler: extractor patterns name the key's
/// parts and the locker.
#[redis_locked(key = "orders:{order_id}", ttl = "5s", wait = "0s", locker = app.locker)]
pub async fn pay(
    State(app): State<AppState>,
    Path(order_id): Path<u64>,
    Json(payment): Json<PayRequest>,
) -> Result<Json<Receipt>, AppError> {
    charge(&app, order_id, payment.amount_cents).await.map(Json)
}

/// The payment itself: check, call the provider, record. Correct only under the order's lock.
pub async fn charge(app: &AppState, order_id: u64, amount_cents: u64) -> Result<Receipt, AppError> {
    let _working = app.stats.enter();
    if app.store.payments(order_id).await? > 0 {
        return Err(AppError::AlreadyPaid(order_id));
    }
    if !app.work.is_zero() {
        tokio::time::sleep(app.work).await; // the payment provider
    }
    app.store.record_payment(order_id, amount_cents).await?;
    Ok(Receipt {
        order_id,
        amount_cents,
        status: "paid".to_owned(),
    })
}

/// `GET /orders/{id}`: not guarded.
pub async fn order(
    State(app): State<AppState>,
    Path(order_id): Path<u64>,
) -> Result<Json<OrderStatus>, AppError> {
    let payments = app.store.payments(order_id).await?;
    Ok(Json(OrderStatus { order_id, payments }))
}

/// `POST /webhooks/payments`, guarded by the layer in [`router`] on the `Idempotency-Key`
/// header: deliveries of one event never run at once, and a delivery seen before is
/// acknowledged without being processed again.
pub async fn webhook(
    State(app): State<AppState>,
    headers: HeaderMap,
    Json(event): Json<WebhookEvent>,
) -> Result<Json<WebhookAck>, AppError> {
    let _working = app.stats.enter();
    // The layer answered 400 already when the header is missing.
    let key = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .trim();
    if app.store.webhook_seen(key).await? {
        return Ok(Json(WebhookAck {
            status: "duplicate".to_owned(),
        }));
    }
    if !app.work.is_zero() {
        tokio::time::sleep(app.work).await; // fulfil the order
    }
    app.store.record_webhook(key, &event.kind).await?;
    Ok(Json(WebhookAck {
        status: "processed".to_owned(),
    }))
}

/// The API:
///
/// | route | guard |
/// |---|---|
/// | `POST /orders/{order_id}/pay` | `#[redis_locked]`, lock `orders:{order_id}` |
/// | `GET /orders/{order_id}` | none |
/// | `POST /webhooks/payments` | `LockLayer`, lock `webhooks:<Idempotency-Key>` |
pub fn router(state: AppState) -> Router {
    let webhook_guard = LockLayer::new(
        state.locker.clone(),
        key::header("Idempotency-Key").prefix("webhooks:"),
    )
    .ttl(Duration::from_secs(5));
    Router::new()
        .route("/orders/{order_id}/pay", post(pay))
        .route("/orders/{order_id}", get(order))
        .route(
            "/webhooks/payments",
            post(webhook).route_layer(webhook_guard),
        )
        .with_state(state)
}
