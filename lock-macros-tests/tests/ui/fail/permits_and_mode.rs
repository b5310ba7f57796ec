use lock_core::{redis_locked, LockError};

#[redis_locked(key = "catalog", permits = 3, mode = "read")]
async fn browse() -> Result<u64, LockError> {
    Ok(1)
}

fn main() {}
