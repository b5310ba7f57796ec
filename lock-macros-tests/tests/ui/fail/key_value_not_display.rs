use lock_core::{redis_locked, LockError};

pub struct Item {
    pub id: u64,
}

#[redis_locked(key = "market:{item}")]
async fn purchase(item: &Item) -> Result<u64, LockError> {
    Ok(item.id)
}

fn main() {}
