//! Every mode of the simulation against a private redis-server: a short run with 5 listers
//! and 5 buyers must keep every invariant, and the locked modes must never retry.

use std::time::Duration;

use lock_tests::RedisServer;
use marketplace::sim::run_row;
use marketplace::{Mode, RowConfig, Seed, Stop};

fn row(mode: Mode) -> RowConfig {
    RowConfig {
        mode,
        listers: 5,
        buyers: 5,
        duration: Duration::from_millis(1500),
        seed: Seed {
            users: 200,
            items_per_user: 20,
            funds: 1_000_000,
        },
        max_price: 100,
        locker_per_task: false,
        fenced: false,
    }
}

fn dbsize(server: &RedisServer) -> String {
    server.command(&["DBSIZE"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_keeps_the_invariants() {
    let server = RedisServer::start();
    for (index, mode) in Mode::ALL.into_iter().enumerate() {
        let config = row(mode);
        let prefix = format!("mp:test:{index}:");
        let result = run_row(&server.url(), &prefix, &config, &Stop::new())
            .await
            .unwrap_or_else(|err| panic!("{mode}: {err}"));
        assert!(result.passed(), "{mode}: {result:#?}");
        assert_eq!(
            result.checks.violations, 0,
            "{mode}: {:?}",
            result.checks.details
        );
        assert!(result.bought > 0, "{mode}: nothing bought: {result:#?}");
        assert!(result.listed >= result.bought, "{mode}: {result:#?}");
        assert_eq!(result.wait.count, result.purchases, "{mode}");
        if mode != Mode::Watch {
            assert_eq!(result.purchase_retries, 0, "{mode} retried");
            assert_eq!(result.list_retries, 0, "{mode} retried");
            assert!(result.held_ms.is_some(), "{mode}");
        }
        // The row cleaned up after itself: data and locks.
        assert_eq!(dbsize(&server), ":0\r\n", "{mode} left keys behind");
    }
}

/// Issue 40: the locked modes with fenced writes (guarded scripts carrying each lease's
/// token) keep every invariant, write as much as the plain rows, and leave nothing behind
/// (guards included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_keep_the_invariants() {
    let server = RedisServer::start();
    for (index, mode) in [Mode::Market, Mode::Item].into_iter().enumerate() {
        let mut config = row(mode);
        config.fenced = true;
        assert!(config.label().ends_with(" + fence"), "{}", config.label());
        let prefix = format!("mp:fenced:{index}:");
        let result = run_row(&server.url(), &prefix, &config, &Stop::new())
            .await
            .unwrap_or_else(|err| panic!("{mode}: {err}"));
        assert!(result.passed(), "{mode}: {result:#?}");
        assert_eq!(
            result.checks.violations, 0,
            "{mode}: {:?}",
            result.checks.details
        );
        assert!(result.bought > 0, "{mode}: nothing bought: {result:#?}");
        assert_eq!(result.purchase_retries, 0, "{mode} retried");
        assert_eq!(dbsize(&server), ":0\r\n", "{mode} left keys behind");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_row_ends_early_and_still_checks_out() {
    let server = RedisServer::start();
    let mut config = row(Mode::Item);
    config.duration = Duration::from_secs(60);
    let stop = Stop::new();
    let stopper = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stopper.stop();
    });
    let result = run_row(&server.url(), "mp:stop:", &config, &stop)
        .await
        .expect("row");
    assert!(result.seconds < 10.0, "{}", result.seconds);
    assert!(result.passed(), "{result:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_leave_other_data_alone() {
    let server = RedisServer::start();
    server.command(&["SET", "mp:other", "keep"]);
    server.command(&["SET", "market:", "keep"]);
    let mut config = row(Mode::Market);
    config.duration = Duration::from_millis(300);
    let result = run_row(&server.url(), "mp:mine:", &config, &Stop::new())
        .await
        .expect("row");
    assert!(result.passed(), "{result:#?}");
    assert_eq!(dbsize(&server), ":2\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impossible_settings_are_refused_before_touching_redis() {
    let server = RedisServer::start();
    let mut config = row(Mode::Watch);
    config.seed.users = 3;
    let err = run_row(&server.url(), "mp:bad:", &config, &Stop::new())
        .await
        .expect_err("3 users cannot serve 5 buyers");
    assert!(err.to_string().contains("buyers"), "{err}");
    assert_eq!(dbsize(&server), ":0\r\n");
}
