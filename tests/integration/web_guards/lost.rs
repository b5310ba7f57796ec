//! A lease lost while a guarded handler ran: one rule for `#[redis_locked]` handlers and
//! `LockLayer`. By default the handler's response stands (the work is done; an error would
//! invite a retry that repeats it) and the loss is logged; `on_lost = "error"` answers with
//! the loss instead; `on_lost = "cancel"` stops the handler at the loss.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::post;
use axum::Router;
use hyper::StatusCode;
use lock_core::web::{key, LockLayer};
use lock_core::{current_lease, redis_locked, LockError, Locker};
use lock_tests::RedisServer;
use web_service::Running;

use super::client::Http;

/// Longer than the 200 ms TTLs below: without renewal, every lease is lost mid-handler.
const OVERRUN: Duration = Duration::from_millis(450);

static REPORTED_DONE: AtomicUsize = AtomicUsize::new(0);
static ERROR_DONE: AtomicUsize = AtomicUsize::new(0);
static CANCEL_DONE: AtomicUsize = AtomicUsize::new(0);

#[redis_locked(key = "lost:report:{id}", ttl = "200ms", renew = false, wait = "0s", locker = locker)]
async fn reported(State(locker): State<Locker>, Path(id): Path<u32>) -> Result<String, LockError> {
    tokio::time::sleep(OVERRUN).await;
    let lost = current_lease().expect("a lease inside the body").is_lost();
    REPORTED_DONE.fetch_add(1, Ordering::SeqCst);
    Ok(format!("charged {id}, lease lost: {lost}"))
}

#[redis_locked(key = "lost:error:{id}", ttl = "200ms", renew = false, wait = "0s", on_lost = "error", locker = locker)]
async fn strict(State(locker): State<Locker>, Path(id): Path<u32>) -> Result<String, LockError> {
    tokio::time::sleep(OVERRUN).await;
    ERROR_DONE.fetch_add(1, Ordering::SeqCst);
    Ok(format!("charged {id}"))
}

#[redis_locked(key = "lost:cancel:{id}", ttl = "200ms", renew = false, wait = "0s", on_lost = "cancel", locker = locker)]
async fn cancelled(State(locker): State<Locker>, Path(id): Path<u32>) -> Result<String, LockError> {
    tokio::time::sleep(OVERRUN).await;
    CANCEL_DONE.fetch_add(1, Ordering::SeqCst);
    Ok(format!("charged {id}"))
}

async fn serve(router: Router) -> Running {
    web_service::spawn(router, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("listen")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_loss_policy_on_an_annotated_handler() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let router = Router::new()
        .route("/report/{id}", post(reported))
        .route("/error/{id}", post(strict))
        .route("/cancel/{id}", post(cancelled))
        .with_state(locker);
    let app = serve(router).await;
    let http = Http::new();

    let reply = http
        .post_json(&format!("{}/report/1", app.base_url()), &[], "{}")
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "charged 1, lease lost: true");
    assert_eq!(REPORTED_DONE.load(Ordering::SeqCst), 1);

    let reply = http
        .post_json(&format!("{}/error/2", app.base_url()), &[], "{}")
        .await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{reply:?}");
    assert_eq!(ERROR_DONE.load(Ordering::SeqCst), 1, "the body finished");

    let reply = http
        .post_json(&format!("{}/cancel/3", app.base_url()), &[], "{}")
        .await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{reply:?}");
    assert_eq!(
        CANCEL_DONE.load(Ordering::SeqCst),
        0,
        "the body was stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_keeps_a_finished_handlers_response_when_the_lease_was_lost() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let router = Router::new()
        .route(
            "/jobs/{id}",
            post(|Path(id): Path<u32>| async move {
                tokio::time::sleep(OVERRUN).await;
                format!("ran {id}")
            }),
        )
        .route_layer(
            LockLayer::new(locker, key::path("jobs:{id}"))
                .ttl(Duration::from_millis(200))
                .auto_renew(false),
        );
    let app = serve(router).await;
    let reply = Http::new()
        .post_json(&format!("{}/jobs/7", app.base_url()), &[], "{}")
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "ran 7");
}
