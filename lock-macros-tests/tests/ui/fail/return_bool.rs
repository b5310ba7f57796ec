use lock_core::redis_locked;

#[redis_locked(key = "market:{item_id}")]
async fn purchase(item_id: u64) -> bool {
    item_id > 0
}

fn main() {}
