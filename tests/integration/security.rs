//! Security: tokens, ownership, least-privilege ACL users, and names that try to escape the
//! Lua scripts. TLS is in `tls.rs`.

use std::collections::HashSet;
use std::time::Duration;

use lock_core::{LockError, Locker, Protocol};
use lock_tests::RedisServer;

use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

/// The library's own compare-and-delete and compare-and-pexpire scripts, as an attacker who
/// read the source would send them.
/// The release script as lock-core sends it: the waiter-queue helpers, then the script.
const RELEASE_LUA: &str = concat!(
    include_str!("../../lock-core/src/scripts/release.lua"),
    include_str!("../../lock-core/src/scripts/queue.lua"),
    include_str!("../../lock-core/src/scripts/release_listened.lua")
);
const EXTEND_LUA: &str = include_str!("../../lock-core/src/scripts/extend.lua");

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_128_random_bits_unique_per_acquisition() {
    let locker = Locker::memory();
    let mut seen = HashSet::new();
    let mut ones = 0u32;
    let pid_hex = format!("{:x}", std::process::id());
    for i in 0..256 {
        // Same name, same process, back to back: nothing but randomness tells them apart.
        let lease = locker.try_lock("t", SECOND).await.expect("acquire");
        let token = lease.token().to_owned();
        assert_eq!(token.len(), 32, "{token}");
        let bytes: Vec<u8> = (0..16)
            .map(|b| u8::from_str_radix(&token[2 * b..2 * b + 2], 16).expect("hex"))
            .collect();
        ones += bytes.iter().map(|b| b.count_ones()).sum::<u32>();
        assert!(seen.insert(token.clone()), "token repeated at {i}");
        assert!(lease.release().await.expect("release"));
        if i == 0 {
            // Not a counter, a pid or a clock reading dressed as hex.
            assert!(token != "0".repeat(32));
            assert!(!token.starts_with(&pid_hex) || pid_hex.len() < 4);
        }
    }
    // 32,768 bits from a uniform source: the share of ones is 0.5 +- 0.003 (1 sigma).
    let share = f64::from(ones) / (256.0 * 128.0);
    assert!((0.47..0.53).contains(&share), "{share}");
}

