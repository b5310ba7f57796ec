//! Issue 40: guarded writes to PostgreSQL (`lock_core::fenced::PgStore`, feature
//! `postgres`) against a real server the test support starts (`initdb`, `postgres` on a
//! free port). Each write is one statement whose `WHERE` carries the fencing check. The
//! tests skip, saying why, where PostgreSQL is not installed (`.ci/run` installs it).

use std::time::{Duration, Instant};

use lock_core::fenced::{Fence, FenceError, PgStore, PgTable};
use lock_core::{Lease, Locker};
use lock_tests::postgres::PostgresServer;

const SECOND: Duration = Duration::from_secs(1);

const SCHEMA: &str = "CREATE TABLE inventory (item_id text PRIMARY KEY, stock bigint NOT NULL, \
     note text, fence_token bigint, fence_lock text)";

fn server() -> Option<(PostgresServer, PgStore, PgTable)> {
    let pg = PostgresServer::start()?;
    pg.psql(SCHEMA);
    let store = PgStore::connect(&pg.url()).expect("store");
    Some((pg, store, PgTable::new("inventory", "item_id")))
}

async fn fenced(locker: &Locker, name: &str, ttl: Duration) -> Lease {
    locker
        .lock(name)
        .ttl(ttl)
        .wait(10 * SECOND)
        .fencing()
        .await
        .expect("acquire")
}

/// The pause, on PostgreSQL: the paused holder's update and upsert are refused, naming
/// both tokens; the row keeps the newer holder's stock and token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_refused_by_postgres() {
    let Some((pg, store, inventory)) = server() else {
        return;
    };
    let locker = Locker::memory();
    let paused = fenced(&locker, "item:17", Duration::from_millis(200)).await;
    store
        .upsert(&paused, &inventory, &"item:17", &[("stock", &10_i64)])
        .await
        .expect("insert");
    store
        .update(
            &paused,
            &inventory,
            &"item:17",
            &[("stock", &9_i64), ("note", &"again")],
        )
        .await
        .expect("the same lease again");
    let stale = paused.fencing_token().expect("token");

    tokio::time::sleep(Duration::from_millis(400)).await;
    let newer = fenced(&locker, "item:17", 10 * SECOND).await;
    let fresh = newer.fencing_token().expect("token");
    store
        .update(&newer, &inventory, &"item:17", &[("stock", &7_i64)])
        .await
        .expect("the newer holder writes");

    assert!(paused.is_lost());
    for refused in [
        store
            .update(&paused, &inventory, &"item:17", &[("stock", &8_i64)])
            .await,
        store
            .upsert(&paused, &inventory, &"item:17", &[("stock", &8_i64)])
            .await,
    ] {
        match refused {
            Err(FenceError::Stale {
                lock,
                resource,
                token,
                seen,
            }) => {
                assert_eq!(
                    (lock.as_str(), resource.as_str()),
                    ("item:17", "inventory[item:17]")
                );
                assert_eq!((token, seen), (stale, fresh));
            }
            other => panic!("a stale write was not refused as stale: {other:?}"),
        }
    }
    assert_eq!(
        pg.psql("SELECT stock, fence_token, fence_lock FROM inventory"),
        format!("7|{fresh}|item:17")
    );
    assert_eq!(
        store.guard(&inventory, &"item:17").await.expect("guard"),
        Some(Fence::new("item:17", fresh))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfenced_leases_other_locks_and_missing_rows_are_refused() {
    let Some((pg, store, inventory)) = server() else {
        return;
    };
    let locker = Locker::memory();
    let plain = locker.lock("a").await.expect("acquire");
    let err = store
        .upsert(&plain, &inventory, &"k", &[("stock", &1_i64)])
        .await
        .expect_err("no token");
    assert!(matches!(err, FenceError::NotFenced { .. }), "{err:?}");
    drop(plain);
    let a = fenced(&locker, "a", 10 * SECOND).await;
    let err = store
        .update(&a, &inventory, &"k", &[("stock", &1_i64)])
        .await
        .expect_err("no row");
    assert!(matches!(err, FenceError::Store { .. }), "{err:?}");
    assert_eq!(pg.psql("SELECT count(*) FROM inventory"), "0");
    store
        .upsert(&a, &inventory, &"k", &[("stock", &1_i64)])
        .await
        .expect("insert");
    let b = fenced(&locker, "b", 10 * SECOND).await;
    let err = store
        .upsert(&b, &inventory, &"k", &[("stock", &2_i64)])
        .await
        .expect_err("another lock");
    match err {
        FenceError::OtherLock {
            guarded_by, lock, ..
        } => assert_eq!((lock.as_str(), guarded_by.as_str()), ("b", "a")),
        other => panic!("{other:?}"),
    }
    assert_eq!(pg.psql("SELECT stock, fence_lock FROM inventory"), "1|a");
    // Rows written without a fence (before the guard existed) are taken over by the first
    // guarded write.
    pg.psql("INSERT INTO inventory (item_id, stock) VALUES ('old', 5)");
    store
        .update(&b, &inventory, &"old", &[("stock", &4_i64)])
        .await
        .expect("an unguarded row");
    assert_eq!(
        pg.psql("SELECT stock, fence_lock FROM inventory WHERE item_id = 'old'"),
        "4|b"
    );
}

/// PostgreSQL down or stalled: the write fails within the store's timeout and writes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_or_stalled_fails_fast() {
    let Some((mut pg, store, inventory)) = server() else {
        return;
    };
    let store = store.timeout(SECOND);
    let locker = Locker::memory();
    let lease = fenced(&locker, "d", 60 * SECOND).await;
    store
        .upsert(&lease, &inventory, &"d", &[("stock", &1_i64)])
        .await
        .expect("insert");

    pg.signal("-STOP");
    let started = Instant::now();
    let err = store
        .update(&lease, &inventory, &"d", &[("stock", &2_i64)])
        .await
        .expect_err("stalled");
    assert!(matches!(err, FenceError::Unavailable { .. }), "{err:?}");
    assert!(started.elapsed() < 5 * SECOND, "{:?}", started.elapsed());
    pg.signal("-CONT");

    pg.kill();
    let started = Instant::now();
    let err = store
        .update(&lease, &inventory, &"d", &[("stock", &3_i64)])
        .await
        .expect_err("down");
    assert!(matches!(err, FenceError::Unavailable { .. }), "{err:?}");
    assert!(started.elapsed() < 5 * SECOND, "{:?}", started.elapsed());
    pg.restart();
    let stock = pg.psql("SELECT stock FROM inventory WHERE item_id = 'd'");
    assert!(
        stock == "1" || stock == "2",
        "the stalled write applied whole or not: {stock}"
    );
}

