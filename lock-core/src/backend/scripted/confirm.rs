//! The replica acknowledgement check of a lock's grant, which went out on the shared
//! connection: confirmed from one of the check's own connections, so that only the grant
//! waits for replicas.

use std::time::Duration;

use super::calls::EXTEND;
use super::Scripted;
use crate::backend::millis;
use crate::backend::replicated::Replicated;
use crate::connection::shared::{is_connection_failure, Conn};
use crate::key::LockKeys;
use crate::LockError;

impl Scripted {
    /// Confirms a grant of `value` made on the shared connection `conn` with the replica
    /// check: from one of the check's connections, a conditional extension (the lock's own
    /// `extend`, a write only while `value` holds the lock on that server) and `WAIT`
    /// behind it, in one round trip. Whether the check applies is asked on `conn` (with
    /// `ReplicaSync::Auto`, a master not seen with replicas is looked at every few seconds).
    pub(super) async fn confirm_grant(
        &self,
        replicated: &Replicated,
        conn: &mut Conn,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
    ) -> Result<(), LockError> {
        if !replicated.required(conn, &keys.lock).await {
            return Ok(());
        }
        // Dropped before the answer (the request's deadline): noted for the request, which
        // then reports that replication is what it was waiting for.
        let watch = replicated.watch_wait(value);
        let confirmed = self.cover_and_wait(replicated, keys, value, ttl).await;
        watch.done();
        confirmed
    }

    /// The conditional extension and `WAIT` of [`Scripted::confirm_grant`].
    async fn cover_and_wait(
        &self,
        replicated: &Replicated,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
    ) -> Result<(), LockError> {
        let ttl = millis(ttl).to_string();
        let args: [&[u8]; 2] = [value.as_bytes(), ttl.as_bytes()];
        let cover = EXTEND.mode_command(self.mode, &[&keys.lock], &args);
        match replicated
            .confirm_covered(&self.conn, &keys.name, &keys.lock, cover)
            .await
        {
            Ok(()) => Ok(()),
            Err(Some(err)) => Err(err),
            // The server lacks the script (a restart, a failover): run it with loading,
            // then wait, on one of the check's connections.
            Err(None) => {
                let Some(dedicated) = replicated.connection() else {
                    return Ok(());
                };
                let lent = dedicated.get(&keys.name).await?;
                let mut conn = lent.conn.clone();
                let covered = EXTEND
                    .run::<i64>(self.mode, &mut conn, &[&keys.lock], &args)
                    .await
                    .map_err(|err| {
                        if is_connection_failure(&err) {
                            dedicated.retire(&lent);
                        }
                        LockError::from_redis(&keys.name, &keys.lock, err)
                    })?;
                replicated
                    .confirm_after(&mut conn, &keys.name, &keys.lock, covered == 1)
                    .await
            }
        }
    }
}

impl Scripted {
    /// See [`AnyBackend::replica_wait_cut`](crate::backend::AnyBackend::replica_wait_cut).
    pub(crate) fn replica_wait_cut(&self, value: &str) -> Option<(u32, Duration)> {
        self.replicated.as_ref()?.was_cut(value)
    }
}
