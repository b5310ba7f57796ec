//! Key tracking on a Redis Cluster (connections layer, feature `cluster`): one watch
//! connection ([`Watcher`], `CLIENT TRACKING on`) per master that serves a watched key,
//! shared by every lease of the Locker whose key lives there.
//!
//! A key is read on the master of its slot ([`crate::slot::cluster_slot`]), as the
//! Cluster's own `CLUSTER SLOTS` map names it: one `MGET` per slot (a multi-key command
//! must stay in one slot), the slots of one node sent together on its connection. The map
//! is read again whenever it may be out of date, and the keys concerned are left unread
//! for their owner to read again, never taken for unchanged:
//!
//! - a node answers `MOVED`, `ASK`, `TRYAGAIN` or `CLUSTERDOWN` (a slot moved, or is
//!   moving; a failover under way);
//! - a node's connection fails or drops (its listener is told, as on one server, that
//!   everything it tracked may have changed);
//! - a node's heartbeat (`ROLE`, [`NodeWatchers::heartbeat`]) finds it no longer a master
//!   (a failover that left it running, as a replica), or gets no answer.
//!
//! A master whose read or heartbeat failed is taken for down: its keys are left unread,
//! without waiting for it, so that a stalled master holds up no other master's leases,
//! while a probe reconnects to it in the background (then every lease looks again) or
//! the slot map names another master for its slots.
//!
//! A slot that moves away takes its keys with it (`MIGRATE` deletes them on the old node),
//! which the old node pushes as an invalidation: the re-read is answered `MOVED`, the map
//! read again, and the key read (and tracked) on its new master.
//!
//! The eviction check reads every master's settings, each time one's connection opens;
//! the Locker is told of the riskiest (one master that may evict locks is enough).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::{ConnectionAddr, Value};

use crate::connection::watcher::{resp3, Eviction, WatchDial, WatchError, WatchListener, Watcher};
use crate::slot::cluster_slot;
use crate::undo::Undo;

/// A node: `host:port`.
type Node = String;

/// The watch connections of a Locker on a Redis Cluster.
pub(crate) struct NodeWatchers {
    /// RESP3 clients of the seeds: where the slot map is first read.
    seeds: Vec<redis::Client>,
    /// The first seed's: the template (credentials, TLS) of every node's client.
    template: redis::Client,
    timeout: Duration,
    track: bool,
    listener: Weak<dyn WatchListener>,
    /// Each master's eviction settings, as its last connection read them.
    findings: Arc<Mutex<HashMap<Node, Result<Eviction, String>>>>,
    map: Arc<Mutex<SlotMap>>,
    /// Masters that failed a read or a heartbeat: their keys are left unread (not waited
    /// for, so that the other masters' keys are read meanwhile) until a probe reconnects
    /// to them or the slot map stops naming them.
    down: Arc<Mutex<HashSet<Node>>>,
    /// The watch connection of each master, and the listener that tags its reports.
    nodes: Mutex<HashMap<Node, NodeWatch>>,
    /// Turns the slot-map reads among the known nodes and seeds.
    asked: std::sync::atomic::AtomicUsize,
}

/// A master's watch connection, and the listener that passes its reports on (kept alive
/// here: the watcher holds it weakly).
type NodeWatch = (Arc<Watcher>, Arc<NodeListener>);

/// The seeds' clients, speaking RESP3.
pub(crate) struct Seeds {
    first: redis::Client,
    all: Vec<redis::Client>,
}

impl Seeds {
    /// `seeds` speaking RESP3; `None` when none can.
    pub fn new(seeds: &[redis::Client]) -> Option<Seeds> {
        let all: Vec<redis::Client> = seeds.iter().filter_map(resp3).collect();
        Some(Seeds {
            first: all.first()?.clone(),
            all,
        })
    }
}

/// Slot ranges and their masters, from `CLUSTER SLOTS`.
#[derive(Default)]
struct SlotMap {
    ranges: Vec<(u16, u16, Node)>,
    /// A node said the map is out of date, or failed: read it again before the next read.
    stale: bool,
}

