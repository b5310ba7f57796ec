//! The messages and classification of [`LockError`](super::LockError).

use super::*;

#[test]
fn busy_message_names_lock_and_holder() {
    let err = LockError::Busy {
        name: "orders:7".into(),
        holder: Some("web-1:42".into()),
        retry_after: Some(Duration::from_millis(1500)),

        wait_setting: Default::default(),
    };
    let text = err.to_string();
    assert!(text.contains("`orders:7`"), "{text}");
    assert!(text.contains("held by web-1:42"), "{text}");
    assert!(text.contains("1.5s"), "{text}");
    // What is known: when the lease ends unless renewed, not when the lock is free.
    assert!(
        text.contains("its lease ends in 1.5s unless renewed"),
        "{text}"
    );
    assert!(!text.contains("at most"), "{text}");
    assert!(err.is_contention());
    assert_eq!(err.retry_after(), Some(Duration::from_millis(1500)));
}

/// Issue 27: the advice names the setting where the request's wait is set.
#[test]
fn contention_advice_names_the_wait_setting() {
    let busy = |setting| {
        LockError::Busy {
            name: "a".into(),
            holder: None,
            retry_after: None,
            wait_setting: WaitSetting::Request,
        }
        .waiting_through(setting)
        .to_string()
    };
    assert!(busy(WaitSetting::Request).ends_with("wait for it with .wait(..)"));
    assert!(busy(WaitSetting::Attribute)
        .ends_with("wait for it with `wait = \"..\"` on #[redis_locked]"));
    assert!(busy(WaitSetting::Layer).ends_with("wait for it with LockLayer::wait(..)"));
    let timeout = LockError::Timeout {
        name: "a".into(),
        waited: Duration::from_millis(5),
        holder: None,
        retry_after: None,
        wait_setting: WaitSetting::Request,
    }
    .waiting_through(WaitSetting::Layer);
    assert!(
        timeout.to_string().contains("raise LockLayer::wait(..)"),
        "{timeout}"
    );
    // A busy semaphore keeps the setting when it becomes a full one.
    let full = LockError::Busy {
        name: "s".into(),
        holder: None,
        retry_after: None,
        wait_setting: WaitSetting::Attribute,
    }
    .into_limit_of(2, 1);
    assert!(
        full.to_string()
            .ends_with("wait for a permit with `wait = \"..\"` on #[redis_locked]"),
        "{full}"
    );
    // Other errors are left as they are.
    let lost = LockError::Lost { name: "a".into() }.waiting_through(WaitSetting::Layer);
    assert!(matches!(lost, LockError::Lost { .. }));
}

/// A Cluster electing a new master for the lock's slot outlasts redis-rs's retries:
/// what is left is transient, so that a waiting request rides it out.
#[test]
fn a_cluster_in_a_failover_is_a_transient_error() {
    use redis::{ErrorKind, ServerErrorKind};
    for (kind, code) in [
        (ServerErrorKind::Moved, "MOVED"),
        (ServerErrorKind::Ask, "ASK"),
        (ServerErrorKind::ClusterDown, "CLUSTERDOWN"),
        (ServerErrorKind::MasterDown, "MASTERDOWN"),
    ] {
        let err = redis::RedisError::from((
            ErrorKind::Server(kind),
            code,
            "14145 127.0.0.1:7001".to_owned(),
        ));
        let err = LockError::from_redis("x", "lock:{x}", err);
        assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
        assert!(err.is_transient(), "{err}");
        assert!(err.refused_unrun(), "{err}");
        assert!(err.to_string().contains("Redis Cluster"), "{err}");
    }
    // A command timeout or a dropped connection may have run the command.
    let timed_out = LockError::from_redis(
        "x",
        "lock:{x}",
        redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)),
    );
    assert!(
        timed_out.is_transient() && !timed_out.refused_unrun(),
        "{timed_out:?}"
    );
    assert!(!LockError::connection("x", "timed out").refused_unrun());
}

#[test]
fn durations_are_shown_as_they_are_written() {
    for (duration, text) in [
        (Duration::ZERO, "0s"),
        (Duration::from_millis(1), "1ms"),
        (Duration::from_millis(1500), "1s500ms"),
        (Duration::from_secs(90), "1m30s"),
        (Duration::from_secs(25 * 3600), "25h"),
        (Duration::from_micros(1500), "1.5ms"),
    ] {
        assert_eq!(shown(duration), text);
    }
    let err = LockError::InvalidDuration {
        name: "a".into(),
        what: "ttl",
        value: Duration::ZERO,
        reason: "r".into(),
    };
    assert_eq!(err.to_string(), "invalid ttl 0s for lock `a`: r");
}

#[test]
fn name_is_none_for_config_errors() {
    assert_eq!(LockError::Config("bad".into()).name(), None);
    assert_eq!(LockError::Lost { name: "a".into() }.name(), Some("a"));
}
