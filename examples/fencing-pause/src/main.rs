//! The pause that fencing exists for, shown and counted.
//!
//! ```sh
//! cargo run --release -p fencing-pause                 # 1,000 pauses per row, Redis and PostgreSQL
//! cargo run --release -p fencing-pause -- --pauses 5000 --ttl-ms 50
//! ```
//!
//! Each pause: holder A (one Locker, its own connection) takes lock `pause:<n>` with a
//! fencing token, reads a counter, and stalls. Holder B (another Locker, as another
//! process would have) waits for the lock, gets it once A's TTL has run out, reads the
//! counter, writes it plus one, and releases. A wakes and writes what it read plus one.
//!
//! - With **plain writes** A's stale write lands: B's increment is lost.
//! - With **guarded writes** (`lock_core::fenced`) A's write is refused with
//!   `FenceError::Stale`, which names A's token and B's; A takes the lock again, re-reads and
//!   writes. Nothing is lost.
//!
//! Every counter should end at 2. The table counts, per store and kind of write, the stale
//! writes that landed, the increments lost, and the refusals that named exactly A's and B's
//! tokens. Redis: `$REDIS_URL`, `127.0.0.1:6379`, or a private `redis-server`. PostgreSQL:
//! `$PG_URL`, or a private server (`initdb` and `postgres` from `/usr/lib/postgresql/*/bin`);
//! without either the PostgreSQL rows are skipped. Exits 1 if a guarded row lost anything.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::fenced::deadpool_postgres::tokio_postgres;
use lock_core::fenced::{FenceError, PgStore, PgTable, RedisStore};
use lock_core::{Lease, Locker};
use lock_tests::postgres::PostgresServer;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Settings {
    pauses: u64,
    ttl: Duration,
    concurrency: u64,
}

fn settings() -> Result<Settings, String> {
    let mut settings = Settings {
        pauses: 1000,
        ttl: Duration::from_millis(100),
        concurrency: 25,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut number = || -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag} takes a positive number"))
        };
        match flag.as_str() {
            "--pauses" => settings.pauses = number()?,
            "--ttl-ms" => settings.ttl = Duration::from_millis(number()?),
            "--concurrency" => settings.concurrency = number()?,
            other => {
                return Err(format!(
                    "unknown argument {other}; use --pauses N, --ttl-ms N, --concurrency N"
                ))
            }
        }
    }
    Ok(settings)
}

/// Where the counters live, written plainly or guarded.
#[derive(Clone)]
enum Store {
    Redis {
        conn: redis::aio::MultiplexedConnection,
        fenced: RedisStore,
    },
    Postgres {
        client: Arc<tokio_postgres::Client>,
        fenced: PgStore,
        table: PgTable,
    },
}

impl Store {
    fn name(&self) -> &'static str {
        match self {
            Store::Redis { .. } => "redis",
            Store::Postgres { .. } => "postgres",
        }
    }

    async fn read(&self, key: &str) -> Result<i64, Error> {
        Ok(match self {
            Store::Redis { conn, .. } => {
                let value: Option<i64> = redis::cmd("GET")
                    .arg(key)
                    .query_async(&mut conn.clone())
                    .await?;
                value.unwrap_or(0)
            }
            Store::Postgres { client, .. } => client
                .query_opt("SELECT count FROM pause_counts WHERE name = $1", &[&key])
                .await?
                .map_or(0, |row| row.get(0)),
        })
    }

    /// Writes `value` for `lease`: plainly, or guarded by its token.
    async fn write(
        &self,
        guarded: bool,
        lease: &Lease,
        key: &str,
        value: i64,
    ) -> Result<(), WriteError> {
        match (self, guarded) {
            (Store::Redis { fenced, .. }, true) => fenced.set(lease, key, value).await?,
            (Store::Redis { conn, .. }, false) => redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query_async::<()>(&mut conn.clone())
                .await
                .map_err(|err| WriteError::Other(err.into()))?,
            (Store::Postgres { fenced, table, .. }, true) => {
                fenced
                    .upsert(lease, table, &key, &[("count", &value)])
                    .await?;
            }
            (Store::Postgres { client, .. }, false) => {
                client
                    .execute(
                        "INSERT INTO pause_counts (name, count) VALUES ($1, $2) \
                         ON CONFLICT (name) DO UPDATE SET count = EXCLUDED.count",
                        &[&key, &value],
                    )
                    .await
                    .map_err(|err| WriteError::Other(err.into()))?;
            }
        }
        Ok(())
    }
}

