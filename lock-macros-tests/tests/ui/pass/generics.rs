use std::fmt::Display;

use lock_core::{redis_locked, LockError};

#[redis_locked(key = "item:{id}:{tag}", ttl = "2s")]
async fn generic<'a, T, U: Send>(id: T, tag: &'a str, extra: U) -> Result<(T, U), LockError>
where
    T: Display + Send + 'a,
{
    let _ = tag;
    Ok((id, extra))
}

struct Store<K> {
    key: K,
}

impl<K: Display + Sync> Store<K> {
    #[redis_locked(key = "store:{self.key}")]
    async fn get<const N: usize>(&self, n: [u8; N]) -> Result<usize, LockError>
    where
        K: Clone,
    {
        let _ = self.key.clone();
        Ok(n.len())
    }
}

#[redis_locked(key = "borrowed:{text}")]
async fn borrowed_output(text: &str) -> Result<&str, LockError> {
    Ok(text)
}

fn main() {
    drop(generic(1u8, "t", ()));
    let store = Store { key: "k" };
    drop(store.get([1, 2]));
    drop(borrowed_output("x"));
}