/// Someone who knows the lock name, the key layout, the holder label and the scripts, but
/// not the token, can neither release nor extend the lock.
async fn the_name_without_the_token_is_not_enough(h: Harness) {
    let server = h.server.as_ref().expect("server");
    let lease = h
        .locker
        .lock("vault")
        .ttl(5 * SECOND)
        .await
        .expect("acquire");
    let info = h
        .locker
        .inspect("vault")
        .await
        .expect("inspect")
        .expect("held");
    let label = info.holder.clone().expect("holder label");
    let mut conn = raw(server).await;

    let guesses = [
        String::new(),
        label.clone(),
        format!(":{label}"),
        format!("{}:{label}", "0".repeat(32)),
        lease.token().to_owned(), // the token without the label is not the stored value
        format!("{}:someone-else", lease.token()),
        format!("~{}", lease.token()), // nor with the listened-for mark in front
        format!("~~{}:{label}", lease.token()),
    ];
    for guess in &guesses {
        let released: i64 = redis::Script::new(RELEASE_LUA)
            .key(&info.key)
            .arg(guess)
            .arg(1) // the full path too (queue, release channel), as Redlock nodes run it
            .arg(100)
            .invoke_async(&mut conn)
            .await
            .expect("release script");
        assert_eq!(released, 0, "release with {guess:?}");
        let extended: i64 = redis::Script::new(EXTEND_LUA)
            .key(&info.key)
            .arg(guess)
            .arg(600_000)
            .invoke_async(&mut conn)
            .await
            .expect("extend script");
        assert_eq!(extended, 0, "extend with {guess:?}");
    }
    // Through the library: another locker's lease on the same name never exists while this
    // one holds it, so it has nothing to release with.
    let other = Harness::locker_for(server, h.protocol.expect("protocol"));
    assert!(matches!(
        other.try_lock("vault", SECOND).await,
        Err(LockError::Busy { .. })
    ));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&info.key)
        .query_async(&mut conn)
        .await
        .expect("pttl");
    assert!(pttl <= 5_000, "nobody extended it: {pttl}");
    assert!(lease.is_held().await.expect("is_held"));
    assert!(lease.release().await.expect("the holder still releases"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_name_without_the_token_is_not_enough_scripts() {
    the_name_without_the_token_is_not_enough(Harness::scripts()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_name_without_the_token_is_not_enough_transactions() {
    let server = RedisServer::start();
    let locker = Harness::locker_for(&server, Protocol::Transactions);
    the_name_without_the_token_is_not_enough(Harness {
        locker,
        server: Some(server),
        protocol: Some(Protocol::Transactions),
        nodes: Vec::new(),
    })
    .await;
}

/// The least a lock user needs: its keys and release channels, and these commands. The
/// scripts run with the caller's permissions, so the commands they call are listed too.
pub const LOCK_USER_ACL: &str = "on >s3cret resetkeys ~lock:* resetchannels &lock:* \
    -@all +set +get +pttl +pexpire +incr +incrby +del +exists +publish +evalsha +eval +time +zadd +zrange +zrank +zrem +hget +hset +hdel +pubsub|numsub +role +info +wait +subscribe \
    +mget +client|tracking +unsubscribe +watch +unwatch +multi +exec +ping";

/// The same user without scripting: only the WATCH/MULTI backend can work for it.
pub const NO_SCRIPT_USER_ACL: &str = "on >s3cret resetkeys ~lock:* resetchannels &lock:* \
    -@all +set +get +pttl +pexpire +incr +incrby +del +publish +subscribe +unsubscribe +watch \
    +unwatch +multi +exec +ping +time";

fn acl_user(server: &RedisServer, user: &str, rules: &str) {
    let mut args = vec!["ACL", "SETUSER", user];
    args.extend(rules.split_whitespace());
    let reply = server.command(&args);
    assert!(reply.starts_with("+OK"), "ACL SETUSER: {reply}");
    // Redis 7.2+ has CLIENT SETINFO, which redis-rs sends on connect (and tolerates being
    // refused); allow it where it exists so that ACL LOG stays quiet.
    let _ = server.command(&["ACL", "SETUSER", user, "+client|setinfo"]);
}

fn url_as(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:s3cret@127.0.0.1:{}/", server.port())
}

/// Every operation, including the waiting path (pub/sub) and fencing.
pub(crate) async fn full_life_cycle(locker: &Locker, name: &str) {
    let lease = locker
        .lock(name)
        .ttl(SECOND)
        .fencing()
        .await
        .expect("acquire");
    assert!(lease.fencing_token().is_some());
    lease.extend(2 * SECOND).await.expect("extend");
    assert!(lease.is_held().await.expect("is_held"));
    let info = locker.inspect(name).await.expect("inspect").expect("held");
    assert_eq!(info.fencing_counter, lease.fencing_token());
    // A waiter subscribes to the release channel and is woken by the release.
    let waiter = {
        let locker = locker.clone();
        let name = name.to_owned();
        tokio::spawn(async move { locker.lock(name).ttl(SECOND).wait(5 * SECOND).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(lease.release().await.expect("release"));
    let next = waiter.await.expect("join").expect("the waiter gets it");
    assert!(next.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_acl_user_can_do_everything() {
    let server = RedisServer::start();
    acl_user(&server, "locker", LOCK_USER_ACL);
    for protocol in [Protocol::Scripts, Protocol::Transactions] {
        let locker = Locker::builder()
            .url(url_as(&server, "locker"))
            .protocol(protocol)
            .build()
            .expect("locker");
        full_life_cycle(&locker, &format!("acl-{protocol:?}")).await;
    }
    // Nothing outside `lock:*` was touched, and the user could not have: a denied key.
    let log = server.command(&["ACL", "LOG"]);
    assert!(log.starts_with("*0"), "no denials while locking: {log}");
    let mut conn = redis::Client::open(url_as(&server, "locker"))
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let denied = redis::cmd("SET")
        .arg("app:data")
        .arg("x")
        .query_async::<()>(&mut conn)
        .await
        .expect_err("keys outside lock:* are refused");
    assert!(
        denied.to_string().to_lowercase().contains("noperm"),
        "{denied}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_script_permission_scripts_fail_clearly_and_transactions_work() {
    let server = RedisServer::start();
    acl_user(&server, "noscript", NO_SCRIPT_USER_ACL);
    let scripted = Locker::builder()
        .url(url_as(&server, "noscript"))
        .build()
        .expect("locker");
    // Fencing needs the acquire script: refused with Redis's own NOPERM message, never a
    // false "acquired".
    let err = scripted
        .lock("ns")
        .fencing()
        .await
        .expect_err("no EVALSHA permission");
    assert!(matches!(err, LockError::Redis { .. }), "{err:?}");
    assert!(err.to_string().contains("no permissions"), "{err}");
    assert!(
        server.command(&["EXISTS", "lock:{ns}"]).starts_with(":0"),
        "nothing was taken"
    );
    let tx = Locker::builder()
        .url(url_as(&server, "noscript"))
        .protocol(Protocol::Transactions)
        .build()
        .expect("locker");
    full_life_cycle(&tx, "ns").await;
}

/// Names built to break out of a script if they were ever pasted into its text, or to
/// confuse the key layout. All of them must travel as data.
const HOSTILE_NAMES: &[&str] = &[
    "quote'\"",
    "')) redis.call('FLUSHALL') --",
    "\"; return 1; --",
    "]]; redis.call('SET', 'pwned', 1); --[[",
    "line\nbreak\r\nand\ttab",
    "nul\0byte",
    "{braces}",
    "}",
    "{",
    "a}:fence",
    "%s %d %%",
    "\\\\ backslash \\",
    "unicode ünïcødé 锁 🔒",
    " leading and trailing ",
];

async fn hostile_names_round_trip_as_data(locker: &Locker, server: &RedisServer) {
    let mut conn = raw(server).await;
    let _: () = redis::cmd("SET")
        .arg("canary")
        .arg("alive")
        .query_async(&mut conn)
        .await
        .expect("set canary");
    for name in HOSTILE_NAMES {
        let lease = locker
            .lock(*name)
            .ttl(5 * SECOND)
            .fencing()
            .await
            .unwrap_or_else(|err| panic!("{name:?}: {err}"));
        // lock-core's key layout (a name beginning with `}` is stored after a NUL byte).
        let key = lock_core::KeyLayout::new("lock:").lock_key(name);
        assert_eq!(key, lease.key(), "{name:?}");
        let stored: Option<Vec<u8>> = redis::cmd("GET")
            .arg(key.as_bytes())
            .query_async(&mut conn)
            .await
            .expect("get");
        let stored = stored.unwrap_or_else(|| panic!("{name:?}: no key {key:?}"));
        assert!(
            stored.starts_with(lease.token().as_bytes()),
            "{name:?}: the key holds the token"
        );
        let fence: Option<u64> = redis::cmd("GET")
            .arg(format!("{key}:fence").as_bytes())
            .query_async(&mut conn)
            .await
            .expect("get fence");
        assert_eq!(fence, lease.fencing_token(), "{name:?}");
        let info = locker.inspect(name).await.expect("inspect").expect("held");
        assert_eq!(info.name, *name);
        assert_eq!(info.key, key);
        lease.extend(5 * SECOND).await.expect("extend");
        assert!(lease.release().await.expect("release"), "{name:?}");
        let exists: bool = redis::cmd("EXISTS")
            .arg(key.as_bytes())
            .query_async(&mut conn)
            .await
            .expect("exists");
        assert!(!exists, "{name:?}: released");
    }
    let canary: Option<String> = redis::cmd("GET")
        .arg("canary")
        .query_async(&mut conn)
        .await
        .expect("get canary");
    assert_eq!(canary.as_deref(), Some("alive"), "no script ran a name");
    let pwned: bool = redis::cmd("EXISTS")
        .arg("pwned")
        .query_async(&mut conn)
        .await
        .expect("exists");
    assert!(!pwned);
    // Each name got its own key: one lock and one counter per name, nothing else.
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("lock:*")
        .query_async(&mut conn)
        .await
        .expect("keys");
    assert_eq!(
        keys.len(),
        HOSTILE_NAMES.len(),
        "only the fencing counters remain"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_are_data_scripts() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("server");
    hostile_names_round_trip_as_data(&h.locker, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_are_data_transactions() {
    let server = RedisServer::start();
    let locker = Harness::locker_for(&server, Protocol::Transactions);
    hostile_names_round_trip_as_data(&locker, &server).await;
}