enum WriteError {
    Fence(FenceError),
    Other(Error),
}

impl From<FenceError> for WriteError {
    fn from(err: FenceError) -> WriteError {
        WriteError::Fence(err)
    }
}

#[derive(Default)]
struct Counts {
    stale_landed: AtomicU64,
    refused: AtomicU64,
    told_why: AtomicU64,
    lost: AtomicU64,
}

/// One pause on `name`: A reads and stalls, B takes over and writes, A wakes and writes.
async fn pause(
    (a, b): (&Locker, &Locker),
    store: &Store,
    guarded: bool,
    name: &str,
    ttl: Duration,
    counts: &Counts,
) -> Result<(), Error> {
    let key = format!("{name}:count");
    let paused = a.lock(name).ttl(ttl).fencing().await?;
    let read = store.read(&key).await?;
    // A stalls (a GC pause, a stopped VM) for as long as B needs: B waits for the lock,
    // which A never releases, until A's TTL runs out.
    let newer = b
        .lock(name)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10))
        .fencing()
        .await?;
    let seen = store.read(&key).await?;
    store
        .write(guarded, &newer, &key, seen + 1)
        .await
        .map_err(|err| match err {
            WriteError::Fence(err) => err.into(),
            WriteError::Other(err) => err,
        })?;
    let fresh = newer.fencing_token();
    newer.release().await?;
    // A wakes, trusting what it read.
    match store.write(guarded, &paused, &key, read + 1).await {
        Ok(()) => {
            counts.stale_landed.fetch_add(1, Ordering::Relaxed);
        }
        Err(WriteError::Fence(err)) => {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            if let FenceError::Stale { token, seen, .. } = &err {
                if Some(*token) == paused.fencing_token() && Some(*seen) == fresh {
                    counts.told_why.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Told why: it takes the lock again, re-reads, and writes under the new lease.
            drop(paused);
            let again = a
                .lock(name)
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(10))
                .fencing()
                .await?;
            let now = store.read(&key).await?;
            store
                .write(guarded, &again, &key, now + 1)
                .await
                .map_err(|err| match err {
                    WriteError::Fence(err) => Error::from(err),
                    WriteError::Other(err) => err,
                })?;
            again.release().await?;
        }
        Err(WriteError::Other(err)) => return Err(err),
    }
    let total = store.read(&key).await?;
    if total < 2 {
        counts.lost.fetch_add(2 - total as u64, Ordering::Relaxed);
    }
    Ok(())
}

async fn row(
    lockers: (&Locker, &Locker),
    store: &Store,
    guarded: bool,
    settings: &Settings,
    run: &str,
) -> Result<(Counts, Duration), Error> {
    let counts = Counts::default();
    let started = Instant::now();
    let kind = if guarded { "g" } else { "p" };
    let mut next = 0;
    while next < settings.pauses {
        let batch = (next..settings.pauses.min(next + settings.concurrency)).map(|i| {
            let name = format!("pause:{run}:{}:{kind}:{i}", store.name());
            let counts = &counts;
            async move { pause(lockers, store, guarded, &name, settings.ttl, counts).await }
        });
        for result in futures_util::future::join_all(batch).await {
            result?;
        }
        next += settings.concurrency;
    }
    Ok((counts, started.elapsed()))
}