impl SlotMap {
    fn master_of(&self, slot: u16) -> Option<&Node> {
        self.ranges
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, node)| node)
    }

    fn masters(&self) -> Vec<Node> {
        let mut masters: Vec<Node> = self.ranges.iter().map(|(_, _, n)| n.clone()).collect();
        masters.sort();
        masters.dedup();
        masters
    }
}

/// What one node's connection tells, passed on to the Locker's listener; its eviction
/// settings are kept per node and the riskiest passed on.
struct NodeListener {
    node: Node,
    inner: Weak<dyn WatchListener>,
    findings: Arc<Mutex<HashMap<Node, Result<Eviction, String>>>>,
}

impl WatchListener for NodeListener {
    fn invalidated(&self, keys: Vec<Vec<u8>>) {
        if let Some(inner) = self.inner.upgrade() {
            inner.invalidated(keys);
        }
    }

    fn everything(&self, generation: Option<u64>) {
        if let Some(inner) = self.inner.upgrade() {
            inner.everything(generation);
        }
    }

    fn opened(&self, generation: u64, eviction: Result<Eviction, String>) {
        let riskiest = {
            let mut findings = lock(&self.findings);
            findings.insert(self.node.clone(), eviction);
            riskiest(&findings)
        };
        if let Some(inner) = self.inner.upgrade() {
            inner.opened(generation, riskiest);
        }
    }
}

/// The finding to report over every master: a failure to read one, else a master that may
/// evict locks, else any (all safe).
fn riskiest(findings: &HashMap<Node, Result<Eviction, String>>) -> Result<Eviction, String> {
    let mut sorted: Vec<(&Node, &Result<Eviction, String>)> = findings.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    if let Some((node, Err(reason))) = sorted.iter().find(|(_, found)| found.is_err()) {
        return Err(format!("on {node}: {reason}"));
    }
    let evicting = sorted
        .iter()
        .filter_map(|(_, found)| found.as_ref().ok())
        .find(|eviction| eviction.may_evict_locks());
    let any = sorted.iter().find_map(|(_, found)| found.as_ref().ok());
    evicting
        .or(any)
        .cloned()
        .ok_or_else(|| "no master was read".to_owned())
}

