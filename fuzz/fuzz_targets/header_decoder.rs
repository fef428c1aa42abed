//! `cargo fuzz run header_decoder`: the `header-decoder` target of `sim/tests/fuzz/targets.rs` under libFuzzer.
#![no_main]
include!("common.rs");
fuzz_target_named!("header-decoder");
