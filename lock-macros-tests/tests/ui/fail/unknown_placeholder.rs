use lock_core::{redis_locked, LockError};

#[redis_locked(key = "market:{itme_id}")]
async fn purchase(buyer: &str, item_id: u64) -> Result<u64, LockError> {
    Ok(item_id + buyer.len() as u64)
}

fn main() {}
