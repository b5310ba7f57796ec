// A test target of the workspace (built and linted with it): the lints on the user code
// written here, not on what the attribute generates, are off.
#![allow(missing_debug_implementations)]
use lock_core::{redis_locked, LockError};

#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
    SoldOut,
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

pub struct Buyer {
    pub funds: u64,
}

/// The contract example: docs and visibility stay.
#[redis_locked(key = "market:{item_id}", ttl = "10s", wait = "5s")]
pub async fn purchase_item(buyer: &Buyer, item_id: &str, seller: u64) -> Result<bool, AppError> {
    if buyer.funds == 0 {
        return Err(AppError::SoldOut);
    }
    let _ = (item_id, seller);
    Ok(true)
}

#[redis_locked(key = "jobs:nightly")]
async fn constant_key() -> Result<(), LockError> {
    Ok(())
}

#[redis_locked(key = "{{literal}}:{n}", ttl = "1m30s", wait = "0s")]
async fn braces_and_question_mark(n: u32) -> Result<u32, AppError> {
    let parsed: u32 = "7".parse().map_err(|_| AppError::SoldOut)?;
    Ok(parsed + n)
}

#[redis_locked(key = "raw:{r#type}", ttl = "250ms")]
async fn raw_identifier(r#type: &str) -> Result<usize, LockError> {
    Ok(r#type.len())
}

#[redis_locked(key = "boxed:{n}")]
async fn boxed_error(n: u8) -> Result<u8, Box<dyn std::error::Error + Send + Sync>> {
    Ok(n)
}

mod app {
    pub type Result<T> = std::result::Result<T, super::AppError>;
}

#[redis_locked(key = "alias:{n}")]
async fn result_alias(n: u8) -> app::Result<u8> {
    Ok(n)
}

#[redis_locked(key = "impl:{n}")]
async fn impl_trait_in_result(n: u8) -> Result<impl std::fmt::Display, LockError> {
    Ok(n)
}

#[redis_locked(key = "mutable:{n}")]
async fn mutable_param(mut n: u32) -> Result<u32, LockError> {
    n += 1;
    Ok(n)
}

fn main() {
    drop(purchase_item(&Buyer { funds: 1 }, "sword", 7));
    drop(constant_key());
    drop(braces_and_question_mark(1));
    drop(raw_identifier("t"));
    drop(boxed_error(1));
    drop(result_alias(1));
    drop(impl_trait_in_result(1));
    drop(mutable_param(1));
}
