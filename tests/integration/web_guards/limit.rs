//! `LockLayer::permits`: a per-key concurrency limit across replicas (a semaphore per key);
//! requests over the limit are answered 429 with `Retry-After`, or wait their turn.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::routing::post;
use axum::Router;
use hyper::StatusCode;
use lock_core::web::{key, LockLayer};
use lock_core::Locker;
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
        assert!(problem["detail"].as_str().unwrap().contains("at most 3"));
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
    // Every permit was given back before its response went out.
    assert_eq!(server.command(&["KEYS", "lock:*"]), "*0\r\n");
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
