// A test target of the workspace (built and linted with it): the lints on the user code
// written here, not on what the attribute generates, are off.
#![allow(missing_debug_implementations)]
use std::sync::{Arc, LazyLock, OnceLock};

use lock_core::{redis_locked, LockError, Locker};

static LAZY: LazyLock<Locker> = LazyLock::new(Locker::memory);
static ONCE: OnceLock<Locker> = OnceLock::new();

pub struct AppState {
    pub locker: Locker,
}

pub struct State<T>(pub T);

pub struct Service {
    pub locks: Locker,
    pub shared: Arc<Locker>,
    pub boxed: Box<Locker>,
}

impl Service {
    #[redis_locked(key = "field:{n}", locker = self.locks)]
    async fn field(&self, n: u8) -> Result<u8, LockError> {
        Ok(n)
    }

    #[redis_locked(key = "arc:{n}", locker = self.shared)]
    async fn arc(&self, n: u8) -> Result<u8, LockError> {
        Ok(n)
    }

    #[redis_locked(key = "box:{n}", locker = self.boxed)]
    async fn boxed(&self, n: u8) -> Result<u8, LockError> {
        Ok(n)
    }
}

#[redis_locked(key = "state:{id}", locker = state.locker)]
async fn handler(State(state): State<Arc<AppState>>, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[redis_locked(key = "lazy", locker = LAZY)]
async fn lazy() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "once", locker = ONCE.get().expect("locker initialised at startup"))]
async fn once() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "param", locker = locker)]
async fn by_reference(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "owned", locker = locker)]
async fn by_value(locker: Locker) -> Result<Locker, LockError> {
    Ok(locker)
}

#[redis_locked(key = "block", locker = { let name = "unused"; let _ = name; &*LAZY })]
async fn block_expression() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "choose", locker = if primary { a } else { b })]
async fn choose(primary: bool, a: &Locker, b: &Locker) -> Result<bool, LockError> {
    Ok(primary)
}

#[redis_locked(key = "made", locker = Locker::memory())]
async fn temporary() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    drop(temporary());
    let _ = ONCE.set(Locker::memory());
    let state = Arc::new(AppState {
        locker: Locker::memory(),
    });
    drop(handler(State(state), 1));
    drop((lazy(), once(), block_expression()));
    let locker = Locker::memory();
    drop(by_reference(&locker));
    drop(by_value(locker.clone()));
    drop(choose(true, &locker, &locker));
    let service = Service {
        locks: locker.clone(),
        shared: Arc::new(locker.clone()),
        boxed: Box::new(locker),
    };
    drop((service.field(1), service.arc(1), service.boxed(1)));
}
