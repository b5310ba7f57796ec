use lock_core::{redis_locked, LockError};

#[redis_locked(key = "market:{}")]
async fn purchase(item_id: u64) -> Result<u64, LockError> {
    Ok(item_id)
}

fn main() {}
