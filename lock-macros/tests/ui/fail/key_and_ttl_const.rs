use lock_core::{redis_locked, LockError};

const KEY: &str = "jobs:nightly";
const TTL: &str = "30s";

#[redis_locked(key = KEY)]
async fn nightly() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "jobs:hourly", ttl = TTL)]
async fn hourly() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
