//! S1 (one task, lock+release in a loop: latency) and S2 (many tasks on distinct names:
//! throughput).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contenders::Contender;
use crate::scenarios::commands_processed;
use crate::stats::Samples;

const TTL: Duration = Duration::from_secs(10);

/// S1 figures of one run.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub cycles_per_s: f64,
}

pub async fn s1<C: Contender>(contender: &C, run_for: Duration) -> Latency {
    let mut samples = Samples(Vec::with_capacity(100_000));
    let started = Instant::now();
    let mut failures = 0u64;
    while started.elapsed() < run_for {
        let t0 = Instant::now();
        match contender.try_lock("s1", TTL).await {
            Some(held) => contender.release(held).await,
            None => failures += 1,
        }
        samples.0.push(t0.elapsed().as_nanos() as u64);
    }
    if failures > 0 {
        eprintln!(
            "warning: {} failed {failures} uncontended acquires",
            contender.label()
        );
    }
    let cycles = samples.0.len() as f64;
    Latency {
        p50_us: samples.quantile_us(0.50),
        p99_us: samples.quantile_us(0.99),
        cycles_per_s: cycles / started.elapsed().as_secs_f64(),
    }
}

/// S2 figures of one run.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    pub cycles_per_s: f64,
    pub redis_commands_per_s: f64,
}

pub async fn s2<C: Contender>(
    contender: Arc<C>,
    tasks: usize,
    run_for: Duration,
    probe: &mut redis::aio::MultiplexedConnection,
) -> Throughput {
    let cycles = Arc::new(AtomicU64::new(0));
    let before = commands_processed(probe).await;
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let contender = contender.clone();
        let cycles = cycles.clone();
        handles.push(tokio::spawn(async move {
            let name = format!("s2:{task}");
            let mut done = 0;
            while started.elapsed() < run_for {
                if let Some(held) = contender.try_lock(&name, TTL).await {
                    contender.release(held).await;
                    done += 1;
                }
            }
            cycles.fetch_add(done, Ordering::Relaxed);
        }));
    }
    for handle in handles {
        let _ = handle.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    // The INFO call itself counts as one command; negligible.
    let after = commands_processed(probe).await;
    Throughput {
        cycles_per_s: cycles.load(Ordering::Relaxed) as f64 / elapsed,
        redis_commands_per_s: after.saturating_sub(before) as f64 / elapsed,
    }
}
