//! S2's shape without the rest of lock-bench, for a profiler: `TASKS` tasks of one process
//! on a two-worker runtime (`WORKERS=1` in the environment for one worker), each locking
//! and releasing its own name in a loop for `SECONDS`, through one contender only
//! (lock-bench alternates contenders in one process, so a profile of it mixes them). Prints
//! the cycles per second, and the cycles in all (warm-up included): under callgrind, the
//! difference of two runs' counts over the difference of their cycles is one cycle's cost
//! with 64 tasks interleaved (`--cache-sim=yes` adds the simulated cache misses).
//!
//! ```sh
//! cargo build --profile profiling -p lock-bench --example throughput_loop
//! perf record -g -o /tmp/locker.data \
//!     target/profiling/examples/throughput_loop locker 5 64 redis://127.0.0.1:6390/
//! ```
//!
//! `raw` is lock-bench's floor (`SET NX PX`, then `EVALSHA` of a compare-and-delete, on one
//! multiplexed redis-rs connection); `raw-bounded` the same with each command bounded by
//! a response timeout, as a Locker's are; `locker` is `Locker::from_url` and
//! `locker.lock(name).ttl(..)`, as a user writes it; `untracked` the same with
//! `track_keys(false)`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/raw.rs"]
mod raw;

const TTL: Duration = Duration::from_secs(10);

type Failure = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Failure> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: throughput_loop raw|raw-bounded|locker|untracked SECONDS TASKS [REDIS_URL]";
    let contender = args.next().ok_or(usage)?;
    let seconds: f64 = args.next().ok_or(usage)?.parse()?;
    let tasks: usize = args.next().ok_or(usage)?.parse()?;
    let url = args
        .next()
        .unwrap_or_else(|| lock_core::DEFAULT_REDIS_URL.to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers()?)
        .enable_all()
        .build()?;
    runtime.block_on(run(contender, Duration::from_secs_f64(seconds), tasks, url))
}

/// The runtime's worker threads: 2 (S2's), or `WORKERS` from the environment.
fn workers() -> Result<usize, Failure> {
    match std::env::var("WORKERS") {
        Ok(workers) => Ok(workers.parse()?),
        Err(_) => Ok(2),
    }
}

async fn run(
    contender: String,
    run_for: Duration,
    tasks: usize,
    url: String,
) -> Result<(), Failure> {
    let cycles = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::with_capacity(tasks);
    match contender.as_str() {
        "locker" | "untracked" => {
            let locker = lock_core::Locker::builder()
                .url(url)
                .track_keys(contender == "locker")
                .build()?;
            for task in 0..tasks {
                let (locker, cycles, stop) = (locker.clone(), cycles.clone(), stop.clone());
                handles.push(tokio::spawn(async move {
                    let name = format!("t{task}");
                    while !stop.load(Ordering::Relaxed) {
                        let lease = locker.lock(name.as_str()).ttl(TTL).await?;
                        if !lease.release().await? {
                            return Err::<(), Failure>("a lease was lost".into());
                        }
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                }));
            }
        }
        "raw" | "raw-bounded" => {
            let client = redis::Client::open(url.as_str())?;
            // `raw-bounded`: each command bounded as the Locker's are (a response timeout
            // of the Locker's default command timeout, one timer per command).
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(
                (contender == "raw-bounded").then_some(Duration::from_secs(3)),
            );
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            let release = Arc::new(raw::release_script());
            for task in 0..tasks {
                let (mut conn, release) = (conn.clone(), release.clone());
                let (cycles, stop) = (cycles.clone(), stop.clone());
                handles.push(tokio::spawn(async move {
                    let key = format!("lock:{{t{task}}}");
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let token = format!("{task:08x}{i:024x}");
                        raw::cycle(&mut conn, &release, &key, &token, TTL).await?;
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                }));
            }
        }
        other => return Err(format!("unknown contender {other:?}").into()),
    }
    // Counted after a warm-up: connections opened, scripts loaded.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    let warm = cycles.load(Ordering::Relaxed);
    tokio::time::sleep(run_for).await;
    let done = cycles.load(Ordering::Relaxed) - warm;
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await??;
    }
    // The cycles in all (warm-up included): two runs of different lengths under callgrind
    // give one cycle's cost as the difference of their counts over the difference of these.
    println!(
        "{contender}: {:.0} cycles/s over {:.1} s ({} cycles in all)",
        done as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        cycles.load(Ordering::Relaxed)
    );
    Ok(())
}
