use lock_core::{redis_locked, LockError};

#[tokio::test]
#[redis_locked(key = "test")]
async fn locked_test() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