impl NodeWatchers {
    /// The watch connections of a Locker on the Cluster that `seeds` reach, telling
    /// `listener`.
    pub fn new(
        seeds: Seeds,
        timeout: Duration,
        track: bool,
        listener: Weak<dyn WatchListener>,
    ) -> NodeWatchers {
        NodeWatchers {
            seeds: seeds.all,
            template: seeds.first,
            timeout,
            track,
            listener,
            findings: Arc::default(),
            map: Arc::default(),
            down: Arc::default(),
            nodes: Mutex::default(),
            asked: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Opens a watch connection to every master (reading each one's eviction settings).
    pub async fn ensure_open(&self) -> Result<(), WatchError> {
        self.refresh_if_needed().await?;
        let masters = lock(&self.map).masters();
        let opened = join_all(masters.iter().map(|node| {
            let watcher = self.watcher(node);
            async move { watcher.ensure_open().await }
        }))
        .await;
        opened.into_iter().collect()
    }

    /// Reads `keys` on the masters of their slots (one `MGET` per slot), and so asks each
    /// master to push their next change. Per key: `Some(value)` if read (`None` inside: the
    /// key is absent), `None` if it could not be read now (its slot moved or is moving, its
    /// master failed): read it again later.
    pub async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Option<Vec<u8>>>>, WatchError> {
        let mut values: Vec<Option<Option<Vec<u8>>>> = vec![None; keys.len()];
        match self.refresh_if_needed().await {
            Ok(()) => {}
            Err(WatchError::Refused(reason)) => return Err(WatchError::Refused(reason)),
            Err(_) => return Ok(values),
        }
        // Node -> slot -> indexes of the keys.
        let mut groups: HashMap<Node, HashMap<u16, Vec<usize>>> = HashMap::new();
        {
            let mut map = lock(&self.map);
            for (index, key) in keys.iter().enumerate() {
                let slot = cluster_slot(key.as_bytes());
                match map.master_of(slot) {
                    Some(node) => groups
                        .entry(node.clone())
                        .or_default()
                        .entry(slot)
                        .or_default()
                        .push(index),
                    None => map.stale = true,
                }
            }
        }
        {
            let down = lock(&self.down);
            let before = groups.len();
            groups.retain(|node, _| !down.contains(node));
            if groups.len() < before {
                // Where did those slots go? Asked again before the next read.
                lock(&self.map).stale = true;
            }
        }
        let reads = groups.into_iter().flat_map(|(node, slots)| {
            let watcher = self.watcher(&node);
            slots.into_values().map(move |indexes| {
                let watcher = Arc::clone(&watcher);
                let node = node.clone();
                async move {
                    let batch: Vec<&str> = indexes.iter().map(|&i| keys[i]).collect();
                    (node, indexes, watcher.read(&batch).await)
                }
            })
        });
        let mut refused = None;
        for (node, indexes, result) in join_all(reads).await {
            match result {
                Ok(read) => {
                    for (index, value) in indexes.into_iter().zip(read) {
                        values[index] = Some(value);
                    }
                }
                Err(WatchError::Refused(reason)) => refused = Some(reason),
                Err(WatchError::Redirected(err)) => {
                    tracing::debug!(%node, %err, "a watched key's slot is not served there now; the slot map is read again");
                    lock(&self.map).stale = true;
                }
                Err(WatchError::Failed(err)) => {
                    tracing::debug!(%node, %err, "a master's watch connection failed; its keys are read again once it answers or the slot map names another master");
                    lock(&self.map).stale = true;
                    self.mark_down(&node);
                }
            }
        }
        match refused {
            Some(reason) => Err(WatchError::Refused(reason)),
            None => Ok(values),
        }
    }

    /// The heartbeat of every master's connection (`ROLE`): false if one did not answer or
    /// is no longer a master (its connection is then retired, or the slot map read again),
    /// so that every lease looks again.
    pub async fn heartbeat(&self) -> bool {
        let watchers: Vec<(Node, Arc<Watcher>)> = lock(&self.nodes)
            .iter()
            .map(|(node, (watcher, _))| (node.clone(), Arc::clone(watcher)))
            .collect();
        let roles = join_all(watchers.iter().map(|(_, watcher)| watcher.role())).await;
        let mut fine = true;
        for ((node, _), role) in watchers.iter().zip(roles) {
            match role {
                Ok(Some(true) | None) => {}
                Ok(Some(false)) => {
                    tracing::debug!(%node, "a watched node is no longer a master; the slot map is read again");
                    fine = false;
                }
                Err(_) => {
                    self.mark_down(node);
                    fine = false;
                }
            }
        }
        if !fine {
            lock(&self.map).stale = true;
        }
        fine
    }

    /// Takes `node` for down until a probe reconnects to it (every lease then looks again)
    /// or the slot map stops naming it as a master.
    fn mark_down(&self, node: &Node) {
        if !lock(&self.down).insert(node.clone()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            lock(&self.down).remove(node);
            return;
        };
        let probe = Probe {
            node: node.clone(),
            watcher: Arc::downgrade(&self.watcher(node)),
            down: Arc::clone(&self.down),
            map: Arc::clone(&self.map),
            listener: self.listener.clone(),
        };
        runtime.spawn(probe.run());
    }

    /// The watch connection of `node` (made on first use).
    fn watcher(&self, node: &Node) -> Arc<Watcher> {
        let mut nodes = lock(&self.nodes);
        if let Some((watcher, _)) = nodes.get(node) {
            return Arc::clone(watcher);
        }
        let listener = Arc::new(NodeListener {
            node: node.clone(),
            inner: self.listener.clone(),
            findings: Arc::clone(&self.findings),
        });
        let weak: Weak<dyn WatchListener> = Arc::downgrade(&listener) as Weak<dyn WatchListener>;
        let watcher = Arc::new(Watcher::new(
            WatchDial::Client(self.client_for(node)),
            self.timeout,
            self.track,
            weak,
        ));
        nodes.insert(node.clone(), (Arc::clone(&watcher), listener));
        watcher
    }

    /// A RESP3 client of `node`, with the first seed's credentials and TLS settings.
    fn client_for(&self, node: &Node) -> redis::Client {
        let template = &self.template;
        let info = template.get_connection_info().clone();
        let (host, port) = split(node);
        let addr = match info.addr().clone() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        redis::Client::open(info.set_addr(addr)).unwrap_or_else(|_| template.clone())
    }

    async fn refresh_if_needed(&self) -> Result<(), WatchError> {
        let needed = {
            let map = lock(&self.map);
            map.stale || map.ranges.is_empty()
        };
        if needed {
            self.refresh().await?;
        }
        Ok(())
    }

    /// Reads the slot map again (`CLUSTER SLOTS`), from the known masters and the seeds in
    /// turn; retires the connections of nodes that are no longer masters.
    async fn refresh(&self) -> Result<(), WatchError> {
        // The masters that answer first, then the seeds, then the masters taken for down.
        let (down, up): (Vec<Node>, Vec<Node>) = {
            let down = lock(&self.down);
            lock(&self.map)
                .masters()
                .into_iter()
                .partition(|node| down.contains(node))
        };
        let mut candidates: Vec<redis::Client> =
            up.iter().map(|node| self.client_for(node)).collect();
        candidates.extend(
            self.seeds
                .iter()
                .filter(|seed| !down.contains(&node_of(seed)))
                .cloned(),
        );
        // Turns among those (a node that answers with an old map is not asked every time).
        let turn = self
            .asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !candidates.is_empty() {
            let by = turn % candidates.len();
            candidates.rotate_left(by);
        }
        candidates.extend(down.iter().map(|node| self.client_for(node)));
        let mut last = None;
        for client in &candidates {
            match self.slots_from(client).await {
                Ok(ranges) if !ranges.is_empty() => {
                    let masters = {
                        let mut map = lock(&self.map);
                        map.ranges = ranges;
                        map.stale = false;
                        map.masters()
                    };
                    lock(&self.nodes).retain(|node, _| masters.contains(node));
                    lock(&self.down).retain(|node| masters.contains(node));
                    lock(&self.findings).retain(|node, _| masters.contains(node));
                    return Ok(());
                }
                Ok(_) => {}
                Err(err) if is_refused(&err) => {
                    return Err(WatchError::Refused(format!(
                        "CLUSTER SLOTS was refused: {err}"
                    )))
                }
                Err(err) => last = Some(err),
            }
        }
        Err(WatchError::Failed(last.unwrap_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::Io,
                "no Cluster node answered CLUSTER SLOTS with a slot",
            ))
        })))
    }

    /// `CLUSTER SLOTS` as `client`'s node sees it.
    async fn slots_from(
        &self,
        client: &redis::Client,
    ) -> redis::RedisResult<Vec<(u16, u16, Node)>> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let reply: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await?;
        let (asked, _) = split(&node_of(client));
        Ok(parse_slots(&reply, &asked))
    }
}

