//! The binary end to end: a short clean run passes, and a client that lies about its
//! validity is caught (the checker is not blind).

use std::process::Command;

fn torture(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_lock-torture"))
        .args(args)
        .output()
        .expect("run lock-torture");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_short_run_with_faults_passes_and_prints_one_line() {
    let (code, stdout, stderr) = torture(&["run", "--mode", "drop", "--seconds", "1.5"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert!(
        lines[0].starts_with("topology=single mode=drop "),
        "{stdout}"
    );
    assert!(lines[0].contains(" violations=0 "), "{stdout}");
    assert!(lines[0].contains(" resumed=yes"), "{stdout}");
}

#[test]
fn a_client_that_overstates_its_validity_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().to_str().expect("utf-8 path");
    let (code, stdout, stderr) = torture(&[
        "run",
        "--mode",
        "none",
        "--seconds",
        "1",
        "--sabotage-ms",
        "150",
        "--logs",
        logs,
    ]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(!stdout.contains(" violations=0 "), "{stdout}");
    assert!(stderr.contains("[validity-claim]"), "{stderr}");
    // The kept history re-checks to the same verdict.
    let kept = dir.path().join("none");
    let (code, stdout, _) = torture(&["check", kept.to_str().expect("utf-8 path")]);
    assert_eq!(code, 1, "{stdout}");
}

#[test]
fn the_new_primitives_are_refused_where_they_do_not_run() {
    // lock-core refuses semaphores and read-write locks on Redlock: so does the torture,
    // before it starts anything, saying why.
    let (code, stdout, stderr) = torture(&[
        "run",
        "--primitive",
        "semaphore",
        "--topology",
        "redlock",
        "--mode",
        "none",
    ]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stderr.contains("does not run on Redlock"), "{stderr}");
    // Nor elections (no ordered record of the leader across nodes).
    let (code, _, stderr) = torture(&["run", "--primitive", "election", "--nodes", "3"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("refuses elections"), "{stderr}");
    let (code, _, stderr) = torture(&["run", "--primitive", "all", "--topology", "cluster"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("one server only"), "{stderr}");
    // A permit set runs on a Cluster, but not in a mode that moves a master.
    let (code, _, stderr) = torture(&[
        "run",
        "--primitive",
        "semaphore",
        "--topology",
        "cluster",
        "--mode",
        "failover",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("move no master"), "{stderr}");
    // ... and without scripts.
    let (code, _, stderr) = torture(&[
        "run",
        "--primitive",
        "rwlock",
        "--protocol",
        "mixed",
        "--mode",
        "none",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("scripts only"), "{stderr}");
}
