//! Issue 40: guarded writes to Redis (`lock_core::fenced::RedisStore`). A write applies
//! only if its lease's fencing token is at least the highest its resource has accepted,
//! and records it, in one script: on the lock's own Redis, on another Redis, through a
//! pool and on a Cluster. A holder paused past its TTL is refused with the tokens named.

use std::time::{Duration, Instant};

use lock_core::fenced::{Fence, FenceError, FencedScript, RedisStore};
use lock_core::{Lease, Locker};
use lock_tests::{RedisCluster, RedisServer};

use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

async fn fenced(locker: &Locker, name: &str, ttl: Duration) -> Lease {
    locker
        .lock(name)
        .ttl(ttl)
        .wait(10 * SECOND)
        .fencing()
        .await
        .expect("acquire")
}

async fn get(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}

async fn connection(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// The pause: a holder's lease runs out while it is stopped, another holder takes the lock
/// and writes, the first wakes and writes. Every kind of write is refused, naming both
/// tokens, and the data and the guard are the newer holder's.
async fn a_paused_holder_is_refused(
    locker: &Locker,
    other: &Locker,
    store: &RedisStore,
    data: &RedisServer,
) {
    let mut conn = connection(data).await;
    let paused = fenced(locker, "item:17", Duration::from_millis(200)).await;
    store
        .set(&paused, "stock:{item:17}", "10")
        .await
        .expect("the holder writes");
    // The same lease writes again (an equal token): accepted.
    store
        .set(&paused, "stock:{item:17}", "9")
        .await
        .expect("the same lease writes again");
    let stale = paused.fencing_token().expect("token");

    tokio::time::sleep(Duration::from_millis(400)).await; // past the TTL
    let newer = fenced(other, "item:17", 10 * SECOND).await;
    let fresh = newer.fencing_token().expect("token");
    assert!(fresh > stale);
    store
        .set(&newer, "stock:{item:17}", "7")
        .await
        .expect("the newer holder writes");

    // The paused holder wakes: each of its writes is refused, and says why.
    assert!(paused.is_lost());
    let refusals = [
        store
            .set(&paused, "stock:{item:17}", "8")
            .await
            .expect_err("set refused"),
        store
            .hset(&paused, "stock:{item:17}", &[("by", "paused")])
            .await
            .expect_err("hset refused"),
    ];
    for refusal in refusals {
        match refusal {
            FenceError::Stale {
                lock,
                resource,
                token,
                seen,
            } => {
                assert_eq!(
                    (lock.as_str(), resource.as_str()),
                    ("item:17", "stock:{item:17}")
                );
                assert_eq!((token, seen), (stale, fresh));
            }
            other => panic!("a stale write was not refused as stale: {other:?}"),
        }
    }
    let script =
        FencedScript::new("redis.call('SET', KEYS[1], ARGV[1]) return 'done'").expect("script");
    let err = store
        .eval::<String, _>(&paused, &script, &["stock:{item:17}"], &["6"])
        .await
        .expect_err("eval refused");
    assert!(err.is_stale(), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&stale.to_string()) && message.contains(&fresh.to_string()),
        "{message}"
    );
    assert_eq!(
        get(&mut conn, "stock:{item:17}").await.as_deref(),
        Some("7")
    );
    assert_eq!(
        store.guard("stock:{item:17}").await.expect("guard"),
        Some(Fence::new("item:17", fresh))
    );

    // The newer holder's script runs, with its own KEYS and ARGV, and its reply comes back.
    let done: String = store
        .eval(&newer, &script, &["stock:{item:17}"], &["5"])
        .await
        .expect("eval");
    assert_eq!(done, "done");
    assert_eq!(
        get(&mut conn, "stock:{item:17}").await.as_deref(),
        Some("5")
    );
    assert!(newer.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_refused_on_the_locks_redis() {
    let h = Harness::scripts();
    let store = RedisStore::of(&h.locker).expect("the locker's Redis");
    let server = h.server.as_ref().expect("server");
    a_paused_holder_is_refused(&h.locker, &h.second_locker(), &store, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_refused_on_another_redis() {
    let h = Harness::scripts();
    let data = RedisServer::start();
    let store = RedisStore::connect(&data.url()).await.expect("connect");
    a_paused_holder_is_refused(&h.locker, &h.second_locker(), &store, &data).await;
    // Through a pool, and for a Redlock's leases: the same.
    let h = Harness::redlock();
    let data = RedisServer::start();
    let pool = lock_core::deadpool_redis::Config::from_url(data.url())
        .create_pool(Some(lock_core::deadpool_redis::Runtime::Tokio1))
        .expect("pool");
    let store = RedisStore::from_pool(pool);
    a_paused_holder_is_refused(&h.locker, &h.second_locker(), &store, &data).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_fields_and_scripts_are_written_whole() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("server");
    let store = RedisStore::of(&h.locker).expect("store");
    let lease = fenced(&h.locker, "catalog", 10 * SECOND).await;
    // More fields than one HSET of the script takes at once.
    let fields: Vec<(String, String)> = (0..250)
        .map(|i| (format!("f{i}"), format!("v{i}")))
        .collect();
    store
        .hset(&lease, "catalog:{1}", &fields)
        .await
        .expect("hset");
    let mut conn = connection(server).await;
    let all: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("catalog:{1}")
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    assert_eq!(all.len(), 250);
    assert_eq!(all["f249"], "v249");

    // A script's error is the store's answer, and the guard records nothing for it.
    let failing = FencedScript::new("return redis.call('INCR', KEYS[1])").expect("script");
    let err = store
        .eval::<i64, u8>(&lease, &failing, &["catalog:{2}:h"], &[])
        .await;
    assert!(err.is_ok(), "INCR of a missing key: {err:?}");
    redis::cmd("HSET")
        .arg("catalog:{3}")
        .arg("f")
        .arg("v")
        .query_async::<()>(&mut conn)
        .await
        .expect("HSET");
    let err = store
        .eval::<i64, u8>(&lease, &failing, &["catalog:{3}"], &[])
        .await
        .expect_err("INCR of a hash");
    assert!(matches!(err, FenceError::Store { .. }), "{err:?}");
    assert_eq!(store.guard("catalog:{3}").await.expect("guard"), None);
    // Nil and tables come back as the script returned them.
    let nothing = FencedScript::new("return nil").expect("script");
    let reply: Option<String> = store
        .eval(&lease, &nothing, &["catalog:{4}"], &[0])
        .await
        .expect("nil");
    assert_eq!(reply, None);
    let table = FencedScript::new("return {KEYS[1], KEYS[2], ARGV[1], #ARGV}").expect("script");
    let reply: (String, String, String, i64) = store
        .eval(
            &lease,
            &table,
            &["catalog:{5}", "catalog:{5}:b"],
            &["x", "y"],
        )
        .await
        .expect("table");
    assert_eq!(
        reply,
        ("catalog:{5}".into(), "catalog:{5}:b".into(), "x".into(), 2)
    );
    // A script cannot choose flags under the guard; a script needs its resource key.
    assert!(matches!(
        FencedScript::new("#!lua flags=no-writes\nreturn 1"),
        Err(FenceError::Script { .. })
    ));
    assert!(matches!(
        store.eval::<i64, u8>(&lease, &table, &[], &[]).await,
        Err(FenceError::Script { .. })
    ));
}

/// A lease without a token, and a token of another lock: refused, the first before
/// anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfenced_lease_and_another_locks_token_are_refused() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("server");
    let store = RedisStore::of(&h.locker).expect("store");
    let plain = h.locker.lock("a").ttl(10 * SECOND).await.expect("acquire");
    // Warm the connection, then count what is sent.
    assert_eq!(store.guard("k").await.expect("guard"), None);
    server.command(&["CONFIG", "RESETSTAT"]);
    let err = store.set(&plain, "k", "v").await.expect_err("no token");
    assert!(
        matches!(&err, FenceError::NotFenced { lock } if lock == "a"),
        "{err:?}"
    );
    assert!(err.to_string().contains(".fencing()"), "{err}");
    let stats = server.command(&["INFO", "commandstats"]);
    assert!(!stats.contains("cmdstat_evalsha"), "sent: {stats}");
    assert!(!stats.contains("cmdstat_eval:"), "sent: {stats}");
    drop(plain);

    let a = fenced(&h.locker, "a", 10 * SECOND).await;
    store.set(&a, "k", "from a").await.expect("set");
    let b = fenced(&h.locker, "b", 10 * SECOND).await;
    let err = store
        .set(&b, "k", "from b")
        .await
        .expect_err("another lock");
    match &err {
        FenceError::OtherLock {
            lock,
            resource,
            guarded_by,
        } => assert_eq!(
            (lock.as_str(), resource.as_str(), guarded_by.as_str()),
            ("b", "k", "a")
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.command(&["GET", "k"]), "$6\r\nfrom a\r\n");

    // A memory locker has no Redis to write through.
    assert!(matches!(
        RedisStore::of(&Locker::memory()),
        Err(FenceError::Unsupported { .. })
    ));
}

/// On a Cluster: a key and its guard in one slot, always for a key with a hash tag or
/// without braces; keys of a script in other slots are refused before anything is sent,
/// naming the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_keys_share_the_guards_slot() {
    let cluster = RedisCluster::start(3, 0);
    let locker = Locker::builder()
        .cluster(cluster.urls())
        .build()
        .expect("cluster locker");
    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
    let conn = client
        .get_async_connection()
        .await
        .expect("cluster connection");
    for store in [
        RedisStore::of(&locker).expect("the locker's cluster"),
        RedisStore::from_cluster(conn),
    ] {
        let lease = fenced(&locker, "item:9", 10 * SECOND).await;
        store
            .set(&lease, "stock:{item:9}", "3")
            .await
            .expect("hash tag");
        store.set(&lease, "stock:9", "3").await.expect("no braces");
        store
            .hset(&lease, "item:{item:9}", &[("stock", "3")])
            .await
            .expect("hset");
        let two =
            FencedScript::new("redis.call('SET', KEYS[2], ARGV[1]) return 1").expect("script");
        let one: i64 = store
            .eval(&lease, &two, &["stock:{item:9}", "log:{item:9}"], &["x"])
            .await
            .expect("one slot");
        assert_eq!(one, 1);
        let err = store
            .eval::<i64, _>(&lease, &two, &["stock:{item:9}", "log:{elsewhere}"], &["x"])
            .await
            .expect_err("another slot");
        match &err {
            FenceError::CrossSlot { key, .. } => assert_eq!(key, "log:{elsewhere}"),
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("hash tag"), "{err}");
        let err = store
            .set(&lease, "a}b", "x")
            .await
            .expect_err("no slot for its guard");
        assert!(matches!(err, FenceError::CrossSlot { .. }), "{err:?}");
        assert!(lease.release().await.expect("release"));
    }
    let master = cluster.master_of("log:{elsewhere}");
    assert_eq!(
        cluster.nodes[master].command(&["EXISTS", "log:{elsewhere}"]),
        ":0\r\n",
        "nothing sent"
    );
}

/// Redis down: the write fails within the store's timeout, with the error saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_is_down_fails_fast() {
    let h = Harness::scripts();
    let mut data = RedisServer::start();
    let store = RedisStore::connect(&data.url()).await.expect("connect");
    let lease = fenced(&h.locker, "d", 30 * SECOND).await;
    store.set(&lease, "d", "1").await.expect("set");
    data.kill();
    let started = Instant::now();
    let err = store.set(&lease, "d", "2").await.expect_err("down");
    assert!(matches!(err, FenceError::Unavailable { .. }), "{err:?}");
    assert!(started.elapsed() < 5 * SECOND, "{:?}", started.elapsed());
    assert!(RedisStore::connect(&data.url()).await.is_err());

    // The lock's own Redis down: the same, through the locker's connection.
    let mut h = h;
    let store = RedisStore::of(&h.locker).expect("store");
    h.server.as_mut().expect("server").kill();
    let started = Instant::now();
    let err = store.set(&lease, "d", "3").await.expect_err("down");
    assert!(matches!(err, FenceError::Unavailable { .. }), "{err:?}");
    assert!(started.elapsed() < 5 * SECOND, "{:?}", started.elapsed());
}

/// Writes cut at random moments (a timeout, a dropped task): each leaves the value and the
/// guard both old or both new, never one without the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_write_leaves_the_old_or_the_new_never_half() {
    let data = RedisServer::start();
    let store = RedisStore::connect(&data.url()).await.expect("connect");
    let mut conn = connection(&data).await;
    let base = 1_000_000u64;
    let (mut landed, mut cut) = (0, 0);
    for i in 1..=300u64 {
        let token = base + i;
        let fence = Fence::new("cancel", token);
        let fields = [("token", token.to_string()), ("pad", "x".repeat(64 << 10))];
        // Cut after 1 to 3 polls (the runtime runs between them, so the script is sent or
        // in flight): not a timer, whose millisecond granularity outlasts a write on an
        // idle machine.
        let mut write = Box::pin(store.hset(fence, "c", &fields));
        let mut done = None;
        for _ in 0..fastrand::u32(1..4) {
            let polled = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(write.as_mut(), cx))
            })
            .await;
            if let std::task::Poll::Ready(result) = polled {
                done = Some(result);
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(write);
        match done {
            Some(result) => {
                result.expect("write");
                landed += 1;
            }
            None => cut += 1,
        }
        let (written, guard): (Option<u64>, Option<u64>) = redis::pipe()
            .cmd("HGET")
            .arg("c")
            .arg("token")
            .cmd("HGET")
            .arg(RedisStore::guard_key("c"))
            .arg("token")
            .query_async(&mut conn)
            .await
            .expect("read");
        assert_eq!(
            written, guard,
            "the data and its guard disagree after write {i}"
        );
    }
    assert!(cut > 0, "no write was cut ({landed} landed)");
}

