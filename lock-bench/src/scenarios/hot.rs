//! S3: N contenders on ONE name, each holding it about 1 ms: throughput, hand-off gap,
//! fairness, barging and Redis calls per acquisition.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::contenders::Contender;
use crate::stats::Samples;

const TTL: Duration = Duration::from_secs(5);
const HOLD: Duration = Duration::from_millis(1);

/// S3 figures of one run.
#[derive(Debug, Clone, Copy)]
pub struct HotFigures {
    pub acquisitions_per_s: f64,
    pub handoff_p50_us: f64,
    pub handoff_p99_us: f64,
    /// Share of acquisitions by the contender that held the lock just before.
    pub self_reacquire: f64,
    /// Jain's fairness index of acquisitions across contenders (1 = perfectly even).
    pub jain: f64,
    pub redis_calls_per_acquisition: f64,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Acquired { who: usize, at: Instant },
    Releasing { who: usize, at: Instant },
}

/// Runs `contenders.len()` loops on one name. Pass the same contender several times to
/// share it (tasks of one process), or distinct ones (separate processes).
pub async fn s3<C: Contender>(
    contenders: Vec<Arc<C>>,
    run_for: Duration,
    probe: &mut redis::aio::MultiplexedConnection,
) -> HotFigures {
    let n = contenders.len();
    let events = Arc::new(Mutex::new(Vec::with_capacity(100_000)));
    let calls_before = total_calls(probe).await;
    let breakdown_before = command_calls(probe).await;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for (who, contender) in contenders.into_iter().enumerate() {
        let events = events.clone();
        tasks.push(tokio::spawn(async move {
            while started.elapsed() < run_for {
                let Some(held) = contender
                    .lock_wait("hot", TTL, Duration::from_secs(10))
                    .await
                else {
                    continue;
                };
                let at = Instant::now();
                tokio::time::sleep(HOLD).await;
                let releasing = Instant::now();
                if let Ok(mut log) = events.lock() {
                    log.push(Event::Acquired { who, at });
                    log.push(Event::Releasing { who, at: releasing });
                }
                contender.release(held).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let calls = total_calls(probe).await.saturating_sub(calls_before);
    if std::env::var_os("LOCK_BENCH_COMMANDSTATS").is_some() {
        let after = command_calls(probe).await;
        let mut delta: Vec<(String, u64)> = after
            .into_iter()
            .map(|(name, n)| {
                let before = breakdown_before
                    .iter()
                    .find(|(b, _)| *b == name)
                    .map_or(0, |(_, b)| *b);
                (name, n - before)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        delta.sort();
        eprintln!("commandstats delta (N={n}): {delta:?}");
    }
    let mut log = std::mem::take(&mut *events.lock().unwrap_or_else(|e| e.into_inner()));
    log.sort_by_key(|event| match event {
        Event::Acquired { at, .. } | Event::Releasing { at, .. } => *at,
    });
    summarize(&log, n, elapsed, calls)
}

fn summarize(log: &[Event], n: usize, elapsed: f64, calls: u64) -> HotFigures {
    let mut per_contender = vec![0u64; n];
    let mut gaps = Samples::default();
    let mut last_release: Option<(usize, Instant)> = None;
    let mut self_reacquires = 0u64;
    let mut acquisitions = 0u64;
    for event in log {
        match *event {
            Event::Acquired { who, at } => {
                acquisitions += 1;
                per_contender[who] += 1;
                if let Some((previous, released)) = last_release {
                    if previous == who {
                        self_reacquires += 1;
                    } else {
                        gaps.0
                            .push(at.saturating_duration_since(released).as_nanos() as u64);
                    }
                }
            }
            Event::Releasing { who, at } => last_release = Some((who, at)),
        }
    }
    let sum: f64 = per_contender.iter().map(|&x| x as f64).sum();
    let sum_sq: f64 = per_contender.iter().map(|&x| (x as f64).powi(2)).sum();
    HotFigures {
        acquisitions_per_s: acquisitions as f64 / elapsed,
        handoff_p50_us: gaps.quantile_us(0.50),
        handoff_p99_us: gaps.quantile_us(0.99),
        self_reacquire: self_reacquires as f64 / acquisitions.max(1) as f64,
        jain: if sum_sq > 0.0 {
            sum * sum / (n as f64 * sum_sq)
        } else {
            f64::NAN
        },
        redis_calls_per_acquisition: calls as f64 / acquisitions.max(1) as f64,
    }
}

/// `calls=` per command from INFO commandstats (which counts the calls scripts make too).
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection) -> Vec<(String, u64)> {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap_or_default();
    stats
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// The sum of `calls=` over INFO commandstats, which counts the calls scripts make too.
pub async fn total_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap_or_default();
    stats
        .lines()
        .filter(|line| line.starts_with("cmdstat_") && !line.starts_with("cmdstat_info:"))
        .filter_map(|line| line.split("calls=").nth(1))
        .filter_map(|rest| rest.split(',').next())
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}
