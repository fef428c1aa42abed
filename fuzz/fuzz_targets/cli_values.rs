//! `cargo fuzz run cli_values`: the `cli-values` target of `sim/tests/fuzz/targets.rs` under libFuzzer.
#![no_main]
include!("common.rs");
fuzz_target_named!("cli-values");
