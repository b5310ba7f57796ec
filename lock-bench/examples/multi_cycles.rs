//! `K` cycles of `locker.lock_all(N names)` and `release()` on one task, for counting what
//! Redis does per cycle: reset its counters (`CONFIG RESETSTAT`), run this, and read `INFO
//! commandstats` (calls, inner script calls included; `usec` of `EVALSHA`, which includes
//! the script's inner calls). lock-bench's S8 reports the same figures itself; this
//! program is small enough to build against an older lock-core for a before/after.
//!
//! ```sh
//! cargo build --release -p lock-bench --example multi_cycles
//! redis-cli -p 6379 config resetstat
//! target/release/examples/multi_cycles 4 10000 redis://127.0.0.1:6379/
//! redis-cli -p 6379 info commandstats
//! ```

use std::time::Duration;

const TTL: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: multi_cycles N K [REDIS_URL]";
    let names: usize = args.next().ok_or(usage)?.parse()?;
    let cycles: u64 = args.next().ok_or(usage)?.parse()?;
    let url = args
        .next()
        .unwrap_or_else(|| lock_core::DEFAULT_REDIS_URL.to_owned());
    let locker = lock_core::Locker::from_url(&url)?;
    let names: Vec<String> = (0..names).map(|i| format!("mc-{i}")).collect();
    for _ in 0..cycles {
        let lease = locker.lock_all(names.iter().cloned()).ttl(TTL).await?;
        if !lease.release().await? {
            return Err("a multi-lock was lost".into());
        }
    }
    Ok(())
}
