use lock_core::{redis_locked, LockError};

#[redis_locked(keys = "buyer:{buyer}")]
async fn trade(buyer: u64) -> Result<u64, LockError> {
    Ok(buyer)
}

fn main() {}
