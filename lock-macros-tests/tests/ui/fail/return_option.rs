use lock_core::redis_locked;

#[redis_locked(key = "market:{item_id}")]
async fn purchase(item_id: u64) -> Option<u64> {
    Some(item_id)
}

fn main() {}