/// Writes cut at random moments: the stock (written as the token) and the row's token
/// always agree, old or new, never half. Every tenth write is cut right after its first
/// poll (its first statement sent or queued), every tenth awaited whole: on an idle machine
/// a write takes less than the timer's 1 ms tick, so random timeouts alone once cut none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_write_leaves_the_old_or_the_new_never_half() {
    let Some((pg, store, inventory)) = server() else {
        return;
    };
    let (mut landed, mut cut) = (0, 0);
    for i in 1..=200_i64 {
        let token = 1_000_000 + i;
        let fence = Fence::new("cancel", token as u64);
        let set: [(
            &str,
            &(dyn lock_core::fenced::deadpool_postgres::tokio_postgres::types::ToSql + Sync),
        ); 2] = [("stock", &token), ("note", &"n")];
        let write = store.upsert(fence, &inventory, &"c", &set);
        let outcome = match i % 10 {
            0 => {
                let mut write = std::pin::pin!(write);
                match futures_util::poll!(write.as_mut()) {
                    std::task::Poll::Ready(done) => Some(done),
                    std::task::Poll::Pending => None,
                }
            }
            5 => Some(write.await),
            _ => {
                let wait = Duration::from_micros(fastrand::u64(0..3000));
                tokio::time::timeout(wait, write).await.ok()
            }
        };
        match outcome {
            Some(done) => {
                done.expect("write");
                landed += 1;
            }
            None => cut += 1,
        }
        if i % 20 == 0 {
            let row = pg.psql("SELECT stock, fence_token FROM inventory WHERE item_id = 'c'");
            if let Some((stock, token)) = row.split_once('|') {
                assert_eq!(
                    stock, token,
                    "the data and its guard disagree after write {i}"
                );
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let row = pg.psql("SELECT stock, fence_token FROM inventory WHERE item_id = 'c'");
    let (stock, token) = row.split_once('|').expect("one row");
    assert_eq!(stock, token, "the data and its guard disagree");
    assert!(cut > 0 && landed > 0, "{cut} cut, {landed} landed");
}
