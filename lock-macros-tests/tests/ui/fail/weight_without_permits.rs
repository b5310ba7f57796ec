use lock_core::{redis_locked, LockError};

#[redis_locked(key = "gpus", weight = 2)]
async fn train() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "catalog", mode = "write", weight = 2)]
async fn restock() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
