//! `cargo fuzz run import_oracle_general`: the `import-oracle-general` target of `sim/tests/fuzz/targets.rs` under libFuzzer.
#![no_main]
include!("common.rs");
fuzz_target_named!("import-oracle-general");
