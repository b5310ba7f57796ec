//! An election's record and its announcements, on the stores that have them: one Redis (or
//! Sentinel, or a Cluster) with scripts, and memory. The leadership itself is the election's
//! lock (taken, queued for, renewed and released as any lock); this is what observers
//! read: `<lock key>:leader` holds `<L|R> <term> <server ms> <label>` (elected or
//! resigned), written only by the lock's current holder, and every write is published on a
//! channel of the same name, in order.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt as _;
use tokio::sync::broadcast;

use crate::backend::lua::{self, Lua};
use crate::backend::{AnyBackend, Backend as _};
use crate::connection::notifier::Notifier;
use crate::key::LockKeys;
use crate::LockError;

const LIBRARY_NAME: &str = "lockcore_election_v1";

static PROCLAIM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "proclaim",
        include_str!("../scripts/election_proclaim.lua"),
    )
});

static LIBRARY: LazyLock<String> = LazyLock::new(|| lua::library(LIBRARY_NAME, &[&PROCLAIM]));

fn library() -> &'static str {
    LIBRARY.as_str()
}

/// The record's key, and the channel its changes are published on.
pub(crate) fn record_key(keys: &LockKeys) -> String {
    format!("{}:leader", keys.lock)
}

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// True: elected (leads since `at`); false: resigned at `at`.
    pub elected: bool,
    pub term: u64,
    /// The store's clock when it was written.
    pub at: SystemTime,
    pub label: String,
}

impl Record {
    pub fn parse(text: &str) -> Option<Record> {
        let mut parts = text.splitn(4, ' ');
        let elected = match parts.next()? {
            "L" => true,
            "R" => false,
            _ => return None,
        };
        let term = parts.next()?.parse().ok()?;
        let ms: u64 = parts.next()?.parse().ok()?;
        let label = parts.next().unwrap_or("").to_owned();
        Some(Record {
            elected,
            term,
            at: UNIX_EPOCH + Duration::from_millis(ms),
            label,
        })
    }

    fn render(elected: bool, term: u64, at_ms: u64, label: &str) -> String {
        let state = if elected { "L" } else { "R" };
        format!("{state} {term} {at_ms} {label}")
    }
}

/// Whether `backend` keeps election records; the reason if not.
pub(crate) fn supported(backend: &AnyBackend, name: &str) -> Result<(), LockError> {
    match backend {
        AnyBackend::Scripted(_) | AnyBackend::Memory(_) => Ok(()),
        AnyBackend::Redlock(_) | AnyBackend::Transaction(_) => Err(LockError::Config(format!(
            "election `{name}`: elections need one Redis (or Sentinel, or a Cluster) with Lua scripts, or the in-memory store; Redlock and WATCH/MULTI lockers have no atomic, ordered record of the leader"
        ))),
    }
}

/// Writes and announces the record, if `value` still holds the lock: the store's time it
/// wrote, or `None` when the lock is not ours.
pub(crate) async fn proclaim(
    backend: &AnyBackend,
    keys: &LockKeys,
    value: &str,
    elected: bool,
    term: u64,
    label: &str,
) -> Result<Option<SystemTime>, LockError> {
    supported(backend, &keys.name)?;
    match backend {
        AnyBackend::Scripted(scripted) => {
            let server = scripted.server();
            let record = record_key(keys);
            let term = term.to_string();
            let state = if elected { "L" } else { "R" };
            let at: i64 = server
                .run(
                    &PROCLAIM,
                    &keys.name,
                    &[&keys.lock, &record],
                    &[
                        value.as_bytes(),
                        state.as_bytes(),
                        term.as_bytes(),
                        label.as_bytes(),
                    ],
                )
                .await?;
            Ok(u64::try_from(at)
                .ok()
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)))
        }
        AnyBackend::Memory(memory) => {
            let state = backend.inspect(keys).await?;
            if state.value.as_deref() != Some(value) {
                return Ok(None);
            }
            let now = SystemTime::now();
            let ms = now.duration_since(UNIX_EPOCH).map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
            memory
                .elections()
                .write(&record_key(keys), Record::render(elected, term, ms, label));
            Ok(Some(UNIX_EPOCH + Duration::from_millis(ms)))
        }
        AnyBackend::Redlock(_) | AnyBackend::Transaction(_) => Ok(None),
    }
}