/// A leadership's term is its fence: a deposed leader is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaderships_term_fences_its_writes() {
    let h = Harness::scripts();
    let store = RedisStore::of(&h.locker).expect("store");
    let first = h.locker.election("e").campaign().await.expect("leads");
    store
        .set(&first, "e:{config}", "1")
        .await
        .expect("leader writes");
    let term = first.term();
    assert!(first.resign().await.expect("resign"));
    let next = h
        .second_locker()
        .election("e")
        .campaign()
        .await
        .expect("leads");
    store
        .set(&next, "e:{config}", "2")
        .await
        .expect("next leader writes");
    let err = store
        .set(Fence::new("e", term), "e:{config}", "3")
        .await
        .expect_err("deposed");
    assert!(err.is_stale(), "{err:?}");
}

/// Tokens a user hands in through `Fence::new` (a term of their own, an id from another
/// system) may be any u64: the guard compares them exactly, where Lua's numbers would
/// round neighbours above 2^53 to one value and let the older write through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_above_two_to_the_53_are_compared_exactly() {
    let h = Harness::scripts();
    let store = RedisStore::of(&h.locker).expect("store");
    let high = (1u64 << 60) + 2;
    store
        .set(Fence::new("big", high), "big:{v}", "new")
        .await
        .expect("first write");
    let err = store
        .set(Fence::new("big", high - 1), "big:{v}", "stale")
        .await
        .expect_err("one below the mark");
    assert!(err.is_stale(), "{err:?}");
    store
        .set(Fence::new("big", u64::MAX), "big:{v}", "max")
        .await
        .expect("the largest token");
    let err = store
        .set(Fence::new("big", u64::MAX - 1), "big:{v}", "stale")
        .await
        .expect_err("one below u64::MAX");
    assert!(err.is_stale(), "{err:?}");
}
