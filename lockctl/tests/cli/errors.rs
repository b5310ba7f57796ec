//! Bad input and an unreachable server: one clear line, a documented code, never a panic.

use lock_tests::{free_port, RedisServer};

use crate::support::{assert_clean_failure, lockctl, lockctl_at, run, Ran};

fn at(url: &str, args: &[&str]) -> Ran {
    lockctl_at(url).args(args).output().unwrap().into()
}

#[test]
fn unreachable_redis_is_69_for_every_command() {
    let url = format!("redis://127.0.0.1:{}/", free_port());
    for args in [
        &["status", "a"][..],
        &["list"],
        &["release", "a", "--force"],
        &["watch", "a"],
        &["run", "--key", "a", "--", "true"],
    ] {
        let ran = at(&url, args);
        assert_clean_failure(&ran, 69);
        assert!(
            ran.stderr.contains("cannot reach Redis at"),
            "{args:?}: {ran:#?}"
        );
        assert!(ran.stderr.contains(&url), "{args:?}: {ran:#?}");
    }
}

#[test]
fn bad_durations_urls_and_names_are_usage_errors() {
    let server = RedisServer::start();
    for (args, needle) in [
        (
            &["run", "--key", "a", "--ttl", "3x", "--", "true"][..],
            "--ttl",
        ),
        (&["run", "--key", "a", "--ttl", "30", "--", "true"], "30s"),
        (
            &["run", "--key", "a", "--wait", "soon", "--", "true"],
            "--wait",
        ),
        (&["run", "--key", "a", "--ttl", "0s", "--", "true"], "ttl"),
        (&["run", "--key", "a", "--ttl", "48h", "--", "true"], "ttl"),
        (&["run", "--key", "", "--", "true"], "empty"),
        (&["run", "--key", "a"], "COMMAND"),
        (&["status", ""], "empty"),
        (&["watch", "a", "--interval", "0s"], "--interval"),
        (&["--timeout", "0s", "list"], "--timeout"),
        (&["release", "a"], "--force"),
        (&["frobnicate"], "frobnicate"),
    ] {
        let ran = run(&server, args);
        assert_clean_failure(&ran, 64);
        assert!(ran.stderr.contains(needle), "{args:?}: {ran:#?}");
    }
    let long = "x".repeat(513);
    assert_clean_failure(&run(&server, &["status", &long]), 64);
    for (url, why) in [
        ("http://example", "its scheme `http` is not Redis's"),
        ("not a url", "it has no scheme"),
        ("127.0.0.1:6379", "write redis://127.0.0.1:6379/"),
        ("redis://:99999999/", "it names no host"),
        ("redis://h:99999999/", "its port `99999999`"),
    ] {
        let ran = at(url, &["list"]);
        assert_clean_failure(&ran, 64);
        assert!(ran.stderr.contains("invalid Redis URL"), "{url}: {ran:#?}");
        assert!(ran.stderr.contains(why), "{url}: {ran:#?}");
        assert!(
            ran.stderr.contains("redis://127.0.0.1:6379/0"),
            "the form expected: {ran:#?}"
        );
    }
    let secret = at("redis://user:hunter2@127.0.0.1:99999999/", &["list"]);
    assert!(!secret.stderr.contains("hunter2"), "{secret:#?}");
}

#[test]
fn help_documents_the_exit_codes() {
    let ran: Ran = lockctl_at("redis://127.0.0.1:1/")
        .arg("--help")
        .output()
        .unwrap()
        .into();
    assert_eq!(ran.code, Some(0));
    // The table of exit::TABLE, as the README shows it too.
    let table = lockctl::exit::help_text();
    assert!(ran.stdout.contains(&table), "{}", ran.stdout);
    for code in ["64", "69", "70", "75", "78", "79", "126/127", "128+N"] {
        assert!(ran.stdout.contains(code), "{code}: {}", ran.stdout);
    }
    let server = RedisServer::start();
    for command in [
        "run", "status", "list", "release", "watch", "elect", "leader", "waits",
    ] {
        let help = lockctl(&server).args([command, "--help"]).output().unwrap();
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(text.contains(&table), "{command} --help: {text}");
    }
    let run_help = lockctl(&server).args(["run", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&run_help.stdout);
    assert!(text.contains("-E, --conflict-exit-code"), "{text}");
    assert!(text.contains("-w, --wait"), "{text}");
    assert!(
        text.contains("run does not wait for a busy lock unless told to"),
        "{text}"
    );
    assert!(text.contains("--on-lost"), "{text}");
}
