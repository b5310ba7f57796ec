use lock_core::redis_locked;

#[derive(Debug)]
pub enum AppError {
    SoldOut,
}

#[redis_locked(key = "market:{item_id}")]
async fn purchase(item_id: u64) -> Result<u64, AppError> {
    if item_id == 0 {
        return Err(AppError::SoldOut);
    }
    Ok(item_id)
}

fn main() {}
