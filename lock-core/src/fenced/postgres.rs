//! [`PgStore`]: guarded writes to PostgreSQL, each one `UPDATE` or `INSERT .. ON CONFLICT`
//! whose `WHERE` carries the fencing check (feature `postgres`).

use std::fmt::Display;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Timeouts};
use tokio_postgres::types::ToSql;
use tracing::Instrument as _;

use crate::fenced::error::FenceError;
use crate::fenced::fence::{AsFence, Fence};

/// How long [`PgStore::connect`]'s pool waits to connect or for a free connection, and a
/// statement for its answer: the Locker's default command timeout.
const TIMEOUT: Duration = Duration::from_secs(3);

/// A table whose rows are guarded: which column is the key, and which two hold each row's
/// guard (`fence_token bigint` and `fence_lock text` unless renamed). Identifiers are
/// quoted, so they are taken as they are written (case included) and cannot inject SQL.
///
/// ```
/// use lock_core::fenced::PgTable;
///
/// let inventory = PgTable::new("inventory", "item_id").token_column("fence");
/// assert_eq!(inventory.name(), "inventory");
/// ```
#[derive(Debug, Clone)]
pub struct PgTable {
    name: String,
    quoted: String,
    key: String,
    token: String,
    lock: String,
}

impl PgTable {
    /// Table `name` (`schema.table` for another schema), rows found by `key_column`.
    pub fn new(name: &str, key_column: &str) -> PgTable {
        PgTable {
            name: name.to_owned(),
            quoted: name.split('.').map(quote).collect::<Vec<_>>().join("."),
            key: quote(key_column),
            token: quote("fence_token"),
            lock: quote("fence_lock"),
        }
    }

    /// The `bigint` column holding the highest token a write to the row was accepted with
    /// (`fence_token` unless set).
    pub fn token_column(mut self, column: &str) -> PgTable {
        self.token = quote(column);
        self
    }

    /// The `text` column holding the name of the lock whose tokens the row compares
    /// (`fence_lock` unless set).
    pub fn lock_column(mut self, column: &str) -> PgTable {
        self.lock = quote(column);
        self
    }

    /// The table's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `UPDATE t SET c1 = $3, .., token = $1, lock = $2 WHERE key = $n AND <check>`.
    fn update_sql(&self, columns: &[&str]) -> String {
        let (t, k, tok, lk) = (&self.quoted, &self.key, &self.token, &self.lock);
        let sets: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{} = ${}", quote(c), i + 3))
            .collect();
        format!(
            "UPDATE {t} SET {}, {tok} = $1, {lk} = $2 WHERE {k} = ${} \
             AND ({tok} IS NULL OR ({tok} <= $1 AND {lk} IS NOT DISTINCT FROM $2))",
            sets.join(", "),
            columns.len() + 3
        )
    }

    /// `INSERT .. ON CONFLICT (key) DO UPDATE .. WHERE <check>`.
    fn upsert_sql(&self, columns: &[&str]) -> String {
        let (t, k, tok, lk) = (&self.quoted, &self.key, &self.token, &self.lock);
        let names: Vec<String> = columns.iter().map(|c| quote(c)).collect();
        let values: Vec<String> = (0..columns.len()).map(|i| format!("${}", i + 3)).collect();
        let updates: Vec<String> = names
            .iter()
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        format!(
            "INSERT INTO {t} AS fenced ({}, {tok}, {lk}, {k}) VALUES ({}, $1, $2, ${}) \
             ON CONFLICT ({k}) DO UPDATE SET {}, {tok} = EXCLUDED.{tok}, {lk} = EXCLUDED.{lk} \
             WHERE fenced.{tok} IS NULL OR (fenced.{tok} <= EXCLUDED.{tok} \
             AND fenced.{lk} IS NOT DISTINCT FROM EXCLUDED.{lk})",
            names.join(", "),
            values.join(", "),
            columns.len() + 3,
            updates.join(", ")
        )
    }

    fn guard_sql(&self) -> String {
        format!(
            "SELECT {}, {} FROM {} WHERE {} = $1",
            self.token, self.lock, self.quoted, self.key
        )
    }
}

