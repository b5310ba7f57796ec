//! Fencing tokens in use: a store that remembers the highest token it has seen rejects the
//! write of a holder that paused past its TTL while someone else took over (seed 002's
//! failure mode, the "GC pause" scenario).

use std::time::Duration;

use lock_core::LockError;

use crate::harness::Harness;

/// A resource guarded by fencing: writes carrying a token lower than the highest seen are
/// refused. Implemented in Redis so the check and the write are one atomic step.
const FENCED_WRITE: &str = r"
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1";

async fn fenced_write(
    conn: &mut redis::aio::MultiplexedConnection,
    token: u64,
    value: &str,
) -> bool {
    let accepted: i64 = redis::Script::new(FENCED_WRITE)
        .key("resource")
        .arg(token)
        .arg(value)
        .invoke_async(conn)
        .await
        .expect("fenced write");
    accepted == 1
}

async fn a_paused_holder_is_fenced_off(h: Harness) {
    // The guarded resource lives in its own store, apart from the locks.
    let store = lock_tests::RedisServer::start();
    let client = redis::Client::open(store.url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");

    let paused = h
        .locker
        .lock("res")
        .ttl(Duration::from_millis(200))
        .fencing()
        .await
        .expect("acquire");
    let stale_token = paused.fencing_token().expect("fencing token");

    // The holder stalls past its TTL; another process takes over and writes.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let other = h.second_locker();
    let current = other
        .lock("res")
        .ttl(Duration::from_secs(10))
        .fencing()
        .await
        .expect("acquire");
    let fresh_token = current.fencing_token().expect("fencing token");
    assert!(fresh_token > stale_token);
    assert!(fenced_write(&mut conn, fresh_token, "from the new holder").await);

    // The stalled holder wakes up: it can tell it lost the lease, and its write is refused.
    assert!(paused.is_lost());
    assert!(
        !fenced_write(&mut conn, stale_token, "stale").await,
        "stale write rejected"
    );
    let value: String = redis::cmd("HGET")
        .arg("resource")
        .arg("value")
        .query_async(&mut conn)
        .await
        .expect("hget");
    assert_eq!(value, "from the new holder");
    assert!(matches!(
        paused.extend(Duration::from_secs(1)).await,
        Err(LockError::Lost { .. })
    ));
    assert!(
        !paused.release().await.expect("release"),
        "nothing of the new holder is deleted"
    );
    assert!(current.is_held().await.expect("is_held"));
    current.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_fenced_off_scripts() {
    a_paused_holder_is_fenced_off(Harness::scripts()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_fenced_off_transactions() {
    a_paused_holder_is_fenced_off(Harness::transactions()).await;
}
