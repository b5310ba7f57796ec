//! Loss detection: how long after a foreign `DEL` of a held lock's key its holder's
//! `lost()` fires, with key tracking (the default) and with renewal-time detection only
//! (`track_keys(false)`), both with auto-renewal at the renewal scenario's TTL, on one
//! Redis; and with key tracking on the master a Sentinel names and on a 3-master Cluster,
//! when those could be started (the `DEL` sent to the key's master).
//!
//! Each sample: take a lease (auto-renewed), wait a random part of a renewal period (so
//! the deletes fall anywhere between two renewals), delete the key from another
//! connection, and time from the `DEL`'s reply to `lost()`. The samples of one mode run
//! as concurrent tasks, a few at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::Locker;
use serde::Serialize;
use tokio::sync::Semaphore;

/// Samples per mode (a tenth with `--smoke`).
pub const SAMPLES: usize = 200;
/// Samples in flight at once.
const CONCURRENT: usize = 20;

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub mode: String,
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Leases whose `lost()` had not fired 5 s after the delete (never, with tracking).
    pub missed: usize,
    /// Leases told lost although nobody touched their key (held one more renewal period
    /// after the others' deletes).
    pub false_losses: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub ttl_ms: u64,
    pub rows: Vec<Row>,
}

pub fn title(t: &Table) -> String {
    format!(
        "Loss detection: a foreign DEL of a held key to the holder's lost() (auto-renewed, TTL {} ms, renewed every TTL/3)",
        t.ttl_ms
    )
}

/// Where the lockers of one row take their leases.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    One(&'a str),
    /// A Sentinel's URL and the master's name.
    Sentinel(&'a str, &'a str),
    /// The seeds of a Cluster.
    Cluster(&'a [String]),
}

impl Target<'_> {
    fn label(&self) -> &'static str {
        match self {
            Target::One(_) => "one Redis",
            Target::Sentinel(..) => "Sentinel 1+1",
            Target::Cluster(_) => "Cluster 3+1",
        }
    }

    fn locker(&self, track: bool) -> Result<Locker, String> {
        let builder = Locker::builder().prefix("loss-bench:").track_keys(track);
        let builder = match *self {
            Target::One(url) => builder.url(url),
            Target::Sentinel(sentinel, master) => builder.sentinel([sentinel.to_owned()], master),
            Target::Cluster(seeds) => builder.cluster(seeds.iter().cloned()),
        };
        builder.build().map_err(|err| err.to_string())
    }

    /// A connection that deletes keys where they are (on the master).
    async fn deleter(&self) -> Result<Deleter, String> {
        let plain = |url: &str| {
            let url = url.to_owned();
            async move {
                let client = redis::Client::open(url).map_err(|err| err.to_string())?;
                client
                    .get_multiplexed_async_connection()
                    .await
                    .map(Deleter::Plain)
                    .map_err(|err| err.to_string())
            }
        };
        match *self {
            Target::One(url) => plain(url).await,
            Target::Sentinel(sentinel, master) => {
                let Deleter::Plain(mut conn) = plain(sentinel).await? else {
                    return Err("a Sentinel connection".into());
                };
                let (host, port): (String, u16) = redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(master)
                    .query_async(&mut conn)
                    .await
                    .map_err(|err| err.to_string())?;
                plain(&format!("redis://{host}:{port}/")).await
            }
            Target::Cluster(seeds) => {
                let client = redis::cluster::ClusterClient::new(seeds.to_vec())
                    .map_err(|err| err.to_string())?;
                client
                    .get_async_connection()
                    .await
                    .map(Deleter::Cluster)
                    .map_err(|err| err.to_string())
            }
        }
    }
}

