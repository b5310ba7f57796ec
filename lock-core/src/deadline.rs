//! Bounding an operation by a deadline.

use std::future::Future;
use std::time::Duration;

use crate::LockError;

/// `operation`, or a [`LockError::Connection`] if it takes longer than `limit`.
pub(crate) async fn within<T>(
    limit: Duration,
    name: &str,
    operation: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    match tokio::time::timeout(limit, operation).await {
        Ok(result) => result,
        Err(_) => Err(LockError::connection(
            name,
            format!("no answer from Redis within {limit:?}"),
        )),
    }
}
