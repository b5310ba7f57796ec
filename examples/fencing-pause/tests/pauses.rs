//! The demonstration runs end to end on a private redis-server (and PostgreSQL when it is
//! installed): plain writes lose every paused holder's update, guarded ones none, and the
//! program says so with its exit code.

use std::process::Command;

#[test]
fn plain_writes_lose_updates_and_guarded_writes_lose_none() {
    let server = lock_tests::RedisServer::start();
    let output = Command::new(env!("CARGO_BIN_EXE_fencing-pause"))
        .args(["--pauses", "40", "--ttl-ms", "50", "--concurrency", "10"])
        .env("REDIS_URL", server.url())
        .output()
        .expect("run fencing-pause");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|line| line.starts_with("redis ") || line.starts_with("postgres "))
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert!(rows.len() >= 2, "{stdout}");
    for row in rows {
        // store, writes, pauses, stale landed, lost updates, refused, told tokens, secs
        let expected: [&str; 5] = if row[1] == "plain" {
            ["40", "40", "40", "0", "0"]
        } else {
            ["40", "0", "0", "40", "40"]
        };
        assert_eq!(row[2..7], expected, "{stdout}");
    }
    assert_eq!(server.command(&["DBSIZE"]), ":0\r\n", "keys left behind");
}
