//! `cargo fuzz run import_onnx_genai_json`: the `import-onnx-genai-json` target of `sim/tests/fuzz/targets.rs` under libFuzzer.
#![no_main]
include!("common.rs");
fuzz_target_named!("import-onnx-genai-json");
