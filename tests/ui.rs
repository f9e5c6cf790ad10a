//! Compile-fail and compile-pass cases of the DSL and the layers (trybuild).
//!
//! Regenerate snapshots after an intended message change with
//! `TRYBUILD=overwrite cargo test --test ui`. `FLAXEN_UI=a,b` runs only the
//! cases whose file name contains `a` or `b`, e.g.
//! `FLAXEN_UI=transpose cargo test --test ui`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    let Ok(only) = std::env::var("FLAXEN_UI") else {
        t.pass("ui-tests/pass/*.rs");
        t.compile_fail("ui-tests/fail/*.rs");
        return;
    };
    let wanted: Vec<&str> = only.split(',').filter(|s| !s.is_empty()).collect();
    let mut cases = 0;
    for dir in ["ui-tests/pass", "ui-tests/fail"] {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .filter(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                wanted.iter().any(|w| name.contains(w))
            })
            .collect();
        files.sort();
        for file in files {
            cases += 1;
            if dir.ends_with("pass") {
                t.pass(file);
            } else {
                t.compile_fail(file);
            }
        }
    }
    assert!(cases > 0, "FLAXEN_UI={only:?} names no case in ui-tests/");
}
