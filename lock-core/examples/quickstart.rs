//! Two "processes" (two lockers) compete for one lock on the Redis at $REDIS_URL
//! (default redis://127.0.0.1:6379/).
//!
//! Run: `cargo run -p lock-core --example quickstart`

use std::time::Duration;

use lock_core::{LockError, Locker};

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let web = Locker::builder().app_name("web").build()?;
    let worker = Locker::builder().app_name("worker").build()?;

    let lease = web
        .lock("quickstart:order-7")
        .ttl(Duration::from_secs(5))
        .await?;
    println!(
        "web holds {:?} (token {}…)",
        lease.name(),
        &lease.token()[..8]
    );

    match worker
        .try_lock("quickstart:order-7", Duration::from_secs(5))
        .await
    {
        Err(err @ LockError::Busy { .. }) => println!("worker: {err}"),
        other => println!("worker: unexpected {other:?}"),
    }

    let info = worker.inspect("quickstart:order-7").await?;
    println!("inspect: {info:?}");

    println!("web released: {}", lease.release().await?);
    let lease = worker
        .try_lock("quickstart:order-7", Duration::from_secs(5))
        .await?;
    println!("worker holds it now; released: {}", lease.release().await?);
    Ok(())
}
