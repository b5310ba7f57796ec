//! One `Locker` used on one runtime after another: a service that rebuilds its runtime, a
//! test suite that shares one Locker between `#[tokio::test]`s. The first runtime shuts
//! down under the Locker's background tasks (dropped at their awaits, not ended); what
//! they leave behind must not keep the next runtime's leases from being served. (Key
//! tracking's task: `tracking.rs`.)

use std::time::{Duration, Instant};

use lock_core::Locker;
use lock_tests::RedisServer;

/// A TTL that a lease outlives only if it is renewed (and, on a loaded machine, a renewal
/// may come a second late and still hold it).
const TTL: Duration = Duration::from_secs(2);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn auto_renewal_goes_on_after_the_renewal_task_was_dropped_with_its_runtime() {
    let server = RedisServer::start();
    let locker = Locker::builder().url(server.url()).build().expect("locker");
    // A renewed lease left held while its runtime shuts down: the renewal task is dropped
    // waiting for the lease's next renewal.
    let first = runtime();
    first.block_on(async {
        let kept = locker
            .lock("renewed-0")
            .ttl(TTL)
            .auto_renew()
            .await
            .expect("acquire on the first runtime");
        std::mem::forget(kept);
    });
    // Dropped: shut down, its tasks dropped, and its threads gone before this returns (a
    // `shutdown_timeout` may return before its workers dropped their tasks, on a loaded
    // machine, and a lease taken meanwhile finds the old task still marked running).
    drop(first);
    runtime().block_on(async {
        let begun = Instant::now();
        let lease = locker
            .lock("renewed-1")
            .ttl(TTL)
            .auto_renew()
            .await
            .expect("acquire on the second runtime");
        // Two and a half TTLs: held only if it was renewed on this runtime.
        tokio::time::sleep(TTL * 5 / 2).await;
        assert!(begun.elapsed() > 2 * TTL);
        assert!(
            !lease.is_lost(),
            "the lease of the second runtime was not renewed"
        );
        assert!(lease.is_held().await.expect("is_held"));
        assert!(lease.release().await.expect("release"));
    });
}
