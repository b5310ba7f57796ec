//! The uncontended cycle costs Redis what a bare lock costs (`SET NX PX`, then a
//! compare-and-delete script: GET + DEL), and the release still hands over and announces
//! whenever someone listens: a queued waiter or `lockctl watch` marks the value.

use std::collections::BTreeMap;
use std::time::Duration;

use lock_tests::RedisServer;

use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

/// Every command Redis has executed so far, with its call count (script-inner calls
/// included, as INFO commandstats counts them).
fn commands(server: &RedisServer) -> BTreeMap<String, u64> {
    server
        .command(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(":calls=")?;
            let calls = rest.split(',').next()?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| !name.starts_with("info") && !name.starts_with("config"))
        .collect()
}

fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(name, n)| (name.clone(), n - before.get(name).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_is_set_nx_then_get_and_del() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("server");
    // Warm up: the connection, and the release script in the server's cache.
    let lease = h
        .locker
        .lock("warm")
        .ttl(10 * SECOND)
        .await
        .expect("acquire");
    assert!(lease.release().await.expect("release"));
    // The Locker's watch connection (key tracking) opens in the background at the first
    // acquisition; on a loaded machine its set-up could otherwise land among the counted
    // cycles.
    server.until_watching(1).await;

    let before = commands(server);
    for i in 0..50 {
        let lease = h
            .locker
            .lock(format!("order:{i}"))
            .ttl(10 * SECOND)
            .wait(SECOND)
            .await
            .expect("acquire");
        assert!(lease.release().await.expect("release"));
    }
    let mut used = delta(&before, &commands(server));
    // Key tracking's registering read (lost leases told at once): batched with the other
    // grants of the moment, and skipped for a lease already released when its turn comes.
    let reads = used.remove("mget").unwrap_or(0);
    assert!(reads <= 50, "{reads} tracking reads for 50 acquisitions");
    let expected: BTreeMap<String, u64> = [("set", 50), ("evalsha", 50), ("get", 50), ("del", 50)]
        .into_iter()
        .map(|(name, n)| (name.to_owned(), n))
        .collect();
    assert_eq!(
        used, expected,
        "4 calls per cycle, as a bare SET NX + compare-and-delete"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_key_tracking_a_cycle_is_exactly_four_calls() {
    let server = lock_tests::RedisServer::start();
    // Without the eviction-policy check too: its connection opens in the background at the
    // first acquisition, and under load its `HELLO` could land inside the counted cycles.
    let locker = lock_core::Locker::builder()
        .url(server.url())
        .track_keys(false)
        .eviction_check(lock_core::EvictionCheck::Off)
        .build()
        .expect("locker");
    let lease = locker.lock("warm").ttl(10 * SECOND).await.expect("acquire");
    assert!(lease.release().await.expect("release"));
    let before = commands(&server);
    for i in 0..20 {
        let lease = locker
            .lock(format!("order:{i}"))
            .ttl(10 * SECOND)
            .await
            .expect("acquire");
        // Held a while: a tracked lease would be read by now.
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(lease.release().await.expect("release"));
    }
    let used = delta(&before, &commands(&server));
    let expected: BTreeMap<String, u64> = [("set", 20), ("evalsha", 20), ("get", 20), ("del", 20)]
        .into_iter()
        .map(|(name, n)| (name.to_owned(), n))
        .collect();
    assert_eq!(used, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_marks_the_value_and_the_release_hands_over() {
    let h = Harness::scripts();
    let server = h.server.as_ref().expect("server");
    let holder = h.second_locker(); // another process
    let lease = holder.lock("n").ttl(30 * SECOND).await.expect("acquire");
    let stored = server.command(&["GET", "lock:{n}"]);
    assert!(!stored.contains('~'), "nobody waits yet: {stored}");
    let waiter = tokio::spawn({
        let locker = h.locker.clone();
        async move { locker.lock("n").ttl(SECOND).wait(30 * SECOND).await }
    });
    // The waiter stands in the Redis-side queue once the value carries the mark.
    let marked = async {
        while !server.command(&["GET", "lock:{n}"]).contains('~') {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(10 * SECOND, marked)
        .await
        .expect("the queued waiter marks the holder's value");
    // The mark changes neither the holder's view nor its rights.
    assert!(lease.is_held().await.expect("is_held"));
    lease
        .extend(20 * SECOND)
        .await
        .expect("extend a marked lease");
    let info = holder.inspect("n").await.expect("inspect").expect("held");
    let label = info.holder.expect("holder label");
    assert!(!label.starts_with('~') && !label.is_empty(), "{label}");
    assert!(lease.release().await.expect("release a marked lease"));
    let won = tokio::time::timeout(10 * SECOND, waiter)
        .await
        .expect("the release hands over to the waiter")
        .expect("task")
        .expect("acquire");
    // A lock handed over stays marked (a reservation always carries the mark, so that a
    // releaser queuing again need not mark it), though nobody else waits now: its release
    // finds the queue empty and deletes it.
    let stored = server.command(&["GET", "lock:{n}"]);
    assert!(stored.contains('~'), "{stored}");
    assert!(won.release().await.expect("release"));
    assert_eq!(server.command(&["EXISTS", "lock:{n}"]).trim(), ":0");
    // The next holder, with nobody waiting, is unmarked again.
    let next = holder.lock("n").ttl(SECOND).await.expect("acquire");
    let stored = server.command(&["GET", "lock:{n}"]);
    assert!(!stored.contains('~'), "{stored}");
    assert!(next.release().await.expect("release"));
}

/// The words of every command in the server's slow log (every command, with
/// `slowlog-log-slower-than 0`), oldest first: each entry's arguments.
fn logged_commands(server: &RedisServer) -> Vec<Vec<String>> {
    // The reply's lines: `*n` and `$n` headers, `:n` numbers, then the bulk strings. An
    // entry is `id, time, duration, [args...], client address, client name`.
    let reply = server.command(&["SLOWLOG", "GET", "100"]);
    let mut lines = reply.lines().map(|l| l.trim_end_matches('\r')).peekable();
    let mut entries = Vec::new();
    while let Some(line) = lines.next() {
        // The arguments' array follows the entry's third number (its duration).
        if !line.starts_with(':') || !lines.peek().is_some_and(|l| l.starts_with('*')) {
            continue;
        }
        let count: usize = lines.next().and_then(|l| l[1..].parse().ok()).unwrap_or(0);
        let mut args = Vec::with_capacity(count);
        for _ in 0..count {
            let _header = lines.next();
            args.push(lines.next().unwrap_or_default().to_owned());
        }
        entries.push(args);
    }
    entries.reverse();
    entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_release_sends_one_key_and_one_argument() {
    // The release script took three keys and three arguments (the queue's keys, the
    // announcement flag, the claim window) on every release, though an unmarked value needs
    // only the lock key and the value: a compare-and-delete.
    let server = RedisServer::start_with(&["slowlog-log-slower-than 0", "slowlog-max-len 100"]);
    let locker = lock_core::Locker::from_url(&server.url()).expect("locker");
    let lease = locker.lock("lean").ttl(10 * SECOND).await.expect("acquire");
    server.command(&["SLOWLOG", "RESET"]);
    assert!(lease.release().await.expect("release"));
    let scripts: Vec<Vec<String>> = logged_commands(&server)
        .into_iter()
        .filter(|args| {
            args.first().is_some_and(|verb| {
                verb.eq_ignore_ascii_case("evalsha") || verb.eq_ignore_ascii_case("eval")
            })
        })
        .collect();
    let release = scripts.first().expect("the release ran a script");
    assert_eq!(
        release[2..],
        ["1".to_owned(), "lock:{lean}".to_owned(), release[4].clone()],
        "one key and one argument: {release:?}"
    );
    assert!(release[4].len() >= 32, "the value: {release:?}");
}