/// Reconnects to a master taken for down, with a growing pause, until it answers (then
/// every lease looks again) or the slot map stops naming it (its slots are read on their
/// new master), or the Locker is gone.
struct Probe {
    node: Node,
    watcher: Weak<Watcher>,
    down: Arc<Mutex<HashSet<Node>>>,
    map: Arc<Mutex<SlotMap>>,
    listener: Weak<dyn WatchListener>,
}

impl Probe {
    /// Probes until the node answers or is no longer a master. Dropped with its runtime
    /// (before its first poll, too: the guard is made here, not in the future), it takes
    /// the node's mark back: the next failed read there marks it down again and starts a
    /// probe on the runtime of the day.
    fn run(self) -> impl std::future::Future<Output = ()> + Send {
        let (down, node) = (Arc::clone(&self.down), self.node.clone());
        let unfinished = Undo::new(move || {
            lock(&down).remove(&node);
        });
        async move {
            self.until_settled().await;
            unfinished.disarm();
        }
    }

    async fn until_settled(self) {
        let mut pause = Duration::from_millis(50);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            let named = lock(&self.map).masters().contains(&self.node);
            let watcher = self.watcher.upgrade();
            let (true, Some(watcher), Some(_)) = (named, watcher, self.listener.upgrade()) else {
                lock(&self.down).remove(&self.node);
                return;
            };
            if watcher.ensure_open().await.is_ok() {
                lock(&self.down).remove(&self.node);
                tracing::debug!(node = %self.node, "a master taken for down answers again");
                if let Some(listener) = self.listener.upgrade() {
                    listener.everything(None);
                }
                return;
            }
        }
    }
}

