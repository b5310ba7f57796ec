//! The fenced resource: a Redis key on a store of its own that accepts a write only if its
//! fencing token is above every token it has seen for that lock name.
//!
//! The store is a separate `redis-server` that no fault touches, so its answers are the
//! ground truth: it keeps, per name, the highest token seen (`fence:high:{name}`) and the
//! list of accepted writes in the order it accepted them (`fence:log:{name}`), which the
//! checker reads back after the run.

use redis::aio::MultiplexedConnection;
use redis::Script;

/// Check-and-set in one atomic step. KEYS: high-water mark, accepted-writes list.
/// ARGV: token, writer id. Returns 1 when written, 0 when refused.
/// Tokens are compared as decimal integers (by length, then digit by digit), exactly over
/// all of u64: Lua's numbers would round the election's `term * ACTIONS + n` tokens.
const FENCED_WRITE: &str = r"
local high = redis.call('GET', KEYS[1]) or '0'
local token = ARGV[1]
if #token < #high or (#token == #high and token <= high) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1";

/// The key clients bump after each acquisition, so the orchestrator can see progress.
pub const PROGRESS_KEY: &str = "torture:progress";

/// A connection to the fenced store.
#[derive(Clone)]
pub struct FencedStore {
    conn: MultiplexedConnection,
    script: std::sync::Arc<Script>,
}

impl std::fmt::Debug for FencedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedStore").finish_non_exhaustive()
    }
}

impl FencedStore {
    /// Connects to the store at `url`.
    pub async fn connect(url: &str) -> redis::RedisResult<FencedStore> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(FencedStore {
            conn,
            script: std::sync::Arc::new(Script::new(FENCED_WRITE)),
        })
    }

    /// Writes on behalf of acquisition `writer` holding fencing token `token` for `name`:
    /// true if accepted.
    pub async fn write(&self, name: &str, token: u64, writer: &str) -> redis::RedisResult<bool> {
        let mut conn = self.conn.clone();
        let accepted: i64 = self
            .script
            .key(high_key(name))
            .key(log_key(name))
            .arg(token)
            .arg(writer)
            .invoke_async(&mut conn)
            .await?;
        Ok(accepted == 1)
    }

    /// Counts one more acquisition.
    pub async fn progress(&self) -> redis::RedisResult<u64> {
        let mut conn = self.conn.clone();
        redis::cmd("INCR")
            .arg(PROGRESS_KEY)
            .query_async(&mut conn)
            .await
    }

    /// Acquisitions counted so far.
    pub async fn progress_count(&self) -> redis::RedisResult<u64> {
        let mut conn = self.conn.clone();
        let n: Option<u64> = redis::cmd("GET")
            .arg(PROGRESS_KEY)
            .query_async(&mut conn)
            .await?;
        Ok(n.unwrap_or(0))
    }

    /// The writes the store accepted for `name`, in the order it accepted them:
    /// `(token, writer id)`.
    pub async fn accepted(&self, name: &str) -> redis::RedisResult<Vec<(u64, String)>> {
        let mut conn = self.conn.clone();
        let entries: Vec<String> = redis::cmd("LRANGE")
            .arg(log_key(name))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?;
        Ok(entries.iter().filter_map(|e| parse_entry(e)).collect())
    }
}

/// The store key holding the highest token seen for `name`.
pub fn high_key(name: &str) -> String {
    format!("fence:high:{{{name}}}")
}

/// The list of accepted writes for `name`.
pub fn log_key(name: &str) -> String {
    format!("fence:log:{{{name}}}")
}

/// One entry of the accepted-writes list: `"<token> <writer>"`.
pub fn parse_entry(entry: &str) -> Option<(u64, String)> {
    let (token, writer) = entry.split_once(' ')?;
    Some((token.parse().ok()?, writer.to_owned()))
}
