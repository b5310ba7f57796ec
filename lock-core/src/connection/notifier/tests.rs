//! The notifier's subscriptions against a real Redis.

use super::*;
use std::time::Duration;

fn numsub(server: &lock_tests::RedisServer, channel: &str) -> String {
    server.command(&["PUBSUB", "NUMSUB", channel])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_counted_per_channel_and_dropped_with_the_last_waiter() {
    let server = lock_tests::RedisServer::start();
    let notifier = Notifier::new(
        redis::Client::open(server.url()).unwrap(),
        "lock:waiters:test".into(),
    );
    let signal = Arc::new(Wake::default());
    let first = notifier
        .subscribe("lock:{a}:released", &signal)
        .await
        .unwrap();
    let second = notifier
        .subscribe("lock:{a}:released", &signal)
        .await
        .unwrap();
    assert_eq!(
        notifier.wanted().get("lock:{a}:released").map(|e| e.0),
        Some(2)
    );
    assert!(
        numsub(&server, "lock:{a}:released").contains(":1\r\n"),
        "one connection, one subscription"
    );

    // A publish reaches the waiter's signal.
    let woken = signal.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    server.command(&["PUBLISH", "lock:{a}:released", "released"]);
    tokio::time::timeout(Duration::from_secs(5), woken)
        .await
        .unwrap();

    drop(first);
    assert_eq!(
        notifier.wanted().get("lock:{a}:released").map(|e| e.0),
        Some(1)
    );
    drop(second);
    assert!(notifier.wanted().is_empty());
    let started = std::time::Instant::now();
    while !numsub(&server, "lock:{a}:released").contains(":0\r\n") {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "UNSUBSCRIBE was sent"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_wakes_waiters_and_resubscribes() {
    let mut server = lock_tests::RedisServer::start();
    let notifier = Notifier::new(
        redis::Client::open(server.url()).unwrap(),
        "lock:waiters:test".into(),
    );
    let signal = Arc::new(Wake::default());
    let _sub = notifier
        .subscribe("lock:{b}:released", &signal)
        .await
        .unwrap();
    let woken = signal.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    server.restart();
    tokio::time::timeout(Duration::from_secs(5), woken)
        .await
        .expect("waiters are told that notifications may have been missed");
    let started = std::time::Instant::now();
    while !numsub(&server, "lock:{b}:released").contains(":1\r\n") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "re-subscribed by itself"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
