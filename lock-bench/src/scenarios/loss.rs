//! Loss detection: how long after a foreign `DEL` of a held lock's key its holder's
//! `lost()` fires, with key tracking (the default) and with renewal-time detection only
//! (`track_keys(false)`), both with auto-renewal at the renewal scenario's TTL.
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

async fn sample(
    locker: &Locker,
    conn: &mut redis::aio::MultiplexedConnection,
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
    let deleted: u64 = redis::cmd("DEL")
        .arg(lease.key())
        .query_async(conn)
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

async fn measure(url: &str, track: bool, ttl: Duration, samples: usize) -> Result<Row, String> {
    let locker = Locker::builder()
        .url(url)
        .prefix("loss-bench:")
        .track_keys(track)
        .build()
        .map_err(|err| err.to_string())?;
    let client = redis::Client::open(url).map_err(|err| err.to_string())?;
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| err.to_string())?;
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
            "key tracking (default)".into()
        } else {
            "renewal only (track_keys(false))".into()
        },
        samples: latencies.len(),
        p50_ms: percentile(0.50),
        p99_ms: percentile(0.99),
        max_ms: latencies.last().copied().unwrap_or(f64::NAN),
        missed,
        false_losses,
    })
}

/// Both modes on the Redis at `url`.
pub async fn run(url: &str, ttl: Duration, samples: usize) -> Result<Table, String> {
    let mut rows = Vec::new();
    for track in [true, false] {
        rows.push(measure(url, track, ttl, samples).await?);
    }
    Ok(Table {
        ttl_ms: ttl.as_millis() as u64,
        rows,
    })
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| detection | samples | DEL → lost() p50 ms | p99 ms | max ms | not told within 5 s | untouched leases told lost |\n|---|---|---|---|---|---|---|\n",
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
