//! `lockctl watch`: events as they happen.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use lock_core::Locker;
use lock_tests::RedisServer;
use rustix::process::Signal;

use crate::support::{lockctl, run, signal, wait_for, SOON};

/// Starts `lockctl watch ARGS` and hands its stdout lines over a channel.
fn watch(server: &RedisServer, args: &[&str]) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = lockctl(server)
        .arg("watch")
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    (child, receive)
}

fn next(lines: &mpsc::Receiver<String>) -> String {
    lines
        .recv_timeout(SOON)
        .expect("watch printed nothing in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_acquire_release_and_forced_release() {
    let server = RedisServer::start();
    let name = "ünï cødé job";
    let (mut child, lines) = watch(&server, &[name, "--count", "4"]);
    let first = next(&lines);
    assert!(first.contains(" free "), "{first}");
    assert!(first.contains(&format!("lock `{name}` is free")), "{first}");

    let locker = Locker::builder()
        .url(server.url())
        .app_name("reporter")
        .build()
        .unwrap();
    let label = locker.holder_label().unwrap().to_owned();
    let lease = locker
        .lock(name)
        .ttl(Duration::from_secs(30))
        .await
        .unwrap();
    let acquired = next(&lines);
    assert!(acquired.contains(" acquired "), "{acquired}");
    assert!(acquired.contains(&label), "{acquired}");
    // An RFC 3339 timestamp in UTC first.
    assert!(
        acquired.split(' ').next().unwrap().ends_with('Z'),
        "{acquired}"
    );

    assert!(lease.release().await.unwrap());
    let released = next(&lines);
    assert!(released.contains(" released "), "{released}");
    assert!(released.contains(&label), "{released}");

    let _held = locker
        .lock(name)
        .ttl(Duration::from_secs(30))
        .await
        .unwrap();
    assert!(next(&lines).contains(" acquired "));
    assert_eq!(run(&server, &["release", name, "--force"]).code, Some(0));
    let forced = next(&lines);
    assert!(forced.contains(" force-released "), "{forced}");
    assert!(forced.contains(&label), "{forced}");

    // --count 4 reached: watch ends by itself.
    assert_eq!(wait_for(&mut child, "watch"), Some(0));
}

#[test]
fn reports_expiry_as_json_and_stops_on_ctrl_c() {
    let server = RedisServer::start();
    let (mut child, lines) = watch(&server, &["exp", "--json"]);
    let first: serde_json::Value = serde_json::from_str(&next(&lines)).unwrap();
    assert_eq!(first["event"], "free");
    server.command(&[
        "SET",
        "lock:{exp}",
        "00000000000000000000000000000000:cron@box:7",
        "PX",
        "300",
    ]);
    let acquired: serde_json::Value = serde_json::from_str(&next(&lines)).unwrap();
    assert_eq!(acquired["event"], "acquired");
    assert_eq!(acquired["host"], "box");
    assert_eq!(acquired["pid"], 7);
    let expired: serde_json::Value = serde_json::from_str(&next(&lines)).unwrap();
    assert_eq!(expired["event"], "expired", "{expired}");
    assert_eq!(expired["app"], "cron");

    signal(&child, Signal::INT);
    assert_eq!(wait_for(&mut child, "watch"), Some(0));
}
