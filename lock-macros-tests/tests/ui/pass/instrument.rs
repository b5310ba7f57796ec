// A test target of the workspace (built and linted with it): the lints on the user code
// written here, not on what the attribute generates, are off.
#![allow(missing_debug_implementations)]
use lock_core::{redis_locked, LockError};

#[tracing::instrument(level = "debug")]
#[redis_locked(key = "traced:{id}", ttl = "1s")]
async fn instrument_outside(id: u64) -> Result<u64, LockError> {
    tracing::debug!("inside");
    Ok(id)
}

#[redis_locked(key = "traced:{id}", ttl = "1s")]
#[tracing::instrument(skip(name), err(Debug))]
async fn instrument_inside(id: u64, name: &str) -> Result<usize, LockError> {
    Ok(name.len())
}

pub struct Service {
    pub id: u32,
}

impl Service {
    #[tracing::instrument(skip(self), fields(service = self.id))]
    #[redis_locked(key = "service:{self.id}:{n}")]
    async fn call(&self, n: u32) -> Result<u32, LockError> {
        Ok(n)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(instrument_outside(1));
    assert_send(instrument_inside(1, "x"));
    assert_send(Service { id: 1 }.call(2));
}
