//! One set of defaults: an annotated axum handler without `wait` answers a busy lock at once,
//! as `LockLayer` does, while an annotated business function without `wait` waits (the
//! locker's default), and either one waits when it says so.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::post;
use axum::Router;
use hyper::StatusCode;
use lock_core::web::{key, LockLayer};
use lock_core::{redis_locked, LockError, Locker};
use lock_tests::RedisServer;
use web_service::Running;

use super::client::{assert_busy, Http};

/// How long after a request starts the test's own holder releases the lock. A request
/// that waits gets the lock then; one that does not has answered already.
const RELEASE_AFTER: Duration = Duration::from_millis(400);

#[redis_locked(key = "orders:{id}", locker = locker)]
async fn annotated(State(locker): State<Locker>, Path(id): Path<u64>) -> Result<String, LockError> {
    Ok(format!("paid {id}"))
}

#[redis_locked(key = "orders:{id}", wait = "5s", locker = locker)]
async fn annotated_waiting(
    State(locker): State<Locker>,
    Path(id): Path<u64>,
) -> Result<String, LockError> {
    Ok(format!("paid {id}"))
}

/// A business function: no extractor among its parameters.
#[redis_locked(key = "orders:{id}", locker = locker)]
async fn settle(locker: &Locker, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

async fn serve(locker: Locker) -> Running {
    let router = Router::new()
        .route("/annotated/{id}", post(annotated))
        .route("/annotated-waiting/{id}", post(annotated_waiting))
        .route(
            "/layered/{id}",
            post(|Path(id): Path<u64>| async move { format!("paid {id}") })
                .route_layer(LockLayer::new(locker.clone(), key::path("orders:{id}"))),
        )
        .with_state(locker);
    web_service::spawn(router, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("listen")
}

/// Holds `orders:{id}` from another locker (another process), releasing it
/// [`RELEASE_AFTER`] from now.
async fn held_briefly(server: &RedisServer, id: u64) -> tokio::task::JoinHandle<()> {
    let other = Locker::from_url(&server.url()).expect("locker");
    let lease = other
        .try_lock(format!("orders:{id}"), Duration::from_secs(60))
        .await
        .expect("hold");
    tokio::spawn(async move {
        tokio::time::sleep(RELEASE_AFTER).await;
        assert!(lease.release().await.expect("release"));
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_handler_and_the_layer_answer_a_busy_lock_alike() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let app = serve(locker.clone()).await;
    let http = Http::new();

    for (route, id) in [("annotated", 1), ("layered", 2)] {
        let releaser = held_briefly(&server, id).await;
        let reply = http
            .post_json(&format!("{}/{route}/{id}", app.base_url()), &[], "{}")
            .await;
        assert_eq!(reply.status, StatusCode::CONFLICT, "{route}: {reply:?}");
        assert_busy(&reply, &format!("orders:{id}"));
        releaser.await.expect("join");
    }

    // `wait` on the handler: it queues behind the holder and gets the lock.
    let releaser = held_briefly(&server, 3).await;
    let reply = http
        .post_json(
            &format!("{}/annotated-waiting/3", app.base_url()),
            &[],
            "{}",
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "paid 3");
    releaser.await.expect("join");

    // A business function waits (the locker's 10 s) and gets the lock once it is free.
    let releaser = held_briefly(&server, 4).await;
    assert_eq!(settle(&locker, 4).await.expect("waited for the lock"), 4);
    releaser.await.expect("join");
}
