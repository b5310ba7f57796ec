//! Work a `Locker` leaves running after its caller has moved on (the release of a dropped
//! lease, giving back a late grant, leaving a waiter queue), counted so that
//! [`Locker::shutdown`](crate::Locker::shutdown) can wait for it before the runtime stops.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub(crate) struct Background {
    running: AtomicUsize,
    idle: Notify,
}

/// Counts one task out, also when the runtime drops it unfinished.
struct Running(Arc<Background>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Spawns `work` on the current runtime; false (and nothing runs) outside of one.
    pub fn spawn(self: &Arc<Self>, work: impl Future<Output = ()> + Send + 'static) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        self.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(Arc::clone(self));
        runtime.spawn(async move {
            let _running = running;
            work.await;
        });
        true
    }

    /// Completes once no spawned work is left.
    pub async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn idle_waits_for_every_spawned_task() {
        let background = Arc::new(Background::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        assert!(background.spawn(async move {
            let _ = rx.await;
        }));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), background.idle())
                .await
                .is_err(),
            "one task still runs"
        );
        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), background.idle())
            .await
            .expect("idle once it finished");
    }
}
