//! `LockLayer::permits` and `#[redis_locked(permits = N)]` on a handler: a per-key
//! concurrency limit across replicas (a semaphore per key); requests over the limit are
//! answered 429 with `Retry-After`, or wait their turn.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::post;
use axum::Router;
use hyper::StatusCode;
use lock_core::web::{key, LockLayer};
use lock_core::{redis_locked, LockError, Locker};
use lock_tests::RedisServer;
use web_service::Running;

use super::client::{all_at_once, Http};

#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// `POST /exports/{tenant}`, working for `hold`, under `layer`; counts who is inside.
async fn replica(layer: LockLayer, hold: Duration, inside: Arc<Inside>) -> Running {
    let router = Router::new()
        .route(
            "/exports/{tenant}",
            post(move |Path(tenant): Path<String>| {
                let inside = Arc::clone(&inside);
                async move {
                    let now = inside.now.fetch_add(1, Ordering::SeqCst) + 1;
                    inside.most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(hold).await;
                    inside.now.fetch_sub(1, Ordering::SeqCst);
                    format!("exported {tenant}")
                }
            }),
        )
        .route_layer(layer);
    web_service::spawn(router, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("listen")
}

fn layer(server: &RedisServer) -> LockLayer {
    let locker = Locker::from_url(&server.url()).expect("locker");
    LockLayer::new(locker, key::path("exports:{tenant}"))
        .permits(3)
        .ttl(Duration::from_secs(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_the_limit_across_replicas_is_429_with_retry_after() {
    let server = RedisServer::start();
    let inside = Arc::new(Inside::default());
    let hold = Duration::from_millis(800);
    let replicas = [
        replica(layer(&server), hold, Arc::clone(&inside)).await,
        replica(layer(&server), hold, Arc::clone(&inside)).await,
    ];
    let http = Http::new();
    let urls: Vec<String> = (0..10)
        .map(|i| format!("{}/exports/acme", replicas[i % 2].base_url()))
        .collect();
    let replies = all_at_once(
        urls.into_iter()
            .map(|url| {
                let http = http.clone();
                async move { http.post_json(&url, &[], "{}").await }
            })
            .collect(),
    )
    .await;
    let ok = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .count();
    assert_eq!(ok, 3, "{replies:#?}");
    for reply in replies.iter().filter(|r| r.status != StatusCode::OK) {
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
        let after = reply.retry_after().expect("Retry-After");
        assert!((1..=10).contains(&after), "{reply:?}");
        let problem = reply.json();
        assert_eq!(problem["status"], 429, "{problem}");
        assert_eq!(problem["lock"], "exports:acme", "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains("at most 3"), "{problem}");
        assert!(
            detail.starts_with("all 3 permits of `exports:acme` are taken"),
            "{problem}"
        );
    }
    assert_eq!(inside.most.load(Ordering::SeqCst), 3);
    // Another tenant has permits of its own.
    let other = http
        .post_json(
            &format!("{}/exports/globex", replicas[0].base_url()),
            &[],
            "{}",
        )
        .await;
    assert_eq!(other.status, StatusCode::OK);
    // Every permit was given back before its response went out: no holder in any
    // semaphore (whose key keeps the name's state between uses, expiring by itself).
    for key in ["lock:{exports:acme}:sem", "lock:{exports:globex}:sem"] {
        let live = server.command(&["ZRANGEBYSCORE", key, "(0", "+inf"]);
        assert_eq!(live, "*0\r\n", "{key}");
    }
    let keys = server.command(&["KEYS", "lock:*"]);
    assert!(!keys.contains(":q\r\n"), "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_wait_requests_queue_for_a_permit() {
    let server = RedisServer::start();
    let inside = Arc::new(Inside::default());
    let app = replica(
        layer(&server).wait(Duration::from_secs(20)),
        Duration::from_millis(100),
        Arc::clone(&inside),
    )
    .await;
    let http = Http::new();
    let url = format!("{}/exports/acme", app.base_url());
    let replies = all_at_once(
        (0..9)
            .map(|_| {
                let (http, url) = (http.clone(), url.clone());
                async move { http.post_json(&url, &[], "{}").await }
            })
            .collect(),
    )
    .await;
    assert!(
        replies.iter().all(|r| r.status == StatusCode::OK),
        "{replies:#?}"
    );
    assert_eq!(inside.most.load(Ordering::SeqCst), 3);
}

/// At most two exports per tenant at once, across replicas; a handler, so a request over
/// the limit is answered at once.
#[redis_locked(key = "exports:{tenant}", permits = 2, locker = locker)]
async fn annotated_export(
    State(locker): State<Locker>,
    Path(tenant): Path<String>,
) -> Result<String, LockError> {
    Ok(format!("exported {tenant}"))
}

/// The same with `wait`: a request over the limit waits its turn that long, then is
/// answered.
#[redis_locked(key = "exports:{tenant}", permits = 2, wait = "300ms", locker = locker)]
async fn annotated_export_waiting(
    State(locker): State<Locker>,
    Path(tenant): Path<String>,
) -> Result<String, LockError> {
    Ok(format!("exported {tenant}"))
}

/// The same key as a plain lock: a busy lock stays 409.
#[redis_locked(key = "exports:{tenant}", locker = locker)]
async fn annotated_lock(
    State(locker): State<Locker>,
    Path(tenant): Path<String>,
) -> Result<String, LockError> {
    Ok(format!("locked {tenant}"))
}

/// Asserts a limit answer as `LockLayer::permits` gives it: 429, `Retry-After`, a problem
/// naming the key and the limit.
fn assert_limited(reply: &super::client::Reply, lock: &str, permits: u64) {
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
    let after = reply.retry_after().expect("Retry-After");
    assert!((1..=60).contains(&after), "{reply:?}");
    assert_eq!(
        reply.content_type(),
        "application/problem+json",
        "{reply:?}"
    );
    let problem = reply.json();
    assert_eq!(problem["status"], 429, "{problem}");
    assert_eq!(problem["title"], "Too Many Requests", "{problem}");
    assert_eq!(problem["lock"], lock, "{problem}");
    let detail = problem["detail"].as_str().expect("detail");
    assert!(detail.contains(&format!("at most {permits}")), "{problem}");
    assert!(
        detail.starts_with(&format!("all {permits} permits of `{lock}` are taken")),
        "{problem}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_handler_over_its_permits_is_429_with_retry_after_like_the_layer() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let router = Router::new()
        .route("/annotated/{tenant}", post(annotated_export))
        .route(
            "/annotated-waiting/{tenant}",
            post(annotated_export_waiting),
        )
        .route("/lock/{tenant}", post(annotated_lock))
        .with_state(locker.clone());
    let app = web_service::spawn(router, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("listen");
    let http = Http::new();
    // Another replica holds both permits of acme's exports.
    let other = Locker::from_url(&server.url()).expect("locker");
    let exports = other.semaphore("exports:acme", 2);
    let held = [
        exports
            .try_acquire(Duration::from_secs(30))
            .await
            .expect("first permit"),
        exports
            .try_acquire(Duration::from_secs(30))
            .await
            .expect("second permit"),
    ];

    let started = std::time::Instant::now();
    let reply = http
        .post_json(&format!("{}/annotated/acme", app.base_url()), &[], "{}")
        .await;
    assert_limited(&reply, "exports:acme", 2);
    // Answered at once (a handler does not wait), not after the locker's 10 s.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // With a wait of its own, it is answered the same way when the wait runs out.
    let reply = http
        .post_json(
            &format!("{}/annotated-waiting/acme", app.base_url()),
            &[],
            "{}",
        )
        .await;
    assert_limited(&reply, "exports:acme", 2);
    // The request that waited leaves the line in the background, after its answer: until
    // it has, a permit coming free goes to it (and comes back when it leaves), so the
    // permit released below would not reach the request after it at once.
    crate::queue::until("the request that waited to leave the line", || {
        server.command(&["ZCARD", "lock:{exports:acme}:sem:q"]) == ":0\r\n"
    })
    .await;
    // Another tenant has permits of its own.
    let reply = http
        .post_json(&format!("{}/annotated/globex", app.base_url()), &[], "{}")
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "exported globex");

    // A plain lock of the same name, busy: still 409 (the refusals above do not leak).
    let lease = other
        .try_lock("exports:acme", Duration::from_secs(30))
        .await
        .expect("lock");
    let reply = http
        .post_json(&format!("{}/lock/acme", app.base_url()), &[], "{}")
        .await;
    super::client::assert_busy(&reply, "exports:acme");
    lease.release().await.expect("release");

    // A permit comes free: the next request runs.
    let [first, second] = held;
    first.release().await.expect("release");
    let reply = http
        .post_json(&format!("{}/annotated/acme", app.base_url()), &[], "{}")
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "exported acme");
    second.release().await.expect("release");
}

/// The weights of the permits held on `name` (a semaphore of `permits`), sorted.
async fn weights(locker: &Locker, name: &str, permits: u64) -> Vec<u64> {
    let mut weights: Vec<u64> = locker
        .semaphore(name, permits)
        .holders()
        .await
        .expect("holders")
        .holders
        .iter()
        .map(|holder| holder.weight)
        .collect();
    weights.sort_unstable();
    weights
}

/// `POST /{route}/{tenant}` under `layer`, answering with the weights held on the tenant's
/// key while the handler runs.
async fn weighing_replica(route: &str, layer: LockLayer, locker: Locker) -> Running {
    let router = Router::new()
        .route(
            &format!("/{route}/{{tenant}}"),
            post(move |Path(tenant): Path<String>| {
                let locker = locker.clone();
                async move {
                    format!(
                        "{:?}",
                        weights(&locker, &format!("exports:{tenant}"), 4).await
                    )
                }
            }),
        )
        .route_layer(layer);
    web_service::spawn(router, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("listen")
}

/// `LockLayer::weight`: two routes share one limit of 4 permits per tenant, a full export
/// taking 3 and a preview 1; a request that does not fit is 429 naming its weight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_of_different_weights_share_one_limit() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let layer = |weight: u64| {
        LockLayer::new(locker.clone(), key::path("exports:{tenant}"))
            .permits(4)
            .weight(weight)
            .ttl(Duration::from_secs(10))
    };
    let full = weighing_replica("full", layer(3), locker.clone()).await;
    let preview = weighing_replica("preview", layer(1), locker.clone()).await;
    let http = Http::new();
    let post = |app: &Running, tenant: &str| {
        let url = format!("{}/{tenant}", app.base_url());
        let http = http.clone();
        async move { http.post_json(&url, &[], "{}").await }
    };
    // Alone, a full export holds 3 permits, a preview 1.
    let reply = post(&full, "full/acme").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "[3]");
    let reply = post(&preview, "preview/acme").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "[1]");

    // Another replica holds 2 of acme's 4 permits: a preview still fits, a full export
    // does not, and is told how many it takes.
    let other = Locker::from_url(&server.url()).expect("locker");
    let held = other
        .semaphore("exports:acme", 4)
        .acquire_many(2)
        .ttl(Duration::from_secs(30))
        .await
        .expect("two permits");
    let reply = post(&preview, "preview/acme").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "[1, 2]");
    let reply = post(&full, "full/acme").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
    assert!(reply.retry_after().is_some(), "{reply:?}");
    let problem = reply.json();
    assert_eq!(problem["lock"], "exports:acme", "{problem}");
    assert_eq!(
        problem["detail"],
        "3 of the 4 permits of `exports:acme` are not free: this request takes 3; retry later",
        "{problem}"
    );
    // Another tenant has permits of its own.
    let reply = post(&full, "full/globex").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "[3]");

    // Once they are back, the full export runs.
    held.release().await.expect("release");
    let reply = post(&full, "full/acme").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "[3]");
    assert!(weights(&locker, "exports:acme", 4).await.is_empty());
}

