//! The floor of a semaphore cycle's Redis execution time: lock-core's two permit scripts
//! (take, give back) against two scripts that make the same five inner calls with no logic
//! at all (`TIME`, `ZMSCORE` of the state and the member, one `ZADD`; `ZREM`, `ZINCRBY`),
//! and against the plain lock's floor (`SET NX PX`, then a one-call compare-and-delete
//! script). Redis execution time comes from `INFO commandstats` (the `usec` of the commands
//! sent, the scripts' inner calls included), so the client's own speed does not enter it;
//! the cycles are pipelined, 500 at a time, on one permit set of 8 permits whose members
//! cycle over 64 (as lock-bench's S2). The three are measured in turn, round after round,
//! and the median of the rounds is printed.
//!
//! ```sh
//! cargo run --release -p lock-bench --example permit_floor -- redis://127.0.0.1:6379/ 7
//! ```
//!
//! The second argument is the number of rounds (5 by default). It flushes nothing, but
//! writes the keys `permit-floor:*` and resets the server's statistics.

use redis::aio::MultiplexedConnection;

const CYCLES: usize = 20_000;
const BATCH: usize = 500;

/// A permit script's text with the shared functions where lock-core puts them.
fn with_lib(script: &str) -> String {
    let lib = include_str!("../../lock-core/src/scripts/permits_lib.lua");
    script.replace("--[[permits_lib]]", lib)
}

const SKELETON_TAKE: &str = "\
local t = redis.call('TIME')
local r = redis.call('ZMSCORE', KEYS[1], '#c', '#w', '#l', '#q', '#h', '#e', '#t', ARGV[1])
redis.call('ZADD', KEYS[1], 5, ARGV[1], -1, '#w')
return {1, 0, -1}";

const SKELETON_GIVE_BACK: &str = "\
local ours = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZINCRBY', KEYS[1], 1, '#w')
return {ours}";

const COMPARE_AND_DELETE: &str = "\
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0";

async fn load(conn: &mut MultiplexedConnection, text: &str) -> redis::RedisResult<String> {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(text)
        .query_async(conn)
        .await
}

/// Microseconds Redis spent in the commands clients sent (scripts, `SET`) since the last
/// `CONFIG RESETSTAT`.
async fn exec_usec(conn: &mut MultiplexedConnection) -> redis::RedisResult<f64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_set:"))
        .filter_map(|line| {
            line.split(',')
                .find_map(|field| field.strip_prefix("usec="))
                .and_then(|usec| usec.parse::<f64>().ok())
        })
        .sum())
}

/// Redis execution µs per permit cycle of `take` then `give_back` (script SHAs).
async fn permit_cycles(
    conn: &mut MultiplexedConnection,
    take: &str,
    give_back: &str,
) -> redis::RedisResult<f64> {
    let (h, q) = ("permit-floor:{s}:sem", "permit-floor:{s}:sem:q");
    redis::cmd("DEL").arg(h).arg(q).exec_async(conn).await?;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec_async(conn)
        .await?;
    for start in (0..CYCLES).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for i in start..start + BATCH {
            let member = format!("1 v{}", i % 64);
            // Take: member, ttl ms, capacity, weight, no queue entry, claim window, life,
            // no channel (lock-core's plain try).
            pipe.cmd("EVALSHA")
                .arg(take)
                .arg(2)
                .arg(h)
                .arg(q)
                .arg(&member)
                .arg(30_000)
                .arg(8)
                .arg(1)
                .arg("")
                .arg(100)
                .arg(0)
                .arg("")
                .ignore();
            pipe.cmd("EVALSHA")
                .arg(give_back)
                .arg(2)
                .arg(h)
                .arg(q)
                .arg(&member)
                .arg(100)
                .arg("")
                .arg("")
                .ignore();
        }
        pipe.exec_async(conn).await?;
    }
    Ok(exec_usec(conn).await? / CYCLES as f64)
}

/// Redis execution µs per plain-lock cycle at the floor: `SET NX PX`, compare-and-delete.
async fn lock_cycles(conn: &mut MultiplexedConnection, release: &str) -> redis::RedisResult<f64> {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec_async(conn)
        .await?;
    for start in (0..CYCLES).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for i in start..start + BATCH {
            let key = format!("permit-floor:{{n{}}}", i % 64);
            pipe.cmd("SET")
                .arg(&key)
                .arg("v")
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .ignore();
            pipe.cmd("EVALSHA")
                .arg(release)
                .arg(1)
                .arg(&key)
                .arg("v")
                .ignore();
        }
        pipe.exec_async(conn).await?;
    }
    Ok(exec_usec(conn).await? / CYCLES as f64)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| lock_core::DEFAULT_REDIS_URL.to_owned());
    let rounds: usize = args.next().map_or(Ok(5), |n| n.parse())?.max(1);
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let take = load(
        &mut conn,
        &with_lib(include_str!(
            "../../lock-core/src/scripts/permits_acquire.lua"
        )),
    )
    .await?;
    let give_back = load(
        &mut conn,
        &with_lib(include_str!(
            "../../lock-core/src/scripts/permits_release.lua"
        )),
    )
    .await?;
    let skeleton_take = load(&mut conn, SKELETON_TAKE).await?;
    let skeleton_give_back = load(&mut conn, SKELETON_GIVE_BACK).await?;
    let release = load(&mut conn, COMPARE_AND_DELETE).await?;
    let (mut ours, mut skeleton, mut lock) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        ours.push(permit_cycles(&mut conn, &take, &give_back).await?);
        skeleton.push(permit_cycles(&mut conn, &skeleton_take, &skeleton_give_back).await?);
        lock.push(lock_cycles(&mut conn, &release).await?);
    }
    let show = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("Redis exec µs per cycle, {rounds} rounds of {CYCLES} cycles (median; each round):");
    let (o, s, l) = (median(&mut ours), median(&mut skeleton), median(&mut lock));
    println!("- lock-core permit scripts: {o:.2} ({})", show(&ours));
    println!(
        "- skeleton, same inner calls, no logic: {s:.2} ({})",
        show(&skeleton)
    );
    println!(
        "- plain lock floor (SET NX PX + compare-and-delete): {l:.2} ({})",
        show(&lock)
    );
    println!(
        "permit scripts / plain lock floor: {:.2}x; skeleton / plain lock floor: {:.2}x; \
         permit scripts / skeleton: {:.2}x",
        o / l,
        s / l,
        o / s
    );
    Ok(())
}
