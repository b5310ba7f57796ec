//! The seeds' retry loop: `SET NX PX`, and on failure sleep a fixed 1 ms and try again until
//! the deadline; compare-and-delete release, whose reply says whether we still held the lock.
//! What most hand-written locks do. Its "renewal" is the hand-written one too: a timer per
//! lease that extends it every third of its TTL.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt as _, TryStreamExt as _};
use redis::aio::MultiplexedConnection;
use redis::Script;

use super::raw::{connect, COMPARE_AND_DELETE};
use super::{Contender, HeldSummary, Outcome, ReleaseAll, Released, Spec};

const RETRY_SLEEP: Duration = Duration::from_millis(1);
const COMPARE_AND_PEXPIRE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

pub struct Naive {
    conn: MultiplexedConnection,
    release: Script,
    extend: Script,
    next_token: AtomicU64,
    label: String,
}

impl Naive {
    pub async fn connect(url: &str, label: impl Into<String>) -> Result<Naive, String> {
        Ok(Naive {
            conn: connect(url).await?,
            release: Script::new(COMPARE_AND_DELETE),
            extend: Script::new(COMPARE_AND_PEXPIRE),
            next_token: AtomicU64::new(fastrand::u64(..)),
            label: label.into(),
        })
    }

    fn token(&self) -> String {
        self.next_token.fetch_add(1, Ordering::Relaxed).to_string()
    }

    /// The same `SET NX PX` the raw floor sends.
    async fn set_nx(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, String> {
        super::raw::Raw::set_nx(self.conn.clone(), key, token, ttl).await
    }

    async fn acquire(&self, key: &str, token: &str, spec: Spec) -> Result<(), String> {
        let deadline = Instant::now() + spec.wait;
        loop {
            if self.set_nx(key, token, spec.ttl).await? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err("timed out".into());
            }
            tokio::time::sleep(RETRY_SLEEP).await;
        }
    }

    async fn delete(&self, key: &str, token: &str) -> Result<bool, String> {
        let mut conn = self.conn.clone();
        let deleted: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut conn)
            .await
            .map_err(|err| err.to_string())?;
        Ok(deleted == 1)
    }
}

impl Contender for Naive {
    fn label(&self) -> &str {
        &self.label
    }

    async fn locked<B>(&self, name: &str, spec: Spec, body: B) -> Result<Outcome, String>
    where
        B: Future<Output = ()> + Send,
    {
        let key = format!("naive:{name}");
        let token = self.token();
        self.acquire(&key, &token, spec).await?;
        body.await;
        let held = self.delete(&key, &token).await?;
        Ok(Outcome::released(if held {
            Released::Held
        } else {
            Released::Lost
        }))
    }

    /// One task per lease, each sleeping a third of the TTL and then extending its lease with
    /// a compare-and-`PEXPIRE`: one timer and one round trip per lease per period.
    async fn hold_renewed(
        &self,
        names: Vec<String>,
        ttl: Duration,
    ) -> Option<Result<ReleaseAll, String>> {
        let held: Result<Vec<(String, String)>, String> = stream::iter(names)
            .map(|name| async move {
                let key = format!("naive:{name}");
                let token = self.token();
                let spec = Spec {
                    ttl,
                    wait: Duration::from_secs(5),
                    watch_lost: false,
                };
                self.acquire(&key, &token, spec).await?;
                Ok::<_, String>((key, token))
            })
            .buffer_unordered(64)
            .try_collect()
            .await;
        let held = match held {
            Ok(held) => held,
            Err(err) => return Some(Err(err)),
        };
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let lost = Arc::new(AtomicUsize::new(0));
        let ttl_ms = ttl.as_millis() as u64;
        let mut timers = Vec::with_capacity(held.len());
        for (key, token) in &held {
            let (key, token) = (key.clone(), token.clone());
            let mut conn = self.conn.clone();
            let extend = self.extend.clone();
            let mut stopped = stopped.clone();
            let lost = lost.clone();
            timers.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stopped.changed() => return,
                        () = tokio::time::sleep(ttl / 3) => {}
                    }
                    let extended: Result<i64, _> = extend
                        .key(&key)
                        .arg(&token)
                        .arg(ttl_ms)
                        .invoke_async(&mut conn)
                        .await;
                    if !matches!(extended, Ok(1)) {
                        lost.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            }));
        }
        let conn = self.conn.clone();
        let release = self.release.clone();
        Some(Ok(Box::pin(async move {
            let _ = stop.send(true);
            for timer in timers {
                let _ = timer.await;
            }
            stream::iter(held)
                .for_each_concurrent(64, |(key, token)| {
                    let mut conn = conn.clone();
                    let release = release.clone();
                    async move {
                        let _: Result<i64, _> =
                            release.key(&key).arg(&token).invoke_async(&mut conn).await;
                    }
                })
                .await;
            Ok(HeldSummary {
                lost: lost.load(Ordering::Relaxed),
            })
        })))
    }
}
