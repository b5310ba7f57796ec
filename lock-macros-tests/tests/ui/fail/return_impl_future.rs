use std::future::Future;

use lock_core::{redis_locked, LockError};

#[redis_locked(key = "market:{item_id}")]
fn purchase(item_id: u64) -> impl Future<Output = Result<u64, LockError>> {
    async move { Ok(item_id) }
}

fn main() {}