/// The record as stored, if any.
pub(crate) async fn record(
    backend: &AnyBackend,
    keys: &LockKeys,
) -> Result<Option<Record>, LockError> {
    supported(backend, &keys.name)?;
    let key = record_key(keys);
    let text: Option<String> = match backend {
        AnyBackend::Scripted(scripted) => {
            let lent = scripted.connection().get(&keys.name).await?;
            let mut conn = lent.conn.clone();
            redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .map_err(|err| LockError::from_redis(&keys.name, &key, err))?
        }
        AnyBackend::Memory(memory) => memory.elections().read(&key),
        AnyBackend::Redlock(_) | AnyBackend::Transaction(_) => None,
    };
    Ok(text.as_deref().and_then(Record::parse))
}

/// The records announced for one election, in the order they were written.
pub(crate) enum Feed {
    Redis(redis::aio::PubSubStream),
    Memory(broadcast::Receiver<String>),
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Feed::Redis(_) => "Feed::Redis",
            Feed::Memory(_) => "Feed::Memory",
        })
    }
}

/// Subscribes to the election's announcements; returns once subscribed, so that every
/// record written after this point arrives.
pub(crate) async fn subscribe(
    backend: &AnyBackend,
    notifier: Option<&Notifier>,
    keys: &LockKeys,
) -> Result<Feed, LockError> {
    supported(backend, &keys.name)?;
    let channel = record_key(keys);
    match (backend, notifier) {
        (AnyBackend::Memory(memory), _) => Ok(Feed::Memory(memory.elections().subscribe(&channel))),
        (_, Some(notifier)) => {
            let mut pubsub = notifier
                .open_pubsub()
                .await
                .map_err(|err| LockError::from_redis(&keys.name, &channel, err))?;
            pubsub
                .subscribe(&channel)
                .await
                .map_err(|err| LockError::from_redis(&keys.name, &channel, err))?;
            Ok(Feed::Redis(pubsub.into_on_message()))
        }
        (_, None) => Err(LockError::Config(format!(
            "election `{}`: observing needs a pub/sub connection; build the Locker from a URL, or give the builder a `pubsub_client`",
            keys.name
        ))),
    }
}

/// What the feed brought next.
pub(crate) enum Next {
    Record(Record),
    /// Messages may have been lost (the connection dropped, the reader fell behind): read
    /// the record again and subscribe anew.
    Gap,
}

impl Feed {
    pub async fn next(&mut self) -> Next {
        loop {
            let text = match self {
                Feed::Redis(stream) => match stream.next().await {
                    Some(message) => message.get_payload::<String>().ok(),
                    None => return Next::Gap,
                },
                Feed::Memory(receiver) => match receiver.recv().await {
                    Ok(text) => Some(text),
                    Err(_) => return Next::Gap,
                },
            };
            if let Some(record) = text.as_deref().and_then(Record::parse) {
                return Next::Record(record);
            }
        }
    }
}

/// The in-memory store's records and announcement channels.
#[derive(Default)]
pub(crate) struct MemoryBoard {
    records: Mutex<HashMap<String, Slot>>,
}

/// One election's record (if written yet) and its announcements.
struct Slot {
    record: Option<String>,
    announce: broadcast::Sender<String>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            record: None,
            announce: broadcast::channel(MEMORY_BACKLOG).0,
        }
    }
}

/// How many announcements an in-memory observer may fall behind before it reads again.
const MEMORY_BACKLOG: usize = 256;

impl MemoryBoard {
    fn write(&self, key: &str, record: String) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = records.entry(key.to_owned()).or_insert_with(Slot::new);
        slot.record = Some(record.clone());
        // No receiver is fine: nobody observes.
        let _ = slot.announce.send(record);
    }

    fn read(&self, key: &str) -> Option<String> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records.get(key).and_then(|slot| slot.record.clone())
    }

    fn subscribe(&self, key: &str) -> broadcast::Receiver<String> {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records
            .entry(key.to_owned())
            .or_insert_with(Slot::new)
            .announce
            .subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_with_spaces_in_labels() {
        let text = Record::render(true, 7, 1_700_000_000_123, "app@host 1:42");
        let record = Record::parse(&text).expect("parses");
        assert!(record.elected);
        assert_eq!(record.term, 7);
        assert_eq!(record.label, "app@host 1:42");
        assert_eq!(
            record.at,
            UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
        );
        assert_eq!(Record::parse("X 1 2 a"), None);
        assert_eq!(Record::parse("L x 2 a"), None);
    }
}
