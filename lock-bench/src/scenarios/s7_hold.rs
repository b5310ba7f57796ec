//! S7's hold loop, shared by the reader flood ([`s7_rwlock`](super::s7_rwlock)) and the
//! writer's own process ([`s7_writer`](super::s7_writer)): take a read or write lease of one
//! name, hold it ~1 ms, give it back, log when it was asked, entered and left.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lock_core::Locker;

use super::Failures;

const HOLD: Duration = Duration::from_millis(1);
/// The writer's pause between giving the write lease back and asking again.
pub const WRITER_EVERY: Duration = Duration::from_millis(10);
pub const TTL: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
pub struct Hold {
    pub write: bool,
    pub asked: Instant,
    pub entered: Instant,
    pub leaving: Instant,
}

pub async fn hold_loop(
    locker: Locker,
    name: String,
    write: bool,
    started: Instant,
    run_for: Duration,
    holds: Arc<Mutex<Vec<Hold>>>,
) -> Failures {
    let mut failures = Failures::default();
    let rwlock = locker.rwlock(name);
    while started.elapsed() < run_for {
        if write {
            tokio::time::sleep(WRITER_EVERY).await;
        }
        let asked = Instant::now();
        let request = if write { rwlock.write() } else { rwlock.read() };
        match request.ttl(TTL).wait(WAIT).await {
            Ok(lease) => {
                let entered = Instant::now();
                tokio::time::sleep(HOLD).await;
                let leaving = Instant::now();
                if let Err(err) = lease.release().await {
                    failures.record(format!("release failed: {err}"));
                }
                holds
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Hold {
                        write,
                        asked,
                        entered,
                        leaving,
                    });
            }
            Err(err) => failures.record(err.to_string()),
        }
    }
    failures
}
