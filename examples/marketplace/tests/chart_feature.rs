//! `--chart` lives behind the `chart` feature, so that the quick start compiles no plotting
//! stack: a build without it says at once how to get it, before running any row.

#[cfg(not(feature = "chart"))]
#[test]
fn chart_without_the_feature_says_how_to_get_it() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"))
        .args(["--chart", "market.png"])
        // No Redis is needed: the refusal comes before any row.
        .env("REDIS_URL", "redis://127.0.0.1:1/")
        .output()
        .expect("run marketplace");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--features chart -- --chart market.png"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no row ran");
    assert!(!std::path::Path::new("market.png").exists());
}
