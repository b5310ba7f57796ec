//! `N` uncontended lock-and-release cycles on one task of a current-thread runtime, for
//! counting the client's instructions per cycle with callgrind (a count, not a time: the
//! same whatever else the machine does). Run it twice, with two values of `N`, and divide
//! the difference by the difference of `N`: what is left is the cost of one cycle, without
//! start-up. BENCHMARKS.md ("Client instructions per cycle") has the commands.
//!
//! ```sh
//! cargo build --release -p lock-bench --example uncontended_cycles
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/uncontended_cycles locker 2000 redis://127.0.0.1:6379/
//! ```
//!
//! `raw` is the floor of lock-bench's S1/S2 (`SET NX PX`, then `EVALSHA` of a
//! compare-and-delete, on redis-rs alone); `locker` is `locker.lock(name).ttl(..)` (a request
//! that may wait); `untracked` the same on a Locker built with `track_keys(false)`; `try` is `locker.try_lock(name, ttl)`; `semaphore` is a permit of
//! `locker.semaphore(name, 8).acquire().ttl(..)` and its release. Names cycle over 64.

use std::time::Duration;

#[path = "common/raw.rs"]
mod raw;

const TTL: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: uncontended_cycles raw|locker|untracked|try|semaphore N [REDIS_URL]";
    let contender = args.next().ok_or(usage)?;
    let cycles: u64 = args.next().ok_or(usage)?.parse()?;
    let url = args
        .next()
        .unwrap_or_else(|| lock_core::DEFAULT_REDIS_URL.to_owned());
    match contender.as_str() {
        "locker" => {
            let locker = lock_core::Locker::from_url(&url)?;
            for i in 0..cycles {
                let lease = locker.lock(format!("n{}", i % 64)).ttl(TTL).await?;
                if !lease.release().await? {
                    return Err("a lease was lost".into());
                }
            }
        }
        "untracked" => {
            let locker = lock_core::Locker::builder()
                .url(url)
                .track_keys(false)
                .build()?;
            for i in 0..cycles {
                let lease = locker.lock(format!("n{}", i % 64)).ttl(TTL).await?;
                if !lease.release().await? {
                    return Err("a lease was lost".into());
                }
            }
        }
        "try" => {
            let locker = lock_core::Locker::from_url(&url)?;
            for i in 0..cycles {
                let lease = locker.try_lock(format!("n{}", i % 64), TTL).await?;
                if !lease.release().await? {
                    return Err("a lease was lost".into());
                }
            }
        }
        "semaphore" => {
            let locker = lock_core::Locker::from_url(&url)?;
            for i in 0..cycles {
                let permit = locker
                    .semaphore(format!("n{}", i % 64), 8)
                    .acquire()
                    .ttl(TTL)
                    .await?;
                if !permit.release().await? {
                    return Err("a permit was lost".into());
                }
            }
        }
        "raw" => {
            let client = redis::Client::open(url.as_str())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let release = raw::release_script();
            for i in 0..cycles {
                let key = format!("lock:{{n{}}}", i % 64);
                let token = format!("{i:032x}");
                raw::cycle(&mut conn, &release, &key, &token, TTL)
                    .await
                    .map_err(|err| err.to_string())?;
            }
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
