//! The binary's command line, end to end: every scenario is offered, and settings that
//! cannot run are refused before any server starts, with the setup exit code (2).
//!
//! Being an integration test, this also has `cargo test --workspace --all-features` build
//! the `lock-bench` binary with the features the rest of the workspace's tests unify on,
//! so that CI's benchmark smoke runs that binary instead of building lock-core and its
//! dependencies a second time with `cargo run -p lock-bench`'s smaller feature set.

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lock-bench"))
        .args(args)
        .env_remove("REDIS_URL")
        .output()
        .expect("run lock-bench")
}

#[test]
fn the_help_offers_every_scenario_and_the_smoke() {
    let out = bench(&["--help"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for scenario in [
        "all", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "renewal", "s9",
    ] {
        assert!(
            stdout.contains(&format!(" {scenario}")),
            "--help does not offer {scenario}:\n{stdout}"
        );
    }
    assert!(stdout.contains("--smoke"), "{stdout}");
}

#[test]
fn settings_that_cannot_run_are_refused_before_anything_starts() {
    for (args, says) in [
        (&["--reps", "0"][..], "--reps must be at least 1"),
        (&["--tasks", "0"][..], "--tasks must be at least 1"),
        (
            &["--seconds", "0"][..],
            "--seconds must be a positive number",
        ),
    ] {
        let out = bench(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
