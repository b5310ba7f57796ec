//! Which [`LockError`] a Redis error raised while working on a lock is.

use super::LockError;

impl LockError {
    /// Classifies a Redis error raised while working on lock `name`.
    pub(crate) fn from_redis(name: &str, key: &str, err: redis::RedisError) -> LockError {
        if err.code() == Some("WRONGTYPE") || err.to_string().contains("WRONGTYPE") {
            return LockError::WrongType {
                name: name.to_owned(),
                key: key.to_owned(),
            };
        }
        if let Some(reason) = crate::refusal::misconfiguration(&err, "the server") {
            return LockError::Misconfigured {
                name: name.to_owned(),
                reason,
                source: Some(Box::new(err)),
            };
        }
        if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_timeout()
            || err.is_unrecoverable_error()
        {
            return LockError::Connection {
                name: name.to_owned(),
                reason: err.to_string(),
                source: Some(Box::new(err)),
            };
        }
        // A Cluster's slot whose master failed or changed: redis-rs followed the
        // redirections and waited out CLUSTERDOWN for its 16 tries; the election (a second
        // or two) outlasted them. A waiting request retries, as after a dropped connection.
        if let Some(state) = cluster_in_flux(&err) {
            return LockError::Connection {
                name: name.to_owned(),
                reason: format!("{state} ({err})"),
                source: Some(Box::new(err)),
            };
        }
        if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain) {
            return LockError::SlotMigrating {
                name: name.to_owned(),
                source: err,
            };
        }
        LockError::Redis {
            name: name.to_owned(),
            source: err,
        }
    }
}

impl LockError {
    /// Whether Redis refused the command without running it: a Cluster slot with no
    /// master, redirected past redis-rs's retries, or in migration. Run again, such a
    /// command meets the state it would have met the first time. (After other transient
    /// errors, a dropped connection or a command timeout, the command may have run.)
    pub(crate) fn refused_unrun(&self) -> bool {
        match self {
            LockError::SlotMigrating { .. } => true,
            LockError::Connection {
                source: Some(source),
                ..
            } => source
                .downcast_ref::<redis::RedisError>()
                .is_some_and(|err| cluster_in_flux(err).is_some()),
            _ => false,
        }
    }
}

/// What a Cluster's redirection or availability error left after redis-rs's retries says
/// of the cluster, if it is one.
fn cluster_in_flux(err: &redis::RedisError) -> Option<&'static str> {
    use redis::ServerErrorKind as Kind;
    match err.kind() {
        redis::ErrorKind::Server(Kind::Moved | Kind::Ask) => {
            Some("the Redis Cluster kept redirecting the lock's slot to another node (a failover or a slot move under way)")
        }
        redis::ErrorKind::Server(Kind::ClusterDown | Kind::MasterDown) => {
            Some("the Redis Cluster has no master for the lock's slot (a failover under way)")
        }
        _ => None,
    }
}
