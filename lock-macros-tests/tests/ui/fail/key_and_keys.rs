use lock_core::{redis_locked, LockError};

#[redis_locked(key = "item:{item}", keys = ["buyer:{buyer}", "item:{item}"])]
async fn trade(buyer: u64, item: u64) -> Result<u64, LockError> {
    Ok(buyer + item)
}

fn main() {}