/// A full export takes 3 of a tenant's 4 permits; a handler, so one that does not fit is
/// answered 429 at once.
#[redis_locked(key = "exports:{tenant}", permits = 4, weight = 3, locker = locker)]
async fn annotated_full_export(
    State(locker): State<Locker>,
    Path(tenant): Path<String>,
) -> Result<String, LockError> {
    Ok(format!(
        "{:?}",
        weights(&locker, &format!("exports:{tenant}"), 4).await
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_handler_takes_its_weight_and_is_429_when_it_does_not_fit() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let router = Router::new()
        .route("/full/{tenant}", post(annotated_full_export))
        .with_state(locker.clone());
    let app = web_service::spawn(router, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("listen");
    let http = Http::new();
    let url = format!("{}/full/acme", app.base_url());
    let reply = http.post_json(&url, &[], "{}").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "[3]");

    let held = locker
        .semaphore("exports:acme", 4)
        .acquire_many(2)
        .ttl(Duration::from_secs(30))
        .await
        .expect("two permits");
    let reply = http.post_json(&url, &[], "{}").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
    let problem = reply.json();
    assert_eq!(
        problem["detail"],
        "3 of the 4 permits of `exports:acme` are not free: this request takes 3; retry later",
        "{problem}"
    );
    held.release().await.expect("release");
    let reply = http.post_json(&url, &[], "{}").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "[3]");
}
