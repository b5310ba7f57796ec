//! Compile-time behaviour: the exact errors for every misuse (`ui/fail/*.rs` with their
//! `.stderr`). Regenerate the expected output with
//! `TRYBUILD=overwrite cargo test -p lock-macros-tests --test ui`, then read every changed file.
//! What must compile and run (`ui/pass/*.rs`) is built and run as test targets of their own
//! (`ui_pass_*` in Cargo.toml): with no passing case here, trybuild only checks the failing
//! ones instead of building every dependency again.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
}
