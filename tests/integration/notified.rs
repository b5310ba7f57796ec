//! The check that a waiter is woken by a notification, not by a timer: shared by the tests
//! of every way a locker can be built (URL, pool with a client, Sentinel, TLS, Cluster).

use std::time::Duration;

use lock_core::Locker;
use lock_tests::RedisServer;

const SECOND: Duration = Duration::from_secs(1);

/// The length of `name`'s Redis-side waiter queue on `server` (default `lock:` prefix).
pub fn queued(server: &RedisServer, name: &str) -> usize {
    let reply = server.command(&["ZCARD", &format!("lock:{{{name}}}:q")]);
    reply.trim().trim_start_matches(':').parse().unwrap_or(0)
}

/// True when a client connected to `server` on `port` holds a subscription.
pub fn subscribed_on(server: &RedisServer, port: u16) -> bool {
    server
        .command(&["CLIENT", "LIST"])
        .lines()
        .any(|line| line.contains(&format!("laddr=127.0.0.1:{port} ")) && line.contains(" sub=1 "))
}

/// True when a client connected to `server` on `port` holds a sharded subscription
/// (SSUBSCRIBE: a Cluster locker waiting in a lock's shard). Used by the TLS Cluster test.
#[cfg(feature = "tls")]
pub fn shard_subscribed_on(server: &RedisServer, port: u16) -> bool {
    server.command(&["CLIENT", "LIST"]).lines().any(|line| {
        line.contains(&format!("laddr=127.0.0.1:{port} "))
            && line
                .split(' ')
                .find_map(|field| field.strip_prefix("ssub="))
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| n > 0)
    })
}

pub async fn until(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// `holder` takes `name` for a minute; `waiter` (another locker, as another process would
/// have) waits for it for 30 s. Once the waiter stands in the Redis-side queue (`queued`)
/// and its locker's subscription is seen (`subscribed`), the holder releases. The head of a
/// queue sleeps until the holder's TTL runs out (a minute, past its wait) unless told its
/// turn, so getting the lock proves the notification arrived; a locker that polls never
/// stands in the queue.
pub async fn waiter_is_woken_by_notification(
    holder: &Locker,
    waiter: &Locker,
    name: &str,
    queued: impl Fn() -> usize,
    subscribed: impl Fn() -> bool,
) {
    let lease = holder.lock(name).ttl(60 * SECOND).await.expect("holder");
    let waiting = {
        let waiter = waiter.clone();
        let name = name.to_owned();
        tokio::spawn(async move { waiter.lock(name).ttl(10 * SECOND).wait(30 * SECOND).await })
    };
    until("the waiter to queue in Redis", || queued() == 1).await;
    assert!(subscribed(), "the waiter's locker is subscribed");
    assert!(lease.release().await.expect("release"));
    let next = waiting
        .await
        .expect("join")
        .expect("woken by its turn's notification, long before the holder's TTL");
    assert_eq!(queued(), 0);
    assert!(next.release().await.expect("release"));
}
