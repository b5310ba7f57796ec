//! `lockctl run --permits N` (at most N commands at once across processes), and `status` /
//! `list` showing every holder of a semaphore and of a read-write lock.

use std::time::Duration;

use lock_core::Locker;
use lock_tests::RedisServer;
use serde_json::Value;

use crate::support::{assert_clean_failure, exists, lockctl, read, run, wait_for, wait_until};

/// Six processes share two permits: each appends `+` when it starts and `-` when it ends to
/// one log; counting along the log, never more than two are inside, and two were at once.
#[test]
fn at_most_n_commands_run_at_once() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = "echo + >> \"$LOG\"; sleep 0.3; echo - >> \"$LOG\"";
    let mut children: Vec<_> = (0..6)
        .map(|_| {
            lockctl(&server)
                .args(["run", "--key", "exports", "--permits", "2", "--ttl", "10s"])
                .args(["--wait", "60s", "--", "sh", "-c", script])
                .env("LOG", &log)
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in children.iter_mut().enumerate() {
        assert_eq!(wait_for(child, &format!("run {i}")), Some(0));
    }
    let text = read(&log);
    let (mut inside, mut most) = (0i32, 0i32);
    for line in text.lines() {
        inside += if line == "+" { 1 } else { -1 };
        assert!(inside <= 2, "more than 2 at once:\n{text}");
        most = most.max(inside);
    }
    assert_eq!(text.lines().count(), 12, "{text}");
    assert_eq!(most, 2, "{text}");
    // No permit left behind (the key keeps the name's state between uses and expires by
    // itself).
    let live = server.command(&["ZRANGEBYSCORE", "lock:{exports}:sem", "(0", "+inf"]);
    assert!(live.trim().starts_with("*0"), "permits left behind: {live}");
}

#[test]
fn no_permit_free_gives_the_conflict_code() {
    let server = RedisServer::start();
    let mut holder = lockctl(&server)
        .args([
            "run",
            "--key",
            "jobs",
            "--permits",
            "1",
            "--",
            "sleep",
            "30",
        ])
        .spawn()
        .unwrap();
    wait_until("the holder's permit", || exists(&server, "lock:{jobs}:sem"));
    let busy = run(
        &server,
        &["run", "--key", "jobs", "--permits", "1", "--", "true"],
    );
    assert_clean_failure(&busy, 75);
    assert!(
        busy.stderr
            .contains("all 1 permits of `jobs` are taken (held by lockctl/sleep@"),
        "{busy:#?}"
    );
    // Another number of permits for the same name while it is in use: refused, naming both.
    let other = run(
        &server,
        &["run", "--key", "jobs", "--permits", "2", "--", "true"],
    );
    assert_clean_failure(&other, 64);
    assert!(
        other.stderr.contains("1 permits stored") && other.stderr.contains("asked for 2"),
        "{other:#?}"
    );
    let both = run(
        &server,
        &[
            "run",
            "--key",
            "jobs",
            "--permits",
            "2",
            "--fencing",
            "--",
            "true",
        ],
    );
    assert_clean_failure(&both, 64);
    assert!(both.stderr.contains("cannot be used with"), "{both:#?}");
    holder.kill().unwrap();
    let _ = holder.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_list_show_every_holder() {
    let server = RedisServer::start();
    let locker = Locker::builder()
        .url(server.url())
        .app_name("reports")
        .build()
        .unwrap();
    let ttl = Duration::from_secs(30);
    let exports = locker.semaphore("exports", 3);
    let permits = [
        exports.acquire().ttl(ttl).await.unwrap(),
        exports.acquire().ttl(ttl).await.unwrap(),
    ];
    let readers = [
        locker.rwlock("catalog").read().ttl(ttl).await.unwrap(),
        locker.rwlock("catalog").read().ttl(ttl).await.unwrap(),
    ];
    let writer = locker.rwlock("prices").write().ttl(ttl).await.unwrap();

    let status = run(&server, &["status", "exports"]);
    assert_eq!(status.code, Some(0), "{status:#?}");
    assert_eq!(
        status.stdout.matches("holds     permit reports@").count(),
        2,
        "{status:#?}"
    );
    assert!(
        status
            .stdout
            .contains("permits   3 (the semaphore's, as stored)"),
        "{status:#?}"
    );
    let json: Value =
        serde_json::from_str(&run(&server, &["status", "exports", "--json"]).stdout).unwrap();
    assert_eq!(json["semaphore_permits"], 3, "{json}");
    let status: Value =
        serde_json::from_str(&run(&server, &["status", "catalog", "--json"]).stdout).unwrap();
    assert_eq!(status["semaphore_permits"], Value::Null, "{status}");
    let held = status["permits"].as_array().unwrap();
    assert_eq!(held.len(), 2, "{status}");
    assert!(held
        .iter()
        .all(|p| p["kind"] == "read" && p["app"] == "reports"));
    assert!(held[0]["ttl_ms"].as_u64().unwrap() <= 30_000);

    let table = run(&server, &["list"]);
    assert_eq!(table.code, Some(0), "{table:#?}");
    let lines: Vec<&str> = table.stdout.lines().skip(1).collect();
    assert_eq!(lines.len(), 5, "{table:#?}");
    assert!(
        lines[0].starts_with("catalog") && lines[0].ends_with("read"),
        "{table:#?}"
    );
    assert!(
        lines[2].starts_with("exports") && lines[2].ends_with("permit"),
        "{table:#?}"
    );
    assert!(
        lines[4].starts_with("prices") && lines[4].ends_with("write"),
        "{table:#?}"
    );
    let listed: Value =
        serde_json::from_str(&run(&server, &["list", "--json", "--match", "pri*"]).stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["key"], "lock:{prices}:rw");

    drop((permits, readers, writer));
    assert!(locker.shutdown(Duration::from_secs(5)).await);
    assert_eq!(run(&server, &["list", "--json"]).stdout, "[]\n");
}

/// A holder of several permits (`Semaphore::acquire_many`) is shown with its number, and
/// the semaphore is full when the numbers add up to its permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_how_many_permits_each_holder_has() {
    let server = RedisServer::start();
    let locker = Locker::builder()
        .url(server.url())
        .app_name("trainer")
        .build()
        .unwrap();
    let ttl = Duration::from_secs(30);
    let gpus = locker.semaphore("gpus", 8);
    let held = [
        gpus.acquire_many(6).ttl(ttl).await.unwrap(),
        gpus.acquire_many(2).ttl(ttl).await.unwrap(),
    ];
    let status = run(&server, &["status", "gpus"]);
    assert_eq!(status.code, Some(0), "{status:#?}");
    assert!(
        status.stdout.contains("holds     6 permits trainer@"),
        "{status:#?}"
    );
    assert!(
        status.stdout.contains("holds     2 permits trainer@"),
        "{status:#?}"
    );
    assert!(
        status
            .stdout
            .contains("full (all 8 permits of the semaphore are held)"),
        "{status:#?}"
    );
    let json: Value =
        serde_json::from_str(&run(&server, &["status", "gpus", "--json"]).stdout).unwrap();
    let mut weights: Vec<u64> = json["permits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["permits"].as_u64().unwrap())
        .collect();
    weights.sort_unstable();
    assert_eq!(weights, [2, 6], "{json}");
    let table = run(&server, &["list"]);
    assert!(table.stdout.contains("6 permits"), "{table:#?}");
    drop(held);
}

/// `lockctl capacity NAME` shows the stored number; `--set N` changes it while the
/// semaphore is in use: raised, a waiting request gets in at once; `status` shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_shows_and_sets_the_stored_number() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).unwrap();
    let idle = run(&server, &["capacity", "exports"]);
    assert_eq!(idle.code, Some(0), "{idle:#?}");
    assert!(idle.stdout.contains("none stored"), "{idle:#?}");
    let exports = locker.semaphore("exports", 1);
    let held = exports
        .acquire()
        .ttl(Duration::from_secs(60))
        .await
        .unwrap();
    let shown = run(&server, &["capacity", "exports"]);
    assert!(
        shown
            .stdout
            .contains("permits   1 (the semaphore's, as stored)"),
        "{shown:#?}"
    );
    let queued = tokio::spawn({
        let exports = exports.clone();
        async move {
            exports
                .acquire()
                .ttl(Duration::from_secs(60))
                .wait(Duration::from_secs(30))
                .await
        }
    });
    for _ in 0..500 {
        if exports.holders().await.unwrap().waiting == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let set = run(&server, &["capacity", "exports", "--set", "2", "--json"]);
    assert_eq!(set.code, Some(0), "{set:#?}");
    let json: Value = serde_json::from_str(&set.stdout).unwrap();
    assert_eq!(json["permits"], 2, "{json}");
    assert_eq!(json["before"], 1, "{json}");
    let second = tokio::time::timeout(Duration::from_secs(10), queued)
        .await
        .expect("let in by the raise")
        .unwrap()
        .unwrap();
    let status = run(&server, &["status", "exports"]);
    assert!(
        status
            .stdout
            .contains("permits   2 (the semaphore's, as stored)"),
        "{status:#?}"
    );
    let zero = run(&server, &["capacity", "exports", "--set", "0"]);
    assert_clean_failure(&zero, 64);
    assert!(zero.stderr.contains("between 1 and"), "{zero:#?}");
    drop((held, second));
}