/// An SQL identifier in double quotes, inner quotes doubled.
fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// Guarded writes to PostgreSQL: each is one statement that applies only if the lease's
/// fencing token is at least the highest the row has accepted (and the row is guarded by
/// the same lock), and records it in the row. See [the module](crate::fenced) for the rule
/// and for the same statements written by hand.
///
/// ```no_run
/// use lock_core::fenced::{FenceError, PgStore, PgTable};
/// use lock_core::Locker;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let locker = Locker::from_url("redis://127.0.0.1:6379/")?;
/// let pg = PgStore::connect("postgres://app@127.0.0.1:5432/shop")?;
/// // CREATE TABLE inventory (item_id text PRIMARY KEY, stock bigint,
/// //                         fence_token bigint, fence_lock text);
/// let inventory = PgTable::new("inventory", "item_id");
///
/// let lease = locker.lock("item:17").fencing().await?;
/// match pg.upsert(&lease, &inventory, &"item:17", &[("stock", &41_i64)]).await {
///     Ok(()) => {}
///     Err(FenceError::Stale { token, seen, .. }) => eprintln!("stale: {token} < {seen}"),
///     Err(other) => return Err(other.into()),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    timeout: Duration,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Guarded writes through `pool`; each statement must answer within 3 s
    /// ([`PgStore::timeout`]), or fails with [`FenceError::Unavailable`].
    pub fn new(pool: Pool) -> PgStore {
        PgStore {
            pool,
            timeout: TIMEOUT,
        }
    }

    /// A pool of up to 8 connections to `config` (a `postgres://` URL or `key=value`
    /// pairs, as tokio-postgres reads them), without TLS, that connects within 3 s.
    pub fn connect(config: &str) -> Result<PgStore, FenceError> {
        let unsupported = |reason: String| FenceError::Unsupported { reason };
        let mut pg: tokio_postgres::Config = config.parse().map_err(|err| {
            unsupported(format!(
                "not a PostgreSQL connection string ({}): {err}",
                crate::redact::redact_url(config)
            ))
        })?;
        pg.connect_timeout(TIMEOUT);
        let manager = Manager::from_config(
            pg,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(8)
            .timeouts(Timeouts {
                wait: Some(TIMEOUT),
                create: Some(TIMEOUT),
                recycle: Some(TIMEOUT),
            })
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|err| unsupported(format!("cannot build the pool: {err}")))?;
        Ok(PgStore::new(pool))
    }

    /// How long a statement may take before it fails with [`FenceError::Unavailable`]
    /// (3 s unless set). A statement cut by it is applied entirely or not at all.
    pub fn timeout(mut self, timeout: Duration) -> PgStore {
        self.timeout = timeout;
        self
    }

    /// `UPDATE` the row `key` of `table` with `set`, if `fence`'s token is at least the
    /// row's. A missing row is [`FenceError::Store`] (nothing is written; see
    /// [`PgStore::upsert`]).
    pub async fn update<K: ToSql + Sync + Display>(
        &self,
        fence: impl AsFence,
        table: &PgTable,
        key: &K,
        set: &[(&str, &(dyn ToSql + Sync))],
    ) -> Result<(), FenceError> {
        let fence = fence.fence()?;
        let columns: Vec<&str> = set.iter().map(|(c, _)| *c).collect();
        let sql = table.update_sql(&columns);
        self.write("update", &fence, table, key, set, &sql).await
    }

    /// `INSERT` the row `key` of `table` with `set`, or `UPDATE` it if it exists, if
    /// `fence`'s token is at least the row's (`key_column` must have a unique index).
    pub async fn upsert<K: ToSql + Sync + Display>(
        &self,
        fence: impl AsFence,
        table: &PgTable,
        key: &K,
        set: &[(&str, &(dyn ToSql + Sync))],
    ) -> Result<(), FenceError> {
        let fence = fence.fence()?;
        let columns: Vec<&str> = set.iter().map(|(c, _)| *c).collect();
        let sql = table.upsert_sql(&columns);
        self.write("upsert", &fence, table, key, set, &sql).await
    }

    /// What the row `key` of `table` holds as its guard: the highest token written to it
    /// and the lock it compares, or `None` (no such row, or never written under a fence).
    pub async fn guard<K: ToSql + Sync + Display>(
        &self,
        table: &PgTable,
        key: &K,
    ) -> Result<Option<Fence>, FenceError> {
        let resource = format!("{}[{key}]", table.name);
        let sql = table.guard_sql();
        let row = self
            .bounded(&resource, async {
                let client = self.pool.get().await.map_err(pool_error)?;
                let statement = client.prepare_cached(&sql).await?;
                Ok(client.query_opt(&statement, &[key]).await?)
            })
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let token: Option<i64> = row.try_get(0).map_err(|err| store(&resource, &err))?;
        let lock: Option<String> = row.try_get(1).map_err(|err| store(&resource, &err))?;
        Ok(token
            .map(|token| Fence::new(lock.unwrap_or_default(), u64::try_from(token).unwrap_or(0))))
    }

    async fn write<K: ToSql + Sync + Display>(
        &self,
        op: &'static str,
        fence: &Fence,
        table: &PgTable,
        key: &K,
        set: &[(&str, &(dyn ToSql + Sync))],
        sql: &str,
    ) -> Result<(), FenceError> {
        let resource = format!("{}[{key}]", table.name);
        if set.is_empty() {
            return Err(FenceError::Script {
                reason: format!("a guarded {op} of `{resource}` needs at least one column"),
            });
        }
        let token = i64::try_from(fence.token()).map_err(|_| FenceError::Store {
            resource: resource.clone(),
            reason: format!("token {} does not fit a bigint", fence.token()),
        })?;
        let lock = fence.lock();
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(set.len() + 3);
        params.push(&token);
        params.push(&lock);
        params.extend(set.iter().map(|(_, value)| *value));
        params.push(key);
        let span = tracing::debug_span!(
            "lock.fenced_write",
            op,
            lock,
            token = fence.token(),
            resource = %resource
        );
        let written = self
            .bounded(&resource, async {
                let client = self.pool.get().await.map_err(pool_error)?;
                let statement = client.prepare_cached(sql).await?;
                Ok(client.execute(&statement, &params).await?)
            })
            .instrument(span)
            .await?;
        if written > 0 {
            return Ok(());
        }
        // Refused (or no such row): the row's guard says which. A read only after a
        // refusal, so that the write itself stays one statement.
        match self.guard(table, key).await? {
            None if op == "update" => Err(FenceError::Store {
                resource,
                reason: "no such row; nothing was written (upsert creates it)".to_owned(),
            }),
            Some(seen) if seen.lock() != lock => Err(FenceError::OtherLock {
                lock: lock.to_owned(),
                resource,
                guarded_by: seen.lock().to_owned(),
            }),
            seen => Err(FenceError::Stale {
                lock: lock.to_owned(),
                resource,
                token: fence.token(),
                seen: seen.map_or(0, |seen| seen.token()),
            }),
        }
    }

    /// `work` within the store's timeout; a failure or the timeout as [`FenceError`].
    async fn bounded<T>(
        &self,
        resource: &str,
        work: impl std::future::Future<Output = Result<T, PgFailure>>,
    ) -> Result<T, FenceError> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(PgFailure::Pool(reason))) => Err(FenceError::Unavailable {
                resource: resource.to_owned(),
                reason,
                source: None,
            }),
            Ok(Err(PgFailure::Postgres(err))) if err.as_db_error().is_none() => {
                Err(FenceError::Unavailable {
                    resource: resource.to_owned(),
                    reason: err.to_string(),
                    source: Some(Box::new(err)),
                })
            }
            Ok(Err(PgFailure::Postgres(err))) => Err(store(resource, &err)),
            Err(_) => Err(FenceError::Unavailable {
                resource: resource.to_owned(),
                reason: format!("PostgreSQL did not answer within {:?}", self.timeout),
                source: None,
            }),
        }
    }
}

