use std::time::Duration;

use lock_core::{redis_locked, LockError};

// A string constant: the attribute cannot read it, and it is no `Duration`.
const TTL: &str = "30s";
const WAIT_SECS: u64 = 5;

#[redis_locked(key = "jobs:hourly", ttl = TTL)]
async fn hourly() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "jobs:daily", wait = WAIT_SECS)]
async fn daily() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "jobs:weekly", ttl = Some(Duration::from_secs(1)))]
async fn weekly() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
