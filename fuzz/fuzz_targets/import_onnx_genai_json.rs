//! `cargo fuzz run import_onnx_genai_json`: the `import-onnx-genai-json` target of `sim/tests/fuzz/targets.rs` under libFuzzer.
#![no_main]

#[path = "../../sim/tests/fuzz/targets.rs"]
#[allow(dead_code)]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (_, run) = targets::TARGETS
        .iter()
        .find(|(name, _)| *name == "import-onnx-genai-json")
        .expect("a registered target");
    if let Err(why) = run(data) {
        panic!("wrongly accepted: {why}");
    }
});
