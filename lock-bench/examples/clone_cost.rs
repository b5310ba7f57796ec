//! What a clone (and drop) of a redis-rs multiplexed connection costs, on one thread and on
//! two threads at once: the reason each thread keeps the clones of a Locker's shared
//! connection between operations (`lock-core/src/connection/spares.rs`). Prints the time
//! per clone and drop on each thread.
//!
//! ```sh
//! cargo run --release -p lock-bench --example clone_cost -- redis://127.0.0.1:6390/
//! ```

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

const CLONES: u32 = 2_000_000;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| lock_core::DEFAULT_REDIS_URL.to_owned());
    let conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    // Behind a lock, as a Locker's shared connection was read before each operation.
    let shared = Arc::new(RwLock::new(conn));
    for threads in [1, 2] {
        let start = Instant::now();
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    for _ in 0..CLONES {
                        let clone = shared
                            .read()
                            .unwrap_or_else(PoisonError::into_inner)
                            .clone();
                        drop(std::hint::black_box(clone));
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| "a cloning thread panicked")?;
        }
        let each = start.elapsed().as_nanos() as f64 / f64::from(CLONES);
        println!("{threads} thread(s): {each:.0} ns per clone and drop, on each thread");
    }
    Ok(())
}
