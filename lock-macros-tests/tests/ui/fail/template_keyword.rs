use lock_core::{redis_locked, LockError};

#[redis_locked(key = "kind:{type}")]
async fn by_kind(r#type: &str) -> Result<(), LockError> {
    let _ = r#type;
    Ok(())
}

fn main() {}