#[derive(Clone)]
enum Deleter {
    Plain(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Deleter {
    async fn del(&mut self, key: &str) -> redis::RedisResult<u64> {
        let mut del = redis::cmd("DEL");
        del.arg(key);
        match self {
            Deleter::Plain(conn) => del.query_async(conn).await,
            Deleter::Cluster(conn) => del.query_async(conn).await,
        }
    }
}

async fn sample(
    locker: &Locker,
    conn: &mut Deleter,
    name: String,
    ttl: Duration,
) -> Result<Option<Duration>, String> {
    let lease = locker
        .lock(name)
        .ttl(ttl)
        .auto_renew()
        .await
        .map_err(|err| format!("acquire: {err}"))?;
    // Anywhere between two renewals (and past the registering read).
    let period = ttl / 3;
    let pause = period
        .mul_f64(fastrand::f64())
        .max(Duration::from_millis(10));
    tokio::time::sleep(pause).await;
    let deleted = conn
        .del(lease.key())
        .await
        .map_err(|err| format!("DEL: {err}"))?;
    let deleted_at = Instant::now();
    if deleted != 1 {
        return Err("the key was already gone".into());
    }
    let told = tokio::time::timeout(Duration::from_secs(5), lease.lost()).await;
    let latency = told.is_ok().then(|| deleted_at.elapsed());
    let _ = lease.release().await;
    Ok(latency)
}

async fn measure(
    target: Target<'_>,
    track: bool,
    ttl: Duration,
    samples: usize,
) -> Result<Row, String> {
    let locker = target.locker(track)?;
    let conn = target.deleter().await?;
    // Leases nobody touches, held throughout: none may be told lost.
    let mut bystanders = Vec::new();
    for i in 0..CONCURRENT {
        bystanders.push(
            locker
                .lock(format!("bystander:{track}:{i}"))
                .ttl(ttl)
                .auto_renew()
                .await
                .map_err(|err| format!("acquire: {err}"))?,
        );
    }
    let gate = Arc::new(Semaphore::new(CONCURRENT));
    let mut tasks = Vec::new();
    for i in 0..samples {
        let permit = Arc::clone(&gate)
            .acquire_owned()
            .await
            .map_err(|err| err.to_string())?;
        let locker = locker.clone();
        let mut conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let result = sample(&locker, &mut conn, format!("sample:{track}:{i}"), ttl).await;
            drop(permit);
            result
        }));
    }
    let mut latencies = Vec::new();
    let mut missed = 0;
    for task in tasks {
        match task.await.map_err(|err| err.to_string())?? {
            Some(latency) => latencies.push(latency.as_secs_f64() * 1000.0),
            None => missed += 1,
        }
    }
    tokio::time::sleep(ttl / 3).await;
    let false_losses = bystanders.iter().filter(|lease| lease.is_lost()).count();
    for lease in bystanders {
        let _ = lease.release().await;
    }
    latencies.sort_by(f64::total_cmp);
    let percentile = |q: f64| {
        if latencies.is_empty() {
            return f64::NAN;
        }
        let index = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies[index.min(latencies.len() - 1)]
    };
    Ok(Row {
        mode: if track {
            format!("{}, key tracking (default)", target.label())
        } else {
            format!("{}, renewal only (track_keys(false))", target.label())
        },
        samples: latencies.len(),
        p50_ms: percentile(0.50),
        p99_ms: percentile(0.99),
        max_ms: latencies.last().copied().unwrap_or(f64::NAN),
        missed,
        false_losses,
    })
}

/// Both modes on the Redis at `url`; key tracking on the other `targets` (a row each, or
/// the reason it could not be measured).
pub async fn run(
    url: &str,
    targets: &[Target<'_>],
    ttl: Duration,
    samples: usize,
) -> Result<(Table, Vec<String>), String> {
    let mut rows = Vec::new();
    for track in [true, false] {
        rows.push(measure(Target::One(url), track, ttl, samples).await?);
    }
    let mut problems = Vec::new();
    for target in targets {
        match measure(*target, true, ttl, samples).await {
            Ok(row) => rows.push(row),
            Err(err) => problems.push(format!("loss detection on {}: {err}", target.label())),
        }
    }
    Ok((
        Table {
            ttl_ms: ttl.as_millis() as u64,
            rows,
        },
        problems,
    ))
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| where, detection | samples | DEL → lost() p50 ms | p99 ms | max ms | not told within 5 s | untouched leases told lost |\n|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {} | {} |\n",
                row.mode,
                row.samples,
                row.p50_ms,
                row.p99_ms,
                row.max_ms,
                row.missed,
                row.false_losses
            ));
        }
        out
    }
}
