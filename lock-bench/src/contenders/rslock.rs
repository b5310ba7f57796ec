//! `rslock` 0.10 from crates.io, the most used Rust Redlock crate, on one Redis or N masters.
//!
//! Configured with its documented retry options: `set_retry(count, delay)`. One attempt where
//! a scenario asks for one (S1, S2); where it waits (S3, S5), `set_retry(u32::MAX, 3 ms)`,
//! so it never gives up during a run. rslock sleeps a random whole number of milliseconds
//! below the delay between attempts: 0, 1 or 2 ms here, 1 ms on average, like the naive
//! loop. With renewal, rslock's own `LockManager::using`, which extends the lock 500 ms
//! before its validity ends (every 1 ms when the TTL is under 500 ms).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rslock::LockManager;

use super::{Contender, HeldSummary, Outcome, ReleaseAll, Released, Spec};

/// Delay bound between attempts when waiting.
pub const RETRY_DELAY: Duration = Duration::from_millis(3);

pub struct Rslock {
    /// One attempt per acquire.
    once: LockManager,
    /// Retries "forever" (bounded by the scenario's wait).
    retrying: LockManager,
    renew: bool,
    label: String,
}

impl Rslock {
    pub fn new(urls: &[String], renew: bool, label: impl Into<String>) -> Result<Rslock, String> {
        // `LockManager::new` panics on a bad URL; open the clients first.
        let clients = urls
            .iter()
            .map(|url| {
                redis::Client::open(url.as_str())
                    .map_err(|err| format!("bad Redis URL {url:?}: {err}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut once = LockManager::from_clients(clients);
        let mut retrying = once.clone();
        once.set_retry(1, RETRY_DELAY);
        retrying.set_retry(u32::MAX, RETRY_DELAY);
        Ok(Rslock {
            once,
            retrying,
            renew,
            label: label.into(),
        })
    }
}

impl Contender for Rslock {
    fn label(&self) -> &str {
        &self.label
    }

    fn renews(&self) -> bool {
        self.renew
    }

    async fn locked<B>(&self, name: &str, spec: Spec, body: B) -> Result<Outcome, String>
    where
        B: Future<Output = ()> + Send,
    {
        let key = format!("rslock:{name}");
        if self.renew {
            let using = self
                .retrying
                .using(key.as_bytes(), spec.ttl, async move || body.await);
            return match tokio::time::timeout(spec.wait, using).await {
                Ok(Ok(())) => Ok(Outcome::released(Released::Unknown)),
                // An extension failed: rslock dropped the body and released the lock.
                Ok(Err(_)) => Ok(Outcome {
                    released: Released::Lost,
                    lost_signal_at: Some(Instant::now()),
                    valid_until: None,
                }),
                Err(_) => Err("timed out".into()),
            };
        }
        let lock = if spec.wait.is_zero() {
            self.once
                .lock(key.as_str(), spec.ttl)
                .await
                .map_err(|err| err.to_string())?
        } else {
            tokio::time::timeout(spec.wait, self.retrying.lock(key.as_str(), spec.ttl))
                .await
                .map_err(|_| "timed out".to_owned())?
                .map_err(|err| err.to_string())?
        };
        body.await;
        // `release` returns nothing: the holder is not told whether it still held the lock.
        lock.release().await;
        Ok(Outcome::released(Released::Unknown))
    }

    /// `LockManager::using` per lease: each runs its own timer and extends its lock on its
    /// own, one round trip per lease per extension.
    async fn hold_renewed(
        &self,
        names: Vec<String>,
        ttl: Duration,
    ) -> Option<Result<ReleaseAll, String>> {
        if !self.renew {
            return None;
        }
        let total = names.len();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (acquired_tx, mut acquired_rx) = tokio::sync::mpsc::channel::<()>(total.max(1));
        let lost = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::with_capacity(total);
        for name in names {
            let manager = self.retrying.clone();
            let mut stopped = stopped.clone();
            let acquired = acquired_tx.clone();
            let lost = lost.clone();
            tasks.push(tokio::spawn(async move {
                let key = format!("rslock:{name}");
                let routine = async move || {
                    let _ = acquired.send(()).await;
                    let _ = stopped.wait_for(|stop| *stop).await;
                };
                if manager.using(key.as_bytes(), ttl, routine).await.is_err() {
                    lost.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        drop(acquired_tx);
        let deadline = Instant::now() + Duration::from_secs(60);
        for _ in 0..total {
            match tokio::time::timeout_at(deadline.into(), acquired_rx.recv()).await {
                Ok(Some(())) => {}
                _ => {
                    let _ = stop.send(true);
                    return Some(Err("rslock did not acquire every lease within 60 s".into()));
                }
            }
        }
        Some(Ok(Box::pin(async move {
            let _ = stop.send(true);
            for task in tasks {
                let _ = task.await;
            }
            Ok(HeldSummary {
                lost: lost.load(Ordering::Relaxed),
            })
        })))
    }
}
