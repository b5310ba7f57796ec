//! Metrics through the `metrics` facade (feature `metrics`): the application installs any
//! recorder (Prometheus, StatsD, ...) and gets these series.
//!
//! | series | kind | labels |
//! |---|---|---|
//! | `lock_acquire_total` | counter | `lock`, `outcome` = acquired, busy, timeout, deadlock (`Deadlock`, `WaitChainTooLong`), error |
//! | `lock_wait_seconds` | histogram | `lock`: time from the request to its outcome |
//! | `lock_hold_seconds` | histogram | `lock`: time from acquisition to release |
//! | `lock_lost_total` | counter | `lock`: leases found lost (expired, stolen, renewal failed) |
//! | `lock_renewals_total` | counter | `lock`, `outcome` = renewed, lost, error |
//! | `lock_fence_regressions_total` | counter | `lock`: grants whose fencing token was not above one this Locker had been handed for the name (a server clock behind another's; see `LockRequest::fencing`) |
//! | `lock_lost_by_push_total` | counter | `lock`: of `lock_lost_total`, the leases told at once because the server pushed a change of their key (key tracking) |
//! | `lock_eviction_risk` | gauge | none: 1 while the server's `maxmemory` and `maxmemory-policy` let it evict lock keys, or could not be read; 0 when it cannot (see `EvictionCheck`) |
//! | `lock_masters_without_replica` | gauge | none: masters (Cluster: slots) that had a replica and now have none connected, where `ReplicaSync::Auto` grants without waiting for acknowledgements |
//!
//! The `lock` label is the name's first segment, up to the first `:` (`orders` for
//! `orders:7`), cut to 32 bytes, so that cardinality stays bounded by the naming scheme
//! rather than by the number of orders. Names without `:` are reported as `_`.

use std::time::Instant;

/// The bounded label for `name`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) fn family(name: &str) -> &str {
    let Some((first, _)) = name.split_once(':') else {
        return "_";
    };
    let mut end = first.len().min(32);
    while !first.is_char_boundary(end) {
        end -= 1;
    }
    &first[..end]
}

/// The `lock` label of one acquisition, computed before the name moves into the request;
/// nothing at all without the `metrics` feature.
pub(crate) struct Family {
    #[cfg(feature = "metrics")]
    label: String,
}

impl Family {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn of(name: &str) -> Family {
        Family {
            #[cfg(feature = "metrics")]
            label: family(name).to_owned(),
        }
    }

    /// Records an acquisition begun at `begun` that ended now with `outcome` (the clock is
    /// read only with the `metrics` feature).
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn acquire(self, outcome: &'static str, begun: Instant) {
        #[cfg(feature = "metrics")]
        {
            metrics::counter!("lock_acquire_total", "lock" => self.label.clone(), "outcome" => outcome)
                .increment(1);
            metrics::histogram!("lock_wait_seconds", "lock" => self.label)
                .record(begun.elapsed().as_secs_f64());
        }
    }
}

#[cfg(feature = "metrics")]
mod enabled {
    use super::{family, Instant};

    /// A lease acquired at `acquired_at` was released now.
    pub(crate) fn released(name: &str, acquired_at: Instant) {
        metrics::histogram!("lock_hold_seconds", "lock" => family(name).to_owned())
            .record(acquired_at.elapsed().as_secs_f64());
    }

    pub(crate) fn lost(name: &str) {
        metrics::counter!("lock_lost_total", "lock" => family(name).to_owned()).increment(1);
    }

    pub(crate) fn renewal(name: &str, outcome: &'static str) {
        metrics::counter!("lock_renewals_total", "lock" => family(name).to_owned(), "outcome" => outcome)
            .increment(1);
    }

    pub(crate) fn eviction_risk(at_risk: bool) {
        metrics::gauge!("lock_eviction_risk").set(if at_risk { 1.0 } else { 0.0 });
    }

    pub(crate) fn tracked_loss(name: &str) {
        metrics::counter!("lock_lost_by_push_total", "lock" => family(name).to_owned())
            .increment(1);
    }

    pub(crate) fn unreplicated_master(bare: bool) {
        let gauge = metrics::gauge!("lock_masters_without_replica");
        if bare {
            gauge.increment(1.0);
        } else {
            gauge.decrement(1.0);
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod enabled {
    use super::Instant;

    #[inline(always)]
    pub(crate) fn released(_: &str, _: Instant) {}
    #[inline(always)]
    pub(crate) fn lost(_: &str) {}
    #[inline(always)]
    pub(crate) fn renewal(_: &str, _: &'static str) {}
    #[inline(always)]
    pub(crate) fn unreplicated_master(_: bool) {}
    #[inline(always)]
    pub(crate) fn eviction_risk(_: bool) {}
    #[inline(always)]
    pub(crate) fn tracked_loss(_: &str) {}
}

pub(crate) use enabled::{
    eviction_risk, lost, released, renewal, tracked_loss, unreplicated_master,
};

#[cfg(test)]
mod tests {
    use super::family;
    #[cfg(feature = "metrics")]
    use std::time::Instant;

    #[test]
    fn labels_are_bounded() {
        assert_eq!(family("orders:7"), "orders");
        assert_eq!(family("orders:7:lines"), "orders");
        assert_eq!(family("nightly-report"), "_");
        assert_eq!(family(&format!("{}:x", "é".repeat(40))).len(), 32);
    }

    #[cfg(feature = "metrics")]
    #[tokio::test]
    async fn series_are_recorded() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            super::Family::of("orders:1").acquire("acquired", Instant::now());
            super::Family::of("orders:2").acquire("busy", Instant::now());
            super::lost("orders:1");
        });
        let snapshot = snapshotter.snapshot().into_vec();
        let counter = |name: &str, outcome: Option<&str>| {
            snapshot
                .iter()
                .filter(|(key, _, _, _)| key.key().name() == name)
                .filter(|(key, _, _, _)| {
                    outcome.is_none_or(|o| {
                        key.key()
                            .labels()
                            .any(|l| l.key() == "outcome" && l.value() == o)
                    })
                })
                .filter(|(key, _, _, _)| {
                    key.key()
                        .labels()
                        .any(|l| l.key() == "lock" && l.value() == "orders")
                })
                .map(|(_, _, _, value)| match value {
                    DebugValue::Counter(n) => *n,
                    _ => 0,
                })
                .sum::<u64>()
        };
        assert_eq!(counter("lock_acquire_total", Some("acquired")), 1);
        assert_eq!(counter("lock_acquire_total", Some("busy")), 1);
        assert_eq!(counter("lock_lost_total", None), 1);
    }
}
