use lock_core::{redis_locked, LockError};

pub struct Order {
    pub id: u64,
}

#[redis_locked(key = "orders:{order.idd}")]
async fn pay(order: &Order) -> Result<u64, LockError> {
    Ok(order.id)
}

fn main() {}
