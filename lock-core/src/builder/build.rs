//! `LockerBuilder::build`: settings to connections, a backend and the engine.

use deadpool_redis::Pool;

use super::{Label, LockerBuilder, Protocol, Store, DEFAULT_REDIS_URL, REDIS_URL_ENV};
use crate::backend::memory::Memory;
use crate::backend::redlock::Redlock;
use crate::backend::replicated::Replicated;
use crate::backend::scripted::Scripted;
use crate::backend::ticket::TicketClock;
use crate::backend::transaction::Transactional;
use crate::backend::AnyBackend;
use crate::connection::connect;
use crate::connection::notifier::Notifier;
use crate::connection::shared::{SharedConnection, Source};
use crate::engine::{Engine, Settings};
use crate::limits::{validate_ttl, validate_wait};
use crate::redact::redact_url;
use crate::token::{bound_label, default_label};
use crate::{LockError, Locker};

impl LockerBuilder {
    /// Builds the locker. Fails on a malformed URL or an out-of-range setting; does not
    /// connect yet.
    pub fn build(mut self) -> Result<Locker, LockError> {
        validate_ttl("(default)", self.default_ttl)?;
        validate_wait("(default)", self.default_wait)?;
        if self.command_timeout.is_zero() {
            return Err(LockError::Config(
                "command_timeout must be above zero".into(),
            ));
        }
        self.validate_sync_timeout()?;
        let settings = self.settings();
        let store = std::mem::replace(&mut self.store, Store::Env);
        // A pool built elsewhere may have no response timeout; WATCH/MULTI bounds each
        // operation itself.
        let commands_bounded =
            !matches!(store, Store::Pool(_)) || self.protocol == Protocol::Transactions;
        let pubsub_client = self.pubsub_client.take();
        if pubsub_client.is_some() && !matches!(store, Store::Pool(_)) {
            return Err(LockError::Config(
                "pubsub_client is for a locker on a pool; other lockers open their own".into(),
            ));
        }
        let mut watch = None;
        let mut direct = None;
        let (pool, notifier, address) = match store {
            Store::Memory => {
                let backend = AnyBackend::Memory(Memory::default());
                return Ok(assemble(backend, settings, None, true));
            }
            Store::Pool(pool) => {
                let notifier =
                    pubsub_client.map(|client| Notifier::new(client, own_channel(&settings)));
                (pool, notifier, None)
            }
            Store::Redlock(urls) => return self.build_redlock(&urls, settings),
            #[cfg(feature = "cluster")]
            Store::Cluster(seeds) => return self.build_cluster(&seeds, settings),
            #[cfg(feature = "sentinel")]
            Store::Sentinel { sentinels, master } => {
                return self.build_sentinel(sentinels, master, settings)
            }
            Store::Env | Store::Url(_) => {
                let url = match store {
                    Store::Url(url) => url,
                    _ => std::env::var(REDIS_URL_ENV)
                        .unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned()),
                };
                let (pool, dial, opened_directly) =
                    connect::pool(&url, self.pool_size, self.command_timeout, &self.tls)?;
                watch = self.loss_watch(&dial);
                let notifier = Some(Notifier::new(dial, own_channel(&settings)));
                direct = Some(opened_directly);
                (pool, notifier, Some(redact_url(&url)))
            }
        };
        let backend = match self.protocol {
            Protocol::Scripts => {
                // On a URL, the shared connection is opened by this Locker's own client,
                // its commands bounded without a timer each (see `connection/deadlines.rs`);
                // a pool built elsewhere keeps its connections' own response timeout.
                let source = match direct {
                    Some(direct) => Source::Direct(Box::new(direct)),
                    None => Source::Pool(pool),
                };
                let replicated = self.replicated(&source);
                AnyBackend::Scripted(
                    Scripted::new(
                        SharedConnection::new(source, settings.command_timeout, address),
                        self.script_mode,
                        &waiters(&settings),
                    )
                    .with_replica_sync(replicated),
                )
            }
            Protocol::Transactions => {
                let replicated = self
                    .replica_sync
                    .rule(self.sync_timeout_or_default())
                    .map(Replicated::on_callers_connections);
                AnyBackend::Transaction(
                    Transactional::new(
                        pool,
                        settings.command_timeout,
                        address,
                        &waiters(&settings),
                    )
                    .with_replica_sync(replicated),
                )
            }
        };
        Ok(Locker::from_engine(
            Engine::new(backend, settings, notifier, commands_bounded).watched_by(watch),
        ))
    }

    /// The loss watch and server check of a Locker on the one server `dial` reaches (the
    /// Sentinels' master included).
    fn loss_watch(
        &self,
        dial: &connect::Dial,
    ) -> Option<std::sync::Arc<crate::engine::watch::LossWatch>> {
        crate::engine::watch::LossWatch::new(
            dial,
            self.command_timeout,
            self.track_keys && self.protocol == Protocol::Scripts,
            self.eviction_check,
        )
    }

    fn build_redlock(&self, urls: &[String], settings: Settings) -> Result<Locker, LockError> {
        if urls.is_empty() {
            return Err(LockError::Config(
                "redlock needs at least one Redis URL".into(),
            ));
        }
        if self.protocol != Protocol::Scripts {
            return Err(LockError::Config(
                "redlock runs on Lua scripts; Protocol::Transactions is for a single server".into(),
            ));
        }
        if self.node_timeout.is_zero() || self.node_timeout >= settings.default_ttl {
            return Err(LockError::Config(format!(
                "node_timeout {:?} must be above zero and well under the TTL",
                self.node_timeout
            )));
        }
        let mut nodes = Vec::with_capacity(urls.len());
        let mut dials = Vec::with_capacity(urls.len());
        for url in urls {
            let (direct, dial) = connect::direct(url, self.command_timeout, &self.tls)?;
            dials.push(dial);
            nodes.push(
                Scripted::new(
                    SharedConnection::new(
                        Source::Direct(Box::new(direct)),
                        self.command_timeout,
                        Some(redact_url(url)),
                    ),
                    self.script_mode,
                    &waiters(&settings),
                )
                .redlock_master(),
            );
        }
        // A waiter queue on every master, ordered by the waiters' tickets, so that the
        // masters' queues agree and a release hands the lock to the same head on each; the
        // head, told its turn on its channel by every master (any of them may be down or
        // behind), claims it on a majority.
        let channel = own_channel(&settings);
        let mut notifiers = dials
            .into_iter()
            .map(|dial| Notifier::new(dial, channel.clone()));
        let notifier = notifiers.next();
        let others = notifiers.collect();
        let tickets = TicketClock::skewed(self.ticket_skew_ms.saturating_mul(1000));
        let backend = AnyBackend::Redlock(Redlock::new(nodes, self.node_timeout, tickets));
        Ok(Locker::from_engine(
            Engine::new(backend, settings, notifier, false).told_by_other_masters(others),
        ))
    }

    #[cfg(feature = "cluster")]
    fn build_cluster(&self, seeds: &[String], settings: Settings) -> Result<Locker, LockError> {
        self.scripts_only("a Redis Cluster")?;
        // Turns and releases are announced with SPUBLISH in the lock's shard, where the
        // notifier subscribes (SSUBSCRIBE on the slot's master, followed when the slot
        // moves or fails over): a message stays in one shard instead of crossing the cluster's bus to
        // every node. The release script cannot see that subscription (`PUBSUB NUMSUB` is
        // per node), so a marked release is announced without asking.
        let (client, dial, shards) = connect::cluster(seeds, self.command_timeout, &self.tls)?;
        // Key tracking and the eviction check: one watch connection per master.
        let watch = crate::engine::watch::LossWatch::on_cluster(
            &connect::seed_clients(seeds, &self.tls),
            self.command_timeout,
            self.track_keys,
            self.eviction_check,
        );
        let notifier = dial.map(|dial| Notifier::sharded(dial, shards, &own_channel(&settings)));
        let source = Source::Cluster(Box::new(client));
        let replicated = self.replicated(&source);
        let conn = SharedConnection::new(source, self.command_timeout, None);
        let backend = AnyBackend::Scripted(
            // `$` in front: the scripts tell this Locker's waiters in the lock's shard (see
            // `Notifier::sharded`, whose own channel carries the same mark).
            Scripted::new(conn, self.script_mode, &format!("${}", waiters(&settings)))
                .announcing_in_shards()
                .with_replica_sync(replicated),
        );
        Ok(Locker::from_engine(
            Engine::new(backend, settings, notifier, true).watched_by(watch),
        ))
    }

    #[cfg(feature = "sentinel")]
    fn build_sentinel(
        &self,
        sentinels: Vec<String>,
        master: String,
        settings: Settings,
    ) -> Result<Locker, LockError> {
        self.scripts_only("Sentinel")?;
        let client = connect::sentinel(sentinels, master.clone(), &self.tls)?;
        // No response timeout: each command on the master is bounded by the command timeout
        // through the shared connection's deadlines (see `connection/deadlines.rs`).
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.command_timeout))
            .set_response_timeout(None);
        // The notifier asks the Sentinels for the master whenever it (re)connects, and
        // reconnects at each switch, so after a failover its subscription moves to the new
        // master with the lock commands.
        let switches = crate::connection::sentinel::Switches::new(master);
        let dial = connect::Dial::Sentinel {
            client: std::sync::Arc::clone(&client),
            switches: std::sync::Arc::clone(&switches),
            timeout: self.command_timeout,
        };
        // Key tracking and the eviction check on the master the Sentinels name, again after
        // each switch.
        let watch = self.loss_watch(&dial);
        let notifier = Notifier::new(dial, own_channel(&settings));
        let source = Source::Sentinel {
            client,
            config: Box::new(config),
            switches,
        };
        let replicated = self.replicated(&source);
        let conn = SharedConnection::new(source, self.command_timeout, None);
        let backend = AnyBackend::Scripted(
            Scripted::new(conn, self.script_mode, &waiters(&settings))
                .with_replica_sync(replicated),
        );
        Ok(Locker::from_engine(
            Engine::new(backend, settings, Some(notifier), true).watched_by(watch),
        ))
    }

    #[cfg(any(feature = "cluster", feature = "sentinel"))]
    fn scripts_only(&self, what: &str) -> Result<(), LockError> {
        if self.protocol == Protocol::Scripts {
            return Ok(());
        }
        Err(LockError::Config(format!(
            "{what} runs on Lua scripts; Protocol::Transactions is for a single server"
        )))
    }

    pub(super) fn build_infallible(self) -> Locker {
        let settings = self.settings();
        assemble(AnyBackend::Memory(Memory::default()), settings, None, true)
    }

    /// The sync timeout, checked against the command timeout (`WAIT` must answer within
    /// the connection's response timeout, with the write before it).
    fn sync_timeout_or_default(&self) -> std::time::Duration {
        self.sync_timeout.unwrap_or_else(|| {
            crate::replication::DEFAULT_SYNC_TIMEOUT.min(self.command_timeout / 2)
        })
    }

    fn validate_sync_timeout(&self) -> Result<(), LockError> {
        let timeout = self.sync_timeout_or_default();
        if timeout.is_zero() || timeout >= self.command_timeout {
            return Err(LockError::Config(format!(
                "sync_timeout {timeout:?} must be above zero and under the command timeout ({:?}): WAIT answers on a connection whose every reply is bounded by it",
                self.command_timeout
            )));
        }
        Ok(())
    }

    /// The replica acknowledgement check's connections, when it is on.
    fn replicated(&self, source: &Source) -> Option<Replicated> {
        let rule = self.replica_sync.rule(self.sync_timeout_or_default())?;
        Some(Replicated::new(source, self.command_timeout, rule))
    }

    /// A locker on `pool` with these settings and no notifier: its waiters poll.
    pub(super) fn pool_locker(self, pool: Pool) -> Locker {
        let settings = self.settings();
        let source = Source::Pool(pool);
        let replicated = self.replicated(&source);
        let conn = SharedConnection::new(source, settings.command_timeout, None);
        let backend = AnyBackend::Scripted(
            Scripted::new(conn, self.script_mode, &waiters(&settings))
                .with_replica_sync(replicated),
        );
        assemble(backend, settings, None, false)
    }

    fn settings(&self) -> Settings {
        let label = match &self.label {
            Label::Default { app } => Some(default_label(app.as_deref())),
            Label::Custom(label) => Some(bound_label(label.clone())),
            Label::Off => None,
        };
        Settings {
            prefix: self.prefix.clone(),
            default_ttl: self.default_ttl,
            default_wait: self.default_wait,
            label,
            fencing: self.fencing,
            command_timeout: self.command_timeout,
            unreachable_timeout: self.unreachable_timeout,
        }
    }
}

/// A Locker on `backend`: its engine, shared by its clones.
fn assemble(
    backend: AnyBackend,
    settings: Settings,
    notifier: Option<Notifier>,
    commands_bounded: bool,
) -> Locker {
    Locker::from_engine(Engine::new(backend, settings, notifier, commands_bounded))
}

/// A channel name of this Locker's own (`<prefix>waiters:<16 random hex digits>`): its
/// name in waiter queues (see `backend::queue_member`), where its turns are announced. Not
/// a secret: a forged message only makes a waiter look at Redis once more.
fn own_channel(settings: &Settings) -> String {
    format!("{}{:016x}", waiters(settings), fastrand::u64(..))
}

/// The waiters' channel prefix: what every Locker's own channel begins with.
fn waiters(settings: &Settings) -> String {
    format!("{}waiters:", settings.prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_config_errors() {
        for url in ["", "http://x", "redis://:99999999/", "not a url"] {
            let err = Locker::from_url(url).unwrap_err();
            assert!(matches!(err, LockError::Config(_)), "{url}: {err:?}");
        }
    }

    #[test]
    fn locker_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Locker>();
    }
}
