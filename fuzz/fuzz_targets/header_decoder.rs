//! `cargo fuzz run header_decoder`: the `header-decoder` target of `sim/tests/fuzz/targets.rs` under libFuzzer.
#![no_main]

#[path = "../../sim/tests/fuzz/targets.rs"]
#[allow(dead_code)]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (_, run) = targets::TARGETS
        .iter()
        .find(|(name, _)| *name == "header-decoder")
        .expect("a registered target");
    if let Err(why) = run(data) {
        panic!("wrongly accepted: {why}");
    }
});