#[tokio::main]
async fn main() -> ExitCode {
    let settings = match settings() {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    match demonstrate(&settings).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

async fn demonstrate(settings: &Settings) -> Result<bool, Error> {
    let mut redis_target = lock_tests::discover::discover().await?;
    eprintln!("Redis: {}", redis_target.describe());
    let url = redis_target.url().to_owned();
    let locker = |app: &str| Locker::builder().url(&url).app_name(app).build();
    let (a, b) = (locker("paused-holder")?, locker("newer-holder")?);
    let conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let mut stores = vec![Store::Redis {
        conn,
        fenced: RedisStore::of(&a)?,
    }];

    let private_pg;
    let pg_url = match std::env::var("PG_URL") {
        Ok(url) => Some(url),
        Err(_) => {
            private_pg = tokio::task::spawn_blocking(PostgresServer::start).await?;
            private_pg.as_ref().map(PostgresServer::url)
        }
    };
    if let Some(pg_url) = &pg_url {
        let (client, connection) = tokio_postgres::connect(pg_url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS pause_counts (name text PRIMARY KEY, \
                 count bigint NOT NULL, fence_token bigint, fence_lock text)",
            )
            .await?;
        stores.push(Store::Postgres {
            client: Arc::new(client),
            fenced: PgStore::connect(pg_url)?,
            table: PgTable::new("pause_counts", "name"),
        });
    } else {
        eprintln!("PostgreSQL: none (set PG_URL, or install PostgreSQL): its rows are skipped");
    }

    let run = format!("{:x}", std::process::id());
    println!(
        "{} pauses per row, lock TTL {:?}, {} at a time: holder A reads and stalls past its TTL, \
         holder B takes the lock and writes +1, A wakes and writes +1",
        settings.pauses, settings.ttl, settings.concurrency
    );
    println!(
        "{:<9} {:<8} {:>8} {:>14} {:>13} {:>9} {:>13} {:>7}",
        "store",
        "writes",
        "pauses",
        "stale landed",
        "lost updates",
        "refused",
        "told tokens",
        "secs"
    );
    let mut safe = true;
    for store in &stores {
        for guarded in [false, true] {
            let (counts, took) = row((&a, &b), store, guarded, settings, &run).await?;
            let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
            println!(
                "{:<9} {:<8} {:>8} {:>14} {:>13} {:>9} {:>13} {:>7.1}",
                store.name(),
                if guarded { "guarded" } else { "plain" },
                settings.pauses,
                load(&counts.stale_landed),
                load(&counts.lost),
                load(&counts.refused),
                load(&counts.told_why),
                took.as_secs_f64()
            );
            if guarded
                && (load(&counts.stale_landed) > 0
                    || load(&counts.lost) > 0
                    || load(&counts.told_why) != settings.pauses)
            {
                safe = false;
            }
        }
    }
    // What the rows wrote: counters, their guards, and the locks' fencing counters.
    for store in &stores {
        store.clean(&run).await?;
    }
    redis_target.stop();
    Ok(safe)
}

impl Store {
    /// Deletes this run's keys (`SCAN` + `UNLINK`) or rows; nothing else is touched.
    async fn clean(&self, run: &str) -> Result<(), Error> {
        match self {
            Store::Redis { conn, .. } => {
                let mut conn = conn.clone();
                let mut cursor = 0u64;
                loop {
                    let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(format!("*pause:{run}:*"))
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await?;
                    if !keys.is_empty() {
                        redis::cmd("UNLINK")
                            .arg(&keys)
                            .query_async::<()>(&mut conn)
                            .await?;
                    }
                    if next == 0 {
                        return Ok(());
                    }
                    cursor = next;
                }
            }
            Store::Postgres { client, .. } => {
                client
                    .execute(
                        "DELETE FROM pause_counts WHERE name LIKE $1",
                        &[&format!("pause:{run}:%")],
                    )
                    .await?;
                Ok(())
            }
        }
    }
}
