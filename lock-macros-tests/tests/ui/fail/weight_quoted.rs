use lock_core::{redis_locked, LockError};

#[redis_locked(key = "gpus", permits = 8, weight = "2")]
async fn train() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
