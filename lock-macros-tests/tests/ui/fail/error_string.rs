use lock_core::redis_locked;

#[redis_locked(key = "market:{item_id}")]
async fn purchase(item_id: u64) -> Result<u64, String> {
    Ok(1)
}

#[redis_locked(key = "market:{item_id}")]
async fn restock(item_id: u64) -> Result<u64, &'static str> {
    Ok(1)
}

fn main() {}
