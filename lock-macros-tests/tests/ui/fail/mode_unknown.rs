use lock_core::{redis_locked, LockError};

#[redis_locked(key = "catalog", mode = "exclusive")]
async fn update() -> Result<u64, LockError> {
    Ok(1)
}

fn main() {}
