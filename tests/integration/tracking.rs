//! A lost lease noticed at once (key tracking): a held lock's key deleted, overwritten,
//! flushed or evicted on the server makes `lost()` fire without waiting for a renewal or
//! the end of the validity; our own renewals and releases never do; a dropped watch
//! connection makes every lease look again. And the eviction-policy check.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lock_core::{EvictionCheck, LockError, Locker};
use lock_tests::RedisServer;

const SECOND: Duration = Duration::from_secs(1);

/// Long enough that renewal-time detection (or the end of validity) cannot be what fires
/// `lost()` within the test's bound.
const LONG_TTL: Duration = Duration::from_secs(60);

/// How long a test waits for a push to be acted on: generous for a loaded machine, far
/// below anything renewal-time detection could reach with [`LONG_TTL`].
const TOLD_WITHIN: Duration = Duration::from_secs(5);

fn locker(server: &RedisServer) -> Locker {
    Locker::builder().url(server.url()).build().expect("locker")
}

/// Holds `name` and waits until its key is watched (the registering read has run).
async fn held(locker: &Locker, server: &RedisServer, name: &str) -> lock_core::Lease {
    let before = tracked_keys(server);
    let lease = locker.lock(name).ttl(LONG_TTL).await.expect("acquire");
    let deadline = Instant::now() + TOLD_WITHIN;
    while tracked_keys(server) <= before {
        assert!(
            Instant::now() < deadline,
            "{name} was never read for tracking"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    lease
}

/// How many keys the server tracks for its clients (INFO's `tracking_total_keys`).
fn tracked_keys(server: &RedisServer) -> u64 {
    server
        .command(&["INFO", "stats"])
        .lines()
        .find_map(|line| line.strip_prefix("tracking_total_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Every command Redis ran so far, with its call count.
fn calls(server: &RedisServer) -> BTreeMap<String, u64> {
    server
        .command(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(":calls=")?;
            Some((name.to_owned(), rest.split(',').next()?.parse().ok()?))
        })
        .collect()
}

async fn told(lease: &lock_core::Lease, what: &str) {
    tokio::time::timeout(TOLD_WITHIN, lease.lost())
        .await
        .unwrap_or_else(|_| panic!("lost() did not fire after {what}"));
    assert!(lease.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_delete_of_a_held_key_fires_lost_at_once() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let lease = held(&locker, &server, "deleted").await;
    assert!(!lease.is_lost());
    assert!(server.command(&["DEL", lease.key()]).starts_with(":1"));
    told(&lease, "a DEL").await;
    assert!(!lease.release().await.expect("release"), "it was not ours");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tracking_a_foreign_delete_goes_unnoticed_until_renewal() {
    let server = RedisServer::start();
    let locker = Locker::builder()
        .url(server.url())
        .track_keys(false)
        .build()
        .expect("locker");
    let lease = locker
        .lock("unwatched")
        .ttl(LONG_TTL)
        .await
        .expect("acquire");
    assert!(server.command(&["DEL", lease.key()]).starts_with(":1"));
    assert!(
        tokio::time::timeout(SECOND, lease.lost()).await.is_err(),
        "with track_keys(false) nothing tells the holder before its validity ends"
    );
    assert_eq!(
        calls(&server).get("mget"),
        None,
        "and no key is read for it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_overwrite_and_a_flush_fire_lost_at_once() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let overwritten = held(&locker, &server, "overwritten").await;
    let flushed = held(&locker, &server, "flushed").await;
    assert!(server
        .command(&["SET", overwritten.key(), "someone-else"])
        .starts_with("+OK"));
    told(&overwritten, "a foreign SET").await;
    assert!(
        !flushed.is_lost(),
        "another key's change tells only its own lease"
    );
    // A hash on the key (WRONGTYPE for the lock commands) after a flush.
    assert!(server.command(&["FLUSHDB"]).starts_with("+OK"));
    told(&flushed, "FLUSHDB").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_and_releases_never_tell_a_holder_falsely() {
    let server = RedisServer::start();
    let locker = locker(&server);
    // Renewed every ~170 ms: each PEXPIRE is a change of the key the server pushes.
    let renewed = locker
        .lock("renewed")
        .ttl(Duration::from_millis(500))
        .auto_renew()
        .await
        .expect("acquire");
    let extended = held(&locker, &server, "extended").await;
    for _ in 0..5 {
        extended.extend(LONG_TTL).await.expect("extend");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(SECOND).await;
    assert!(!renewed.is_lost(), "our own renewals are not a loss");
    assert!(!extended.is_lost(), "our own extensions are not a loss");
    assert!(renewed.is_held().await.expect("is_held"));
    // Releasing, and taking the same names again at once, tells nobody either.
    assert!(renewed.release().await.expect("release"));
    assert!(extended.release().await.expect("release"));
    let again = locker.lock("renewed").ttl(LONG_TTL).await.expect("again");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !again.is_lost(),
        "a successor is not told of its predecessor's release"
    );
    assert!(again.release().await.expect("release"));
}

/// A lease is read once it has been held 2 ms: one released sooner costs no read (and its
/// release no push), however its grant falls against the watch's batches. Before, a short
/// lease held when a batch was taken was read: with four tasks taking turns, nearly every
/// batch read one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_released_within_two_milliseconds_is_never_read() {
    let server = RedisServer::start();
    let locker = locker(&server);
    // A long lease keeps the watch task looking every 2 ms throughout.
    let long = held(&locker, &server, "long").await;
    let before = calls(&server).get("mget").copied().unwrap_or(0);
    let loops: Vec<_> = (0..4)
        .map(|task| {
            let locker = locker.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let (mut cycles, mut slow) = (0u64, 0u64);
                while started.elapsed() < Duration::from_millis(300) {
                    let asked = Instant::now();
                    let lease = locker
                        .lock(format!("short:{task}"))
                        .ttl(LONG_TTL)
                        .await
                        .expect("acquire");
                    // Held a while, well under 2 ms, as a short critical section is.
                    let holding = Instant::now();
                    while holding.elapsed() < Duration::from_micros(300) {
                        tokio::task::yield_now().await;
                    }
                    assert!(lease.release().await.expect("release"));
                    // Registered after `asked`, released before now: held at most this.
                    if asked.elapsed() >= Duration::from_millis(2) {
                        slow += 1;
                    }
                    cycles += 1;
                }
                (cycles, slow)
            })
        })
        .collect();
    let (mut cycles, mut slow) = (0, 0);
    for one in loops {
        let (c, s) = one.await.expect("loop");
        cycles += c;
        slow += s;
    }
    let reads = calls(&server).get("mget").copied().unwrap_or(0) - before;
    assert!(
        reads <= slow,
        "{reads} reads for {cycles} short leases, {slow} of them possibly held 2 ms or more"
    );
    assert!(long.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_costs_at_most_one_read_and_a_release_none() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let warm = held(&locker, &server, "warm").await;
    assert!(warm.release().await.expect("release"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(server.command(&["CONFIG", "RESETSTAT"]).starts_with("+OK"));
    let cycles = 40u64;
    let mut leases = Vec::new();
    let before = tracked_keys(&server);
    for i in 0..cycles {
        leases.push(
            locker
                .lock(format!("cycle:{i}"))
                .ttl(LONG_TTL)
                .await
                .expect("acquire"),
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        tracked_keys(&server) - before,
        cycles,
        "every held key is tracked"
    );
    let reads = calls(&server).get("mget").copied().unwrap_or(0);
    assert!(
        (1..=cycles).contains(&reads),
        "{reads} registering reads for {cycles} acquisitions"
    );
    for lease in leases {
        assert!(lease.release().await.expect("release"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let used = calls(&server);
    assert_eq!(
        used.get("mget").copied().unwrap_or(0),
        reads,
        "the releases' own changes of the keys cost no read: {used:?}"
    );
    assert_eq!(used.get("get").copied().unwrap_or(0), cycles, "{used:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_watch_connection_makes_every_lease_look_again() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let first = held(&locker, &server, "first").await;
    let second = held(&locker, &server, "second").await;
    // Every client connection dies (the watch connection among them) and, in the same
    // moment, one key goes: no push can tell of it, the re-check after reconnecting must.
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_connection().expect("connection");
    let (deleted, killed): (u64, u64) = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg(first.key())
        .cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut conn)
        .expect("DEL and CLIENT KILL in one transaction");
    assert_eq!(deleted, 1);
    assert!(killed >= 1, "the watch connection was killed");
    told(&first, "a DEL while the watch connection was down").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_lost(), "the other lease is still ours");
    // Tracked again: a later DEL is pushed on the new connection.
    assert!(server.command(&["DEL", second.key()]).starts_with(":1"));
    told(&second, "a DEL after the reconnect").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_tracking_leaves_renewal_time_detection() {
    // The ACL forbids CLIENT TRACKING (as some managed services do).
    let server = RedisServer::start_with(&["user default on nopass ~* &* +@all -client|tracking"]);
    let locker = locker(&server);
    let lease = locker
        .lock("refused")
        .ttl(Duration::from_millis(900))
        .auto_renew()
        .await
        .expect("locks still work");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(server.command(&["DEL", lease.key()]).starts_with(":1"));
    // The renewal (a third of the TTL in) finds the key gone.
    told(&lease, "a DEL found by the renewal").await;
    assert_eq!(
        calls(&server).get("mget"),
        None,
        "no tracking read was made"
    );
}

/// A server with a 2 MB memory limit under `policy`, and a Locker that checks it.
fn small(policy: &str) -> RedisServer {
    RedisServer::start_with(&[
        "maxmemory 2mb",
        &format!("maxmemory-policy {policy}"),
        "maxmemory-samples 10",
    ])
}

/// Writes ~8 MB of keys (with a TTL when `volatile`) into `server`; stops at the first
/// refusal (`noeviction`: OOM). True if every write went through.
fn fill(server: &RedisServer, volatile: bool) -> bool {
    let value = "x".repeat(10_000);
    for i in 0..800 {
        let key = format!("filler:{i}");
        let reply = if volatile {
            server.command(&["SET", &key, &value, "EX", "600"])
        } else {
            server.command(&["SET", &key, &value])
        };
        if !reply.starts_with("+OK") {
            assert!(reply.contains("OOM"), "{reply}");
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_policies_are_refused_under_the_strict_check_and_warned_about_otherwise() {
    for policy in [
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
    ] {
        let server = small(policy);
        let strict = Locker::builder()
            .url(server.url())
            .eviction_check(EvictionCheck::Refuse)
            .build()
            .expect("locker");
        match strict.lock("guarded").ttl(LONG_TTL).await {
            Err(LockError::Misconfigured { reason, .. }) => {
                assert!(reason.contains(policy), "{policy}: {reason}");
                assert!(reason.contains("noeviction"), "{policy}: {reason}");
            }
            other => panic!("{policy}: expected Misconfigured, got {other:?}"),
        }
        // The default warns and grants; with key tracking, an evicted lease is told at once.
        let warned = locker(&server);
        let lease = held(&warned, &server, "evictable").await;
        let everything_written = fill(&server, policy.starts_with("volatile"));
        assert!(
            everything_written,
            "{policy} evicts instead of refusing writes"
        );
        let evicted = server.command(&["EXISTS", lease.key()]).starts_with(":0");
        // volatile-ttl evicts the key closest to expiry first: the lock (60 s, the filler 600 s).
        assert!(
            evicted || policy != "volatile-ttl",
            "volatile-ttl kept the lock key"
        );
        if evicted {
            told(&lease, &format!("eviction under {policy}")).await;
        } else {
            // The lock key was lucky this time (a random or sampled choice): still ours.
            assert!(lease.is_held().await.expect("is_held"), "{policy}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noeviction_and_no_memory_limit_pass_the_strict_check() {
    let servers = [
        small("noeviction"),
        RedisServer::start_with(&["maxmemory-policy volatile-lru"]),
    ];
    for server in &servers {
        let strict = Locker::builder()
            .url(server.url())
            .eviction_check(EvictionCheck::Refuse)
            .build()
            .expect("locker");
        let lease = held(&strict, server, "safe").await;
        // A full noeviction server refuses writes, and never drops the lock.
        let _ = fill(server, true);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!lease.is_lost());
        assert!(lease.is_held().await.expect("is_held"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_info_is_not_taken_for_safe_under_the_strict_check() {
    let server = RedisServer::start_with(&["user default on nopass ~* &* +@all -info"]);
    let strict = Locker::builder()
        .url(server.url())
        .eviction_check(EvictionCheck::Refuse)
        .build()
        .expect("locker");
    match strict.lock("unchecked").await {
        Err(LockError::Misconfigured { reason, .. }) => {
            assert!(reason.contains("could not read"), "{reason}")
        }
        other => panic!("expected Misconfigured, got {other:?}"),
    }
    // The default only warns.
    let lease = locker(&server).lock("unchecked").await.expect("acquire");
    assert!(lease.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_round_of_many_leases_is_re_read_in_a_few_batches() {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    let server = RedisServer::start();
    let locker = locker(&server);
    let count = 2000u64;
    let leases: Vec<lock_core::Lease> = futures_util::stream::iter(0..count)
        .map(|i| {
            let locker = locker.clone();
            async move {
                locker
                    .lock(format!("many:{i}"))
                    .ttl(Duration::from_millis(3000))
                    .auto_renew()
                    .await
            }
        })
        .buffer_unordered(64)
        .try_collect()
        .await
        .expect("acquire");
    // Each renewal round changes every key, and the server pushes each of them back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = calls(&server);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let after = calls(&server);
    let lost = leases.iter().filter(|lease| lease.is_lost()).count();
    assert_eq!(lost, 0, "{lost} of {count} untouched leases told lost");
    let count_of = |map: &BTreeMap<String, u64>, name: &str| map.get(name).copied().unwrap_or(0);
    let renewed = count_of(&after, "evalsha") - count_of(&before, "evalsha");
    let reads = count_of(&after, "mget") - count_of(&before, "mget");
    assert!(
        renewed >= 2 * count,
        "two rounds at least: {renewed} renewals"
    );
    assert!(
        reads * 20 <= renewed,
        "{reads} tracking reads for {renewed} renewals: re-reads must be batched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_connection_fallen_silent_is_caught_by_its_heartbeat() {
    let server = RedisServer::start();
    let proxy = lock_tests::proxy::Proxy::start(server.addr()).expect("proxy");
    let locker = Locker::builder()
        .url(proxy.url())
        .command_timeout(Duration::from_millis(500))
        .build()
        .expect("locker");
    let taken = held(&locker, &server, "taken").await;
    let kept = held(&locker, &server, "kept").await;
    // Every connection open now dies silently (a NAT that dropped its state, a host gone
    // without a reset): no byte crosses it again and neither end is told. The server's push
    // about the DEL below is swallowed; only the heartbeat can find out.
    proxy.stall_connections();
    assert!(server.command(&["DEL", taken.key()]).starts_with(":1"));
    told(&taken, "a DEL pushed on a connection that went silent").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !kept.is_lost(),
        "the re-check after the missed heartbeat finds the other lease still ours"
    );
}

/// The strict check is part of the request's time: against a server that answers nothing
/// (stalled), a first `lock()` with a 300 ms wait ends at its deadline with a connection
/// error naming the check, not after the check's own 2 s timeout, nor as a timeout behind a
/// holder. So does a try, within its command timeout. The check cut short leaves the
/// Locker able to check again and grant once the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_strict_check_counts_against_the_requests_wait() {
    let server = RedisServer::start_debuggable();
    for wait in [Duration::from_millis(300), Duration::ZERO] {
        let strict = Locker::builder()
            .url(server.url())
            .eviction_check(EvictionCheck::Refuse)
            .command_timeout(if wait.is_zero() {
                Duration::from_millis(300)
            } else {
                2 * SECOND
            })
            .build()
            .expect("locker");
        let stall = server.stall(2 * SECOND);
        let started = Instant::now();
        let result = strict.lock("checked").wait(wait).await;
        let took = started.elapsed();
        match result {
            Err(LockError::Connection { reason, .. }) => {
                assert!(reason.contains("EvictionCheck::Refuse"), "{reason}")
            }
            other => panic!("wait {wait:?}: expected a connection error, got {other:?}"),
        }
        assert!(
            took < Duration::from_millis(1500),
            "wait {wait:?}: ended after {took:?}, past its own time"
        );
        stall.join().expect("stall");
        // The check cut short left nothing behind: once the server answers, the same Locker
        // checks again and grants.
        let lease = strict
            .lock("checked")
            .wait(5 * SECOND)
            .await
            .expect("granted once the server answers");
        assert!(lease.release().await.expect("release"));
    }
}

/// The strict check guards every kind of acquisition, not the plain lock alone: against a
/// server that could evict them, a semaphore's permit, a read-write lock's sides and a
/// multi-lock are refused too, and nothing of theirs is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_strict_check_refuses_permits_and_multi_locks_too() {
    let server = small("allkeys-lru");
    let strict = Locker::builder()
        .url(server.url())
        .eviction_check(EvictionCheck::Refuse)
        .build()
        .expect("locker");
    let refused = |what: &str, result: Result<(), LockError>| match result {
        Err(LockError::Misconfigured { reason, .. }) => {
            assert!(reason.contains("allkeys-lru"), "{what}: {reason}")
        }
        other => panic!("{what}: expected Misconfigured, got {other:?}"),
    };
    refused(
        "semaphore",
        strict.semaphore("pool", 2).acquire().await.map(drop),
    );
    refused("read side", strict.rwlock("doc").read().await.map(drop));
    refused("write side", strict.rwlock("doc").write().await.map(drop));
    refused("multi-lock", strict.lock_all(["a", "b"]).await.map(drop));
    assert_eq!(server.command(&["DBSIZE"]).trim(), ":0", "nothing written");
}

/// A Locker outlives the runtime its watch task ran on (a `#[tokio::test]` per case with one
/// shared Locker, a service that rebuilds its runtime): the next runtime's leases are watched
/// again, and lost ones told at once.
#[test]
fn a_locker_moved_to_a_new_runtime_after_the_old_one_shut_down_still_tells_a_loss() {
    let server = RedisServer::start();
    let locker = locker(&server);
    for round in 0..2 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let name = format!("moved-{round}");
            let lease = held(&locker, &server, &name).await;
            assert!(server.command(&["DEL", lease.key()]).starts_with(":1"));
            told(&lease, &format!("a DEL on runtime {round}")).await;
            // A lease left held while the runtime shuts down: its watch task is dropped
            // at its await, not ended.
            let kept = held(&locker, &server, &format!("{name}-kept")).await;
            std::mem::forget(kept);
        });
        // Dropped: its tasks are dropped before the next round begins.
        drop(runtime);
    }
}
