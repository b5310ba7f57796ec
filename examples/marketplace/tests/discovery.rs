//! Discovery's last resort: a private redis-server from PATH, stopped when dropped.

use marketplace::discovery::{discover_with, probe, Source};

#[tokio::test]
async fn starts_and_stops_a_private_server_when_nothing_answers() {
    // A free port: nothing answers there, so discovery must start its own server.
    let port = lock_tests::free_port();
    let nothing = format!("redis://127.0.0.1:{port}/");
    let mut target = discover_with(None, &nothing, "redis-server")
        .await
        .expect("discover");
    assert_eq!(target.source(), Source::Private);
    assert!(
        target.describe().contains("private"),
        "{}",
        target.describe()
    );
    let url = target.url().to_owned();
    probe(&url).await.expect("the private server answers");
    target.stop();
    assert!(probe(&url).await.is_err(), "the private server is gone");
}

#[tokio::test]
async fn prefers_redis_url_then_the_local_port() {
    let server = lock_tests::RedisServer::start();
    let target = discover_with(Some(server.url()), "redis://127.0.0.1:1/", "redis-server")
        .await
        .expect("REDIS_URL answers");
    assert_eq!(target.source(), Source::Env);
    assert_eq!(target.url(), server.url());

    let target = discover_with(None, &server.url(), "/nonexistent/redis-server")
        .await
        .expect("the local port answers");
    assert_eq!(target.source(), Source::Local);
}
