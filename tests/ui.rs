//! Compile-fail and compile-pass cases of the DSL and the layers (trybuild).
//!
//! Regenerate snapshots after an intended message change with
//! `TRYBUILD=overwrite cargo test --test ui`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui-tests/pass/*.rs");
    t.compile_fail("ui-tests/fail/*.rs");
}