/// What can fail on the way to PostgreSQL: the pool (no connection), or a statement.
enum PgFailure {
    Pool(String),
    Postgres(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for PgFailure {
    fn from(err: tokio_postgres::Error) -> PgFailure {
        PgFailure::Postgres(err)
    }
}

fn pool_error(err: deadpool_postgres::PoolError) -> PgFailure {
    PgFailure::Pool(format!("no connection to PostgreSQL: {err}"))
}

fn store(resource: &str, err: &dyn std::error::Error) -> FenceError {
    let reason = match err.source() {
        Some(source) => format!("{err}: {source}"),
        None => err.to_string(),
    };
    FenceError::Store {
        resource: resource.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_carry_the_check_in_their_where() {
        let table = PgTable::new("shop.inventory", "item_id");
        assert_eq!(
            table.update_sql(&["stock", "price"]),
            "UPDATE \"shop\".\"inventory\" SET \"stock\" = $3, \"price\" = $4, \"fence_token\" = $1, \
             \"fence_lock\" = $2 WHERE \"item_id\" = $5 AND (\"fence_token\" IS NULL OR \
             (\"fence_token\" <= $1 AND \"fence_lock\" IS NOT DISTINCT FROM $2))"
        );
        let upsert = table.upsert_sql(&["stock"]);
        assert!(upsert.starts_with(
            "INSERT INTO \"shop\".\"inventory\" AS fenced (\"stock\", \"fence_token\", \"fence_lock\", \"item_id\") \
             VALUES ($3, $1, $2, $4) ON CONFLICT (\"item_id\") DO UPDATE SET \"stock\" = EXCLUDED.\"stock\""
        ), "{upsert}");
        assert_eq!(quote("we\"ird"), "\"we\"\"ird\"");
    }
}
