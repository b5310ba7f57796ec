use lock_core::{redis_locked, LockError};

const KEY: &str = "market";

#[redis_locked(key = KEY)]
async fn purchase(item_id: u64) -> Result<u64, LockError> {
    Ok(item_id)
}

fn main() {}
