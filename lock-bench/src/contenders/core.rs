//! lock-core through its `Locker` API: `locker.lock(name).ttl(..).wait(..)`, optionally
//! `.auto_renew()`, then `lease.release()`.

use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt as _, TryStreamExt as _};
use lock_core::{Lease, Locker};

use super::{Contender, HeldSummary, Outcome, ReleaseAll, Released, Spec};

pub struct Core {
    locker: Locker,
    renew: bool,
    label: String,
}

impl Core {
    /// A contender on its own locker (one process, in the contended scenarios).
    pub fn new(locker: Locker, renew: bool, label: impl Into<String>) -> Core {
        Core {
            locker,
            renew,
            label: label.into(),
        }
    }

    async fn acquire(&self, name: &str, spec: Spec) -> Result<Lease, String> {
        let mut request = self.locker.lock(name).ttl(spec.ttl).wait(spec.wait);
        if self.renew {
            request = request.auto_renew();
        }
        request.await.map_err(|err| err.to_string())
    }
}

impl Contender for Core {
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
        let lease = self.acquire(name, spec).await?;
        let mut outcome = Outcome::released(Released::Held);
        if spec.watch_lost {
            // Run the body to its end whatever happens (a holder that does not cooperate),
            // noting when lock-core signals the loss.
            outcome.valid_until = Some(Instant::now() + lease.expires_in());
            let handle = lease.handle();
            let lost = handle.lost();
            tokio::pin!(body, lost);
            loop {
                tokio::select! {
                    biased;
                    () = &mut body => break,
                    () = &mut lost, if outcome.lost_signal_at.is_none() => {
                        outcome.lost_signal_at = Some(Instant::now());
                    }
                }
            }
        } else {
            body.await;
        }
        outcome.released = match lease.release().await {
            Ok(true) => Released::Held,
            Ok(false) => Released::Lost,
            Err(err) => return Err(format!("release failed: {err}")),
        };
        Ok(outcome)
    }

    /// Auto-renewed leases: the locker's one renewal task extends every due lease in one
    /// pipelined round trip per tick.
    async fn hold_renewed(
        &self,
        names: Vec<String>,
        ttl: Duration,
    ) -> Option<Result<ReleaseAll, String>> {
        let spec = Spec {
            ttl,
            wait: Duration::from_secs(5),
            watch_lost: false,
        };
        let leases: Result<Vec<Lease>, String> = stream::iter(names)
            .map(|name| async move {
                self.locker
                    .lock(name)
                    .ttl(spec.ttl)
                    .wait(spec.wait)
                    .auto_renew()
                    .await
                    .map_err(|err| err.to_string())
            })
            .buffer_unordered(64)
            .try_collect()
            .await;
        let leases = match leases {
            Ok(leases) => leases,
            Err(err) => return Some(Err(err)),
        };
        Some(Ok(Box::pin(async move {
            let lost = leases.iter().filter(|lease| lease.is_lost()).count();
            stream::iter(leases)
                .for_each_concurrent(64, |lease| async move {
                    let _ = lease.release().await;
                })
                .await;
            Ok(HeldSummary { lost })
        })))
    }
}
