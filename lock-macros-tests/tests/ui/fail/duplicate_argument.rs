use lock_core::{redis_locked, LockError};

#[redis_locked(key = "market:{item_id}", ttl = "10s", ttl = "20s")]
async fn purchase(item_id: u64) -> Result<u64, LockError> {
    Ok(item_id)
}

fn main() {}
