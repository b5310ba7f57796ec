//! Values passed through `macro_rules!`: `$x:literal` and `$x:expr` arrive in invisible
//! groups, and a `$x:tt` template carries the caller's hygiene while the parameters it
//! names are the macro body's.
#![deny(warnings)]

use lock_core::{redis_locked, LockError};

macro_rules! locked_literal {
    ($name:ident, $key:literal, $ttl:literal, $renew:literal) => {
        #[redis_locked(key = $key, ttl = $ttl, wait = $ttl, renew = $renew)]
        async fn $name(id: u64) -> Result<u64, LockError> {
            Ok(id)
        }
    };
}

macro_rules! locked_expr {
    ($name:ident, $key:expr, $permits:expr) => {
        #[redis_locked(key = $key, permits = $permits)]
        async fn $name(id: u64) -> Result<u64, LockError> {
            Ok(id)
        }
    };
}

macro_rules! locked_tt {
    ($name:ident, $key:tt, $other:tt) => {
        #[redis_locked(keys = [$key, $other])]
        async fn $name(id: u64, user: &str) -> Result<u64, LockError> {
            Ok(id + user.len() as u64)
        }
    };
}

locked_literal!(by_literal, "acct:{id}", "2s", false);
locked_expr!(by_expr, "acct:{id}", 3);
locked_tt!(by_tt, "acct:{id}", "user:{user}");

fn main() {
    drop(by_literal(1));
    drop(by_expr(1));
    drop(by_tt(1, "a"));
}
