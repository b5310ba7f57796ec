//! lock-core through `#[redis_locked]`: annotated functions whose body only awaits the
//! scenario's critical section (nothing at all in S1/S2). TTL and wait are compile-time
//! literals, so there is one function per (TTL, wait, renewal) a scenario uses.
//!
//! The attribute auto-renews by default; `renew = false` turns that off. Compare the default
//! with `Locker` + `.auto_renew()` and `renew = false` with plain `Locker` for a like-for-like
//! overhead figure.

use std::future::Future;
use std::time::Duration;

use lock_core::{redis_locked, LockError, Locker};

use super::{Contender, Outcome, Released, Spec};

pub struct Annotated {
    locker: Locker,
    renew: bool,
    label: String,
}

/// S1/S2 (ttl 10 s, one attempt), renewed: the attribute's default.
#[redis_locked(key = "{name}", ttl = "10s", wait = "0s", locker = locker)]
async fn cycle_renewed<B>(locker: &Locker, name: &str, body: B) -> Result<(), LockError>
where
    B: Future<Output = ()> + Send,
{
    body.await;
    Ok(())
}

/// S1/S2 (ttl 10 s, one attempt), without renewal.
#[redis_locked(key = "{name}", ttl = "10s", wait = "0s", locker = locker, renew = false)]
async fn cycle_plain<B>(locker: &Locker, name: &str, body: B) -> Result<(), LockError>
where
    B: Future<Output = ()> + Send,
{
    body.await;
    Ok(())
}

/// S5 (ttl 100 ms, waiting), renewed: the attribute's default.
#[redis_locked(key = "{name}", ttl = "100ms", wait = "30s", locker = locker)]
async fn overrun_renewed<B>(locker: &Locker, name: &str, body: B) -> Result<(), LockError>
where
    B: Future<Output = ()> + Send,
{
    body.await;
    Ok(())
}

/// The warm-up (ttl 10 s, waiting up to 1 s).
#[redis_locked(key = "{name}", ttl = "10s", wait = "1s", locker = locker, renew = false)]
async fn warm_up<B>(locker: &Locker, name: &str, body: B) -> Result<(), LockError>
where
    B: Future<Output = ()> + Send,
{
    body.await;
    Ok(())
}

impl Annotated {
    pub fn new(locker: Locker, renew: bool, label: impl Into<String>) -> Annotated {
        Annotated {
            locker,
            renew,
            label: label.into(),
        }
    }
}

impl Contender for Annotated {
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
        let ten_s = Duration::from_secs(10);
        let result = match (spec.ttl, spec.wait, self.renew) {
            (ttl, wait, true) if ttl == ten_s && wait.is_zero() => {
                cycle_renewed(&self.locker, name, body).await
            }
            (ttl, wait, false) if ttl == ten_s && wait.is_zero() => {
                cycle_plain(&self.locker, name, body).await
            }
            (ttl, wait, true)
                if ttl == Duration::from_millis(100) && wait == Duration::from_secs(30) =>
            {
                overrun_renewed(&self.locker, name, body).await
            }
            (ttl, wait, renew) => {
                return Err(format!(
                    "no #[redis_locked] function for ttl {ttl:?}, wait {wait:?}, renew {renew}"
                ))
            }
        };
        match result {
            Ok(()) => Ok(Outcome::released(Released::Held)),
            Err(LockError::Lost { .. }) => Ok(Outcome::released(Released::Lost)),
            Err(err) => Err(err.to_string()),
        }
    }

    async fn warm_up(&self) -> Result<(), String> {
        warm_up(&self.locker, "warm-up", async {})
            .await
            .map_err(|err| err.to_string())
    }
}
