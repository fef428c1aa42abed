//! `cargo fuzz run import_jsonl`: the `import-jsonl` target of `sim/tests/fuzz/targets.rs` under libFuzzer.
#![no_main]
include!("common.rs");
fuzz_target_named!("import-jsonl");
