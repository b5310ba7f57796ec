//! `status`, `list` and `release --force` against locks taken by lock-core, with names that
//! have spaces and non-ASCII characters.

use std::time::Duration;

use lock_core::Locker;
use lock_tests::RedisServer;
use serde_json::Value;

use crate::support::{assert_clean_failure, exists, run, wait_until};

const NAMES: [&str; 3] = ["plain", "with spaces here", "ünïcødé ✓ 锁"];

fn locker(server: &RedisServer) -> Locker {
    Locker::builder()
        .url(server.url())
        .app_name("inventory-sync")
        .build()
        .unwrap()
}

/// A fenced lease on each of `names` for 30 s.
async fn hold_fenced(locker: &Locker, names: &[&str]) -> Vec<lock_core::Lease> {
    let mut leases = Vec::new();
    for name in names {
        leases.push(
            locker
                .lock(*name)
                .ttl(Duration::from_secs(30))
                .fencing()
                .await
                .unwrap(),
        );
    }
    leases
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|err| panic!("not JSON ({err}): {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_holder_ttl_and_fencing_counter() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let leases = hold_fenced(&locker, &NAMES).await;
    let pid = std::process::id();
    for (&name, lease) in NAMES.iter().zip(&leases) {
        let token = lease.fencing_token().unwrap();
        let text = run(&server, &["status", name]);
        assert_eq!(text.code, Some(0), "{text:#?}");
        assert!(
            text.stdout.contains(&format!("lock      {name}\n")),
            "{text:#?}"
        );
        assert!(
            text.stdout
                .contains(&format!("key       lock:{{{name}}}\n")),
            "{text:#?}"
        );
        assert!(text.stdout.contains("state     held\n"), "{text:#?}");
        // A lone Redis: nothing alarming (see `status_is_quiet_on_a_lone_redis`).
        assert!(
            text.stdout.contains("master    a single Redis"),
            "{text:#?}"
        );
        assert!(
            text.stdout.contains("holder    inventory-sync@"),
            "{text:#?}"
        );
        assert!(
            text.stdout.contains("app       inventory-sync\n"),
            "{text:#?}"
        );
        assert!(
            text.stdout.contains(&format!("pid       {pid}\n")),
            "{text:#?}"
        );
        assert!(text.stdout.contains("ttl left  "), "{text:#?}");
        assert!(
            text.stdout.contains(&format!("fencing   {token}\n")),
            "{text:#?}"
        );

        let value = json(&run(&server, &["status", name, "--json"]).stdout);
        assert_eq!(value["replicas_connected"], 0, "{value}");
        assert_eq!(value["name"], name);
        assert_eq!(value["held"], true);
        assert_eq!(value["app"], "inventory-sync");
        assert_eq!(value["pid"], pid);
        assert_eq!(value["fencing_counter"], token);
        let ttl = value["ttl_ms"].as_u64().unwrap();
        assert!(ttl > 0 && ttl <= 30_000, "{value}");
    }

    // What lockctl shows is what lock-core's inspect says.
    let info = locker.inspect(NAMES[2]).await.unwrap().unwrap();
    let value = json(&run(&server, &["status", NAMES[2], "--json"]).stdout);
    assert_eq!(value["holder"].as_str(), info.holder.as_deref());

    let last = leases[1].fencing_token().unwrap();
    for lease in leases {
        assert!(lease.release().await.unwrap());
    }
    let free = run(&server, &["status", NAMES[1]]);
    assert_eq!(free.code, Some(1), "a free lock exits 1: {free:#?}");
    assert!(free.stdout.contains("state     free\n"), "{free:#?}");
    assert!(
        free.stdout.contains(&format!("fencing   {last}\n")),
        "the counter outlives the lock: {free:#?}"
    );
    let value = json(&run(&server, &["status", "never-taken", "--json"]).stdout);
    assert_eq!(value["held"], false);
    assert_eq!(value["holder"], Value::Null);
    assert_eq!(value["fencing_counter"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_every_held_lock_and_nothing_else() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let leases = hold_fenced(&locker, &NAMES).await;
    // Not locks: another prefix, a hash on a lock-shaped key, a fencing counter of a free
    // lock, an unrelated key.
    server.command(&["SET", "other:{x}", "y"]);
    server.command(&["HSET", "lock:{a hash}", "f", "v"]);
    server.command(&["SET", "lock:{gone}:fence", "4"]);
    server.command(&["SET", "unrelated", "1"]);

    let table = run(&server, &["list"]);
    assert_eq!(table.code, Some(0), "{table:#?}");
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{table:#?}");
    assert!(lines[0].starts_with("NAME"), "{table:#?}");
    let mut sorted = NAMES;
    sorted.sort();
    for (line, name) in lines[1..].iter().zip(sorted) {
        assert!(line.starts_with(&format!("{name}  ")), "{table:#?}");
        assert!(line.contains("inventory-sync@"), "{table:#?}");
    }
    assert!(table.stderr.contains("skipped 1 key"), "{table:#?}");

    let listed = json(&run(&server, &["list", "--json"]).stdout);
    let listed = listed.as_array().unwrap();
    let names: Vec<&str> = listed.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, sorted);
    for lock in listed {
        assert_eq!(lock["app"], "inventory-sync");
        let lease = leases.iter().find(|l| l.name() == lock["name"]).unwrap();
        assert_eq!(lock["fencing_counter"], lease.fencing_token().unwrap());
        assert!(lock["ttl_ms"].as_u64().unwrap() <= 30_000);
    }

    let matched = json(&run(&server, &["list", "--json", "--match", "with*"]).stdout);
    assert_eq!(matched.as_array().unwrap().len(), 1);
    assert_eq!(matched[0]["name"], "with spaces here");
    let matched = json(&run(&server, &["list", "--json", "--match", "ü*锁"]).stdout);
    assert_eq!(matched[0]["name"], "ünïcødé ✓ 锁");

    let other = json(&run(&server, &["list", "--json", "--prefix", "other:"]).stdout);
    assert_eq!(other[0]["name"], "x");
    assert_eq!(other[0]["holder"], Value::Null);

    for lease in leases {
        lease.release().await.unwrap();
    }
    let empty = run(&server, &["list"]);
    assert_eq!(
        empty.stdout, "no locks held matching lock:{*}\n",
        "{empty:#?}"
    );
    assert_eq!(run(&server, &["list", "--json"]).stdout, "[]\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_force_removes_any_holders_lock_and_says_whose() {
    let server = RedisServer::start();
    let locker = locker(&server);
    for name in NAMES {
        let lease = locker
            .lock(name)
            .ttl(Duration::from_secs(30))
            .await
            .unwrap();

        let refused = run(&server, &["release", name]);
        assert_clean_failure(&refused, 64);
        assert!(refused.stderr.contains("--force"), "{refused:#?}");
        assert!(lease.is_held().await.unwrap(), "removed without --force");

        let removed = run(&server, &["release", name, "--force"]);
        assert_eq!(removed.code, Some(0), "{removed:#?}");
        let label = locker.holder_label().unwrap();
        assert!(
            removed
                .stdout
                .starts_with(&format!("removed lock `{name}` held by {label}, ")),
            "{removed:#?}"
        );
        assert!(!exists(&server, &format!("lock:{{{name}}}")));
        assert!(!lease.is_held().await.unwrap());
        // The holder's own release leaves the next holder alone.
        assert!(!lease.release().await.unwrap());

        let again = run(&server, &["release", name, "--force"]);
        assert_eq!(again.code, Some(0));
        assert_eq!(
            again.stdout,
            format!("lock `{name}` is not held; nothing removed\n")
        );
    }

    // A waiter is woken by the forced release at once, not at the end of the TTL.
    let held = locker
        .lock("busy")
        .ttl(Duration::from_secs(60))
        .await
        .unwrap();
    let other = Locker::from_url(&server.url()).unwrap();
    let waiter = tokio::spawn(async move {
        other
            .lock("busy")
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(30))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    assert_eq!(run(&server, &["release", "busy", "--force"]).code, Some(0));
    let lease = waiter.await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    lease.release().await.unwrap();
    drop(held);

    // Something that is not a lock is not deleted.
    server.command(&["HSET", "lock:{h}", "f", "v"]);
    assert_clean_failure(&run(&server, &["release", "h", "--force"]), 70);
    assert!(exists(&server, "lock:{h}"));
}

/// Names that begin with `}` (stored by lock-core after a NUL byte, so that their Cluster
/// hash tag is not empty) and names full of braces: lockctl finds them where lock-core put
/// them, lists them under their own names, matches patterns against the names, and removes
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_braces_are_found_where_lock_core_keeps_them() {
    const BRACED: [&str; 4] = ["}job", "}{x", "{}", "a}b{c"];
    let server = RedisServer::start();
    let locker = locker(&server);
    let leases = hold_fenced(&locker, &BRACED).await;
    let permit = locker
        .semaphore("}sem", 2)
        .try_acquire(Duration::from_secs(30))
        .await
        .unwrap();
    for (name, lease) in BRACED.iter().zip(&leases) {
        let value = json(&run(&server, &["status", name, "--json"]).stdout);
        assert_eq!(value["held"], true, "{name:?}: {value}");
        assert_eq!(value["key"].as_str(), Some(lease.key()), "{name:?}");
        assert_eq!(
            value["fencing_counter"],
            lease.fencing_token().unwrap(),
            "{name:?}: {value}"
        );
    }
    let listed = json(&run(&server, &["list", "--json"]).stdout);
    let mut names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    let mut expected = BRACED.to_vec();
    expected.push("}sem");
    expected.sort_unstable();
    assert_eq!(names, expected, "{listed}");
    let matched = json(&run(&server, &["list", "--json", "--match", "}*"]).stdout);
    let mut names: Vec<&str> = matched
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["}job", "}sem", "}{x"], "{matched}");

    let removed = run(&server, &["release", "}job", "--force"]);
    assert_eq!(removed.code, Some(0), "{removed:#?}");
    assert!(
        removed.stdout.starts_with("removed lock `}job`"),
        "{removed:#?}"
    );
    assert!(!exists(&server, leases[0].key()));
    assert!(!leases[0].is_held().await.unwrap());
    assert!(permit.release().await.unwrap());
    for lease in leases.into_iter().skip(1) {
        assert!(lease.release().await.unwrap());
    }
}

/// `waits NAME` lists who waits for a lock while holding other locks, and what they hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_shows_who_waits_while_holding_what() {
    let server = RedisServer::start();
    let holder = locker(&server);
    let held = holder.lock("orders:7").await.unwrap();
    let waiter = Locker::builder()
        .url(server.url())
        .app_name("billing")
        .build()
        .unwrap();
    let task = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let inner = waiter.clone();
            waiter
                .using("account:7", |_| async move {
                    inner
                        .lock("orders:7")
                        .wait(Duration::from_secs(10))
                        .await
                        .map(drop)
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = tokio::task::spawn_blocking({
        let url = server.url();
        move || {
            let out = crate::support::lockctl_at(&url)
                .args(["waits", "orders:7"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    })
    .await
    .unwrap();
    assert!(text.contains("state     held"), "{text}");
    assert!(text.contains("holder    inventory-sync@"), "{text}");
    assert!(text.contains("WAITER"), "{text}");
    assert!(text.contains("billing@"), "{text}");
    assert!(text.contains("account:7"), "{text}");
    let of_account = tokio::task::spawn_blocking({
        let url = server.url();
        move || {
            let out = crate::support::lockctl_at(&url)
                .args(["waits", "account:7", "--json"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    })
    .await
    .unwrap();
    let value = json(&of_account);
    assert_eq!(value["holder_waits_for"][0], "orders:7", "{value}");
    assert!(held.release().await.unwrap());
    task.await.unwrap().unwrap();
}

/// The most common setup, one Redis without replicas: `status` says so calmly, with no
/// warning about a failover that cannot happen, held or free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_quiet_on_a_lone_redis() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let leases = hold_fenced(&locker, &["quiet"]).await;
    for name in ["quiet", "never-taken"] {
        let text = run(&server, &["status", name]);
        assert!(text.code == Some(0) || text.code == Some(1), "{text:#?}");
        assert!(
            text.stdout.contains(
                "master    a single Redis (no replicas, so no failover to lose a lock)\n"
            ),
            "{text:#?}"
        );
        for alarming in [
            "failover would lose",
            "failover now would lose",
            "not checked",
        ] {
            assert!(!text.stdout.contains(alarming), "{alarming}: {text:#?}");
        }
        assert!(
            !text.stdout.contains("replicas "),
            "no replicas row: {text:#?}"
        );
        let value = json(&run(&server, &["status", name, "--json"]).stdout);
        assert_eq!(value["standalone"], true, "{value}");
        assert_eq!(value["replicas_connected"], 0, "{value}");
    }
    for lease in leases {
        assert!(lease.release().await.unwrap());
    }
}

/// Where the replica note matters it stays: a master whose replica left, and a replica
/// promoted without one of its own (a failover of a master and one replica).
#[test]
fn status_warns_where_a_replica_is_missing() {
    let master = RedisServer::start();
    let mut replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
    wait_until("the replica online", || {
        master
            .command(&["INFO", "replication"])
            .contains("state=online")
    });
    let with = run(&master, &["status", "x"]);
    assert!(
        with.stdout.contains("master    1 connected replica: "),
        "{with:#?}"
    );

    // The replica is promoted (REPLICAOF NO ONE, as Sentinel does): it has none of its own.
    replica.command(&["REPLICAOF", "NO", "ONE"]);
    let promoted = run(&replica, &["status", "x"]);
    assert!(
        promoted.stdout.contains(
            "master    no connected replica (this master had one, or is a Cluster node): "
        ),
        "{promoted:#?}"
    );
    let value = json(&run(&replica, &["status", "x", "--json"]).stdout);
    assert_eq!(value["standalone"], false, "{value}");

    // The master's replica is gone.
    replica.kill();
    wait_until("the master to see its replica gone", || {
        master
            .command(&["INFO", "replication"])
            .contains("connected_slaves:0")
    });
    let without = run(&master, &["status", "x"]);
    assert!(
        without
            .stdout
            .contains("master    no connected replica (this master had one"),
        "{without:#?}"
    );
    assert!(
        without.stdout.contains("a failover would lose them"),
        "{without:#?}"
    );
}
