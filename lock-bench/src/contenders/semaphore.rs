//! lock-core's counting semaphore: `locker.semaphore(name, permits).acquire()`, then
//! `permit.release()`. On an uncontended name this is one admission script and one release
//! script, against the plain lock's SET and compare-and-delete.

use std::future::Future;

use lock_core::Locker;

use super::{Contender, Outcome, Released, Spec};

pub struct Semaphore {
    locker: Locker,
    permits: u64,
    label: String,
}

impl Semaphore {
    pub fn new(locker: Locker, permits: u64, label: impl Into<String>) -> Semaphore {
        Semaphore {
            locker,
            permits,
            label: label.into(),
        }
    }
}

impl Contender for Semaphore {
    fn label(&self) -> &str {
        &self.label
    }

    async fn locked<B>(&self, name: &str, spec: Spec, body: B) -> Result<Outcome, String>
    where
        B: Future<Output = ()> + Send,
    {
        let permit = self
            .locker
            .semaphore(name, self.permits)
            .acquire()
            .ttl(spec.ttl)
            .wait(spec.wait)
            .await
            .map_err(|err| err.to_string())?;
        body.await;
        let released = match permit.release().await {
            Ok(true) => Released::Held,
            Ok(false) => Released::Lost,
            Err(err) => return Err(format!("release failed: {err}")),
        };
        Ok(Outcome::released(released))
    }
}
