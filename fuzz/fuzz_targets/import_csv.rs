//! `cargo fuzz run import_csv`: the `import-csv` target of `sim/tests/fuzz/targets.rs` under libFuzzer.
#![no_main]
include!("common.rs");
fuzz_target_named!("import-csv");
