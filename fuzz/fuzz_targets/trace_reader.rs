//! `cargo fuzz run trace_reader`: the `trace-reader` target of `sim/tests/fuzz/targets.rs` under libFuzzer.
#![no_main]
include!("common.rs");
fuzz_target_named!("trace-reader");