/// The slot ranges and masters of a `CLUSTER SLOTS` reply: `[start, end, [host, port,
/// id, ...], replicas...]` per range. A master named without a host (`""` or `"?"`) is
/// on the host that was asked.
fn parse_slots(reply: &Value, asked_host: &str) -> Vec<(u16, u16, Node)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let start = int(fields.first()?)?;
            let end = int(fields.get(1)?)?;
            let Value::Array(master) = fields.get(2)? else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(host) => String::from_utf8(host.clone()).ok()?,
                Value::SimpleString(host) => host.clone(),
                _ => return None,
            };
            let host = if host.is_empty() || host == "?" {
                asked_host.to_owned()
            } else {
                host
            };
            let port = int(master.get(1)?)?;
            Some((start, end, format!("{host}:{port}")))
        })
        .collect()
}

/// The server refused a command for good (unknown, renamed away, or denied by an ACL).
fn is_refused(err: &redis::RedisError) -> bool {
    let text = err.to_string().to_ascii_lowercase();
    err.code() == Some("NOPERM")
        || text.contains("unknown command")
        || text.contains("unknown subcommand")
}

fn int(value: &Value) -> Option<u16> {
    match value {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

/// The `host:port` a client dials (empty for a local socket).
fn node_of(client: &redis::Client) -> Node {
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        _ => String::new(),
    }
}

/// `host:port` apart (the port after the last colon).
fn split(node: &str) -> (String, u16) {
    match node.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().unwrap_or(6379)),
        None => (node.to_owned(), 6379),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn the_slot_map_is_read_from_cluster_slots() {
        let range = |start, end, host: &str, port| {
            Value::Array(vec![
                Value::Int(start),
                Value::Int(end),
                Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]),
                Value::Array(vec![bulk("10.0.0.9"), Value::Int(7005), bulk("replica")]),
            ])
        };
        let reply = Value::Array(vec![
            range(0, 5460, "10.0.0.1", 7000),
            range(5461, 16383, "", 7001),
        ]);
        let map = SlotMap {
            ranges: parse_slots(&reply, "10.0.0.2"),
            stale: false,
        };
        assert_eq!(map.master_of(0).map(String::as_str), Some("10.0.0.1:7000"));
        assert_eq!(
            map.master_of(5461).map(String::as_str),
            Some("10.0.0.2:7001")
        );
        assert_eq!(map.masters().len(), 2);
        assert!(parse_slots(&Value::Nil, "h").is_empty());
    }

    #[test]
    fn the_riskiest_finding_over_the_masters_is_reported() {
        let eviction = |policy: &str, maxmemory| {
            Ok(Eviction {
                policy: policy.into(),
                maxmemory,
            })
        };
        let mut findings = HashMap::new();
        findings.insert("a:1".to_owned(), eviction("noeviction", 0));
        findings.insert("b:1".to_owned(), eviction("volatile-lru", 1 << 20));
        assert_eq!(riskiest(&findings), eviction("volatile-lru", 1 << 20));
        findings.insert("c:1".to_owned(), Err("INFO refused".to_owned()));
        assert!(riskiest(&findings).is_err_and(|reason| reason.contains("c:1")));
    }
}
