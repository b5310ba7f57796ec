// What `#[async_trait]` on an impl makes of `async fn charge(&self, id: u64) -> Result<(),
// LockError>` before the method's own attributes run (written out: the crate is not a
// dependency of these tests).
use std::future::Future;
use std::pin::Pin;

use lock_core::{redis_locked, LockError};

struct Billing;

impl Billing {
    #[redis_locked(key = "bill:{id}")]
    fn charge<'life0, 'async_trait>(
        &'life0 self,
        id: u64,
    ) -> Pin<Box<dyn Future<Output = Result<(), LockError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let _ = id;
            Ok(())
        })
    }
}

fn main() {}
