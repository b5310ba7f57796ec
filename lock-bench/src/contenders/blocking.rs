//! lock-core's synchronous API, `lock_core::blocking::Locker`: `locker.lock(name).ttl(..)
//! .wait(..).acquire()`, then `lease.release()`, each call blocking its thread.
//!
//! The blocking API refuses to run on a thread that runs async code (a tokio worker, or
//! `spawn_blocking`): it fails with `LockError::BlockingInAsync` instead of stalling the
//! runtime. So its loops run on plain `std::thread`s started for the purpose, outside the
//! benchmark's runtime ([`Blocking::loops`]), and the async side waits for them to end; the
//! locker itself is built on such a thread too. S1 and S2 measure it against the same
//! Redis and the same raw redis-rs floor as the async rows, slices interleaved with theirs.

use std::future::Future;
use std::time::{Duration, Instant};

use lock_core::blocking::Locker;
use lock_core::LockerBuilder;

use super::{Contender, Outcome, Released, Spec};
use crate::scenarios::Failures;

pub struct Blocking {
    locker: Locker,
    label: String,
}

/// What the threads of one [`Blocking::loops`] did.
#[derive(Debug, Default)]
pub struct Loops {
    /// Every cycle's lock + release time, in nanoseconds, when asked for.
    pub samples: Vec<u64>,
    /// Cycles done by every thread.
    pub cycles: u64,
    /// From the threads' start to the last one's end.
    pub elapsed: Duration,
    pub failures: Failures,
}

/// Runs `work` on a new plain thread (no runtime on it) and waits for it without
/// blocking the runtime's workers.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let thread = std::thread::Builder::new()
        .name("bench-blocking".into())
        .spawn(work)
        .map_err(|err| format!("cannot start a thread: {err}"))?;
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .map_err(|err| format!("join: {err}"))?
        .map_err(|_| "a blocking thread panicked".to_owned())
}

/// One lock + release cycle with the blocking API.
fn cycle(locker: &Locker, name: &str, spec: Spec) -> Result<bool, String> {
    let lease = locker
        .lock(name)
        .ttl(spec.ttl)
        .wait(spec.wait)
        .acquire()
        .map_err(|err| err.to_string())?;
    lease
        .release()
        .map_err(|err| format!("release failed: {err}"))
}

impl Blocking {
    /// A blocking locker from `builder` (built on a plain thread: it starts its own
    /// runtime thread).
    pub async fn new(builder: LockerBuilder, label: impl Into<String>) -> Result<Blocking, String> {
        let locker = off_runtime(move || Locker::build(builder))
            .await?
            .map_err(|err| format!("cannot build a blocking locker: {err}"))?;
        Ok(Blocking {
            locker,
            label: label.into(),
        })
    }

    /// One plain thread per name, each cycling on its name for `run_for`; every cycle's
    /// time kept when `sample`.
    pub async fn loops(
        &self,
        names: Vec<String>,
        spec: Spec,
        run_for: Duration,
        sample: bool,
    ) -> Loops {
        let locker = self.locker.clone();
        let run = off_runtime(move || {
            let started = Instant::now();
            let threads: Vec<_> = names
                .into_iter()
                .map(|name| {
                    let locker = locker.clone();
                    std::thread::spawn(move || {
                        let mut out = Loops::default();
                        while started.elapsed() < run_for {
                            let t0 = Instant::now();
                            match cycle(&locker, &name, spec) {
                                Ok(_) => {
                                    out.cycles += 1;
                                    if sample {
                                        out.samples.push(t0.elapsed().as_nanos() as u64);
                                    }
                                }
                                Err(err) => out.failures.record(err),
                            }
                        }
                        out
                    })
                })
                .collect();
            let mut all = Loops::default();
            for thread in threads {
                match thread.join() {
                    Ok(out) => {
                        all.samples.extend(out.samples);
                        all.cycles += out.cycles;
                        all.failures.merge(out.failures);
                    }
                    Err(_) => all.failures.record("a blocking thread panicked".into()),
                }
            }
            all.elapsed = started.elapsed();
            all
        })
        .await;
        run.unwrap_or_else(|err| {
            let mut failed = Loops::default();
            failed.failures.record(err);
            failed
        })
    }
}

impl Contender for Blocking {
    fn label(&self) -> &str {
        &self.label
    }

    /// One cycle on a thread of its own (the warm-up; S1 and S2 use [`Blocking::loops`]).
    async fn locked<B>(&self, name: &str, spec: Spec, body: B) -> Result<Outcome, String>
    where
        B: Future<Output = ()> + Send,
    {
        let locker = self.locker.clone();
        let owned = name.to_owned();
        let lease = off_runtime(move || {
            locker
                .lock(owned)
                .ttl(spec.ttl)
                .wait(spec.wait)
                .acquire()
                .map_err(|err| err.to_string())
        })
        .await??;
        body.await;
        let released = off_runtime(move || lease.release()).await?;
        Ok(Outcome::released(match released {
            Ok(true) => Released::Held,
            Ok(false) => Released::Lost,
            Err(err) => return Err(format!("release failed: {err}")),
        }))
    }
}
