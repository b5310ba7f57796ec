//! One module per scenario. Each runs one contender for a fixed time and returns figures.

pub mod hot;
pub mod uncontended;

/// Reads Redis's `total_commands_processed` (scripts' inner calls are not counted there;
/// commandstats is used where that matters).
pub async fn commands_processed(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap_or_default();
    info.lines()
        .find_map(|line| line.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}
