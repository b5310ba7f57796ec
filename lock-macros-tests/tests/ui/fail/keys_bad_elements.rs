use lock_core::{redis_locked, LockError};

#[redis_locked(keys = ["buyer:{buyer}", item, "seller:{sellr}"])]
async fn trade(buyer: u64, seller: u64, item: u64) -> Result<u64, LockError> {
    Ok(buyer + seller + item)
}

fn main() {}
