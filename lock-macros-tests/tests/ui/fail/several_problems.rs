use lock_core::{redis_locked, LockError};

#[redis_locked(key = "market:{item}", ttl = "0s", wiat = "5s")]
fn purchase(item_id: u64) -> bool {
    item_id > 0
}

fn main() {
    let _: Option<LockError> = None;
}
