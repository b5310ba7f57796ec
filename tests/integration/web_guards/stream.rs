//! Streaming bodies through `LockLayer`: by default the lock ends when the handler returns
//! its response; with `HoldUntil::BodyEnd` it lasts until the body's last frame, is released
//! before the client sees the end, and is released when the client goes away mid-stream.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lock_core::web::{key, HoldUntil, LockLayer};
use lock_core::Locker;
use lock_tests::RedisServer;
use web_service::Running;

use super::client::{assert_busy, Http};

/// `POST /export/{id}`: returns at once with a body of three chunks, 300 ms apart.
async fn exporting(server: &RedisServer, hold: HoldUntil) -> (Locker, Running) {
    let locker = Locker::builder().url(server.url()).build().expect("locker");
    let layer = LockLayer::new(locker.clone(), key::path("export:{id}")).hold_until(hold);
    let router = Router::new()
        .route(
            "/export/{id}",
            post(|| async {
                let chunks = futures_util::stream::unfold(0u8, |n| async move {
                    if n == 3 {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Some((
                        Ok::<_, std::io::Error>(Bytes::from(format!("chunk {n}\n"))),
                        n + 1,
                    ))
                });
                Body::from_stream(chunks)
            }),
        )
        .route_layer(layer);
    let running = web_service::spawn(router, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("listen");
    (locker, running)
}

/// Starts a request and returns once the headers are in, leaving the body unread.
async fn start(url: &str) -> Response<Incoming> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = Request::post(url).body(Full::new(Bytes::new())).unwrap();
    client.request(request).await.expect("response head")
}

async fn next_chunk(response: &mut Response<Incoming>) -> Option<Bytes> {
    loop {
        let frame = response.body_mut().frame().await?.expect("frame");
        if let Ok(data) = frame.into_data() {
            return Some(data);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn by_default_the_lock_ends_when_the_handler_returns() {
    let server = RedisServer::start();
    let (locker, app) = exporting(&server, HoldUntil::Response).await;
    let url = format!("{}/export/1", app.base_url());

    let mut first = start(&url).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(next_chunk(&mut first).await.unwrap(), "chunk 0\n");
    // Still streaming, but the lock was released when the handler returned.
    assert!(locker.inspect("export:1").await.unwrap().is_none());
    let second = Http::new().post_json(&url, &[], "").await;
    assert_eq!(second.status, StatusCode::OK, "{second:?}");
    assert_eq!(second.body, "chunk 0\nchunk 1\nchunk 2\n");
    while next_chunk(&mut first).await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn body_end_holds_the_lock_until_the_last_frame() {
    let server = RedisServer::start();
    let (locker, app) = exporting(&server, HoldUntil::BodyEnd).await;
    let url = format!("{}/export/1", app.base_url());
    let http = Http::new();

    let mut first = start(&url).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(next_chunk(&mut first).await.unwrap(), "chunk 0\n");
    assert!(locker.inspect("export:1").await.unwrap().is_some());
    let during = http.post_json(&url, &[], "").await;
    assert_busy(&during, "export:1");

    let mut rest = Vec::new();
    while let Some(chunk) = next_chunk(&mut first).await {
        rest.push(chunk);
    }
    assert_eq!(rest, ["chunk 1\n", "chunk 2\n"]);
    // The release ran before the end of the body reached us: the lock is free right away.
    assert!(locker.inspect("export:1").await.unwrap().is_none());
    let after = http.post_json(&url, &[], "").await;
    assert_eq!(after.status, StatusCode::OK, "{after:?}");
    assert_eq!(after.body, "chunk 0\nchunk 1\nchunk 2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn body_end_releases_when_the_client_goes_away() {
    let server = RedisServer::start();
    let (locker, app) = exporting(&server, HoldUntil::BodyEnd).await;
    let url = format!("{}/export/2", app.base_url());

    let mut first = start(&url).await;
    assert_eq!(next_chunk(&mut first).await.unwrap(), "chunk 0\n");
    assert!(locker.inspect("export:2").await.unwrap().is_some());
    drop(first); // the client disconnects mid-stream

    // The server notices at its next write (within one chunk interval) and drops the body,
    // which releases the lease in the background: well before the 30 s TTL.
    let deadline = Instant::now() + Duration::from_secs(10);
    while locker.inspect("export:2").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the lock outlived its client");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
