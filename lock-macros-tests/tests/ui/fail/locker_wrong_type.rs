use lock_core::{redis_locked, LockError};

pub struct Service {
    pub name: String,
}

impl Service {
    #[redis_locked(key = "svc", locker = self.name)]
    async fn call(&self) -> Result<(), LockError> {
        Ok(())
    }
}

fn main() {}
