use lock_core::{redis_locked, LockError};

#[redis_locked(key = "market:{item_id}")]
async fn purchase(item_id: u64) {
    let _ = item_id;
}

fn main() {
    let _: Option<LockError> = None;
}
