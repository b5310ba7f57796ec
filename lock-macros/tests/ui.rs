//! Compile-time behaviour: what must compile (`ui/pass`), and the exact errors for every
//! misuse (`ui/fail/*.rs` with their `.stderr`). Regenerate the expected output with
//! `TRYBUILD=overwrite cargo test -p lock-macros --test ui`, then read every changed file.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
