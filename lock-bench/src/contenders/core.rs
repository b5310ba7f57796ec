//! lock-core through its `Locker` API.

use std::time::Duration;

use lock_core::{Lease, Locker};

use super::Contender;

pub struct Core {
    pub locker: Locker,
    pub label: &'static str,
}

impl Contender for Core {
    type Held = Lease;

    fn label(&self) -> String {
        self.label.into()
    }

    async fn try_lock(&self, name: &str, ttl: Duration) -> Option<Lease> {
        self.locker.try_lock(name, ttl).await.ok()
    }

    async fn lock_wait(&self, name: &str, ttl: Duration, wait: Duration) -> Option<Lease> {
        self.locker.lock(name).ttl(ttl).wait(wait).await.ok()
    }

    async fn release(&self, lease: Lease) {
        let _ = lease.release().await;
    }
}
