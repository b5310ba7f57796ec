use lock_core::{redis_locked, LockError};

#[redis_locked(key = "jobs:digest", hold_at_least = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "jobs:digest", hold_at_least = 300)]
async fn no_unit() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "jobs:digest", hold_at_least = "5 minutes")]
async fn not_a_duration() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "exports", permits = 3, hold_at_least = "5m")]
async fn with_permits() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
