//! A job scheduled on several replicas, run once per tick.
//!
//! Four replicas (each its own `Locker`, as separate processes have) run the same job every
//! second on a plain `tokio::time::interval`. Their timers are offset by up to 290 ms, as
//! the clocks of separate hosts are, and the job takes 20 ms: far less than the offsets.
//!
//! - With a minimum hold (`hold_at_least`, 800 ms), the first replica to fire runs the tick
//!   and its lock stays until 800 ms after its start; the others find it taken and skip
//!   (`Tick::Skipped`): each tick runs once.
//! - Without it, the first replica's lock is gone 20 ms later, and a later replica runs the
//!   same tick again: the classic bug this example exists to show.
//!
//! Run: `cargo run -p scheduled-jobs` (uses `REDIS_URL`, a Redis on 127.0.0.1:6379, or a
//! private `redis-server` it starts). Exits non-zero if a tick with the minimum hold ran
//! other than once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockError, Locker, Tick};
use lock_tests::discover;

const PERIOD: Duration = Duration::from_secs(1);
const HOLD_AT_LEAST: Duration = Duration::from_millis(800);
const JOB_TAKES: Duration = Duration::from_millis(20);
const OFFSETS_MS: [u64; 4] = [0, 70, 160, 290];
const TICKS: u32 = 5;

/// Which replicas ran each tick.
type Runs = Arc<Mutex<BTreeMap<u32, Vec<usize>>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut target = discover::discover().await?;
    println!("Redis: {}", target.describe());

    let with_hold = schedule(target.url(), Some(HOLD_AT_LEAST), "jobs:digest").await?;
    let without = schedule(target.url(), None, "jobs:digest-no-hold").await?;
    target.stop();

    println!("\nticks run by replica (timers offset by {OFFSETS_MS:?} ms, job {JOB_TAKES:?}):");
    println!("tick | with hold_at_least = {HOLD_AT_LEAST:?} | without a minimum hold");
    let mut once = true;
    for tick in 0..TICKS {
        let held = with_hold.get(&tick).cloned().unwrap_or_default();
        let bare = without.get(&tick).cloned().unwrap_or_default();
        once &= held.len() == 1;
        let (held_text, bare_text) = (format!("{held:?}"), format!("{bare:?}"));
        println!("{tick:>4} | {held_text:<32} | {bare_text}");
    }
    if once {
        println!("\nwith the minimum hold, every tick ran exactly once");
        Ok(())
    } else {
        Err("a tick ran other than once with the minimum hold".into())
    }
}

/// Runs the schedule on every replica and returns who ran which tick.
async fn schedule(
    url: &str,
    hold: Option<Duration>,
    job: &'static str,
) -> Result<BTreeMap<u32, Vec<usize>>, LockError> {
    let runs: Runs = Arc::default();
    let start = tokio::time::Instant::now() + Duration::from_millis(200);
    let mut replicas = Vec::new();
    for (replica, offset) in OFFSETS_MS.into_iter().enumerate() {
        let locker = Locker::builder()
            .url(url)
            .app_name(format!("replica-{replica}"))
            .build()?;
        let runs = Arc::clone(&runs);
        replicas.push(tokio::spawn(async move {
            // This replica's clock: its ticks fire `offset` later than the first one's.
            let mut timer = tokio::time::interval_at(start + Duration::from_millis(offset), PERIOD);
            for tick in 0..TICKS {
                timer.tick().await;
                let mut request = locker.lock(job).ttl(Duration::from_secs(30));
                if let Some(hold) = hold {
                    request = request.hold_at_least(hold);
                }
                let runs = Arc::clone(&runs);
                let outcome = request
                    .run_once(|_lease| async move {
                        tokio::time::sleep(JOB_TAKES).await;
                        runs.lock()
                            .map_err(|_| poisoned(job))?
                            .entry(tick)
                            .or_default()
                            .push(replica);
                        Ok::<_, LockError>(())
                    })
                    .await;
                match outcome {
                    Ok(Tick::Ran(())) => {}
                    Ok(Tick::Skipped { .. }) => {} // another replica has this tick
                    Err(err) => eprintln!("replica {replica}, tick {tick}: {err}"),
                }
            }
            locker.shutdown(Duration::from_secs(5)).await;
        }));
    }
    for replica in replicas {
        if let Err(err) = replica.await {
            eprintln!("a replica panicked: {err}");
        }
    }
    let runs = runs.lock().map_err(|_| poisoned(job))?.clone();
    Ok(runs)
}

fn poisoned(job: &str) -> LockError {
    LockError::Config(format!(
        "the record of `{job}`'s runs was poisoned by a panic"
    ))
}
