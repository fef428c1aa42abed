// Included by every target of this directory: the shared targets and oracle of the stable run,
// and the libFuzzer entry point for one of them by name.

#[path = "../../sim/tests/fuzz/targets.rs"]
#[allow(dead_code)]
mod targets;

/// The libFuzzer entry point of the target `$name` of `targets::TARGETS`: a crash and a file
/// wrongly accepted both panic, which libFuzzer reports with the input.
macro_rules! fuzz_target_named {
    ($name:literal) => {
        libfuzzer_sys::fuzz_target!(|data: &[u8]| {
            let (_, run) = targets::TARGETS
                .iter()
                .find(|(name, _)| *name == $name)
                .expect("a registered target");
            if let Err(why) = run(data) {
                panic!("wrongly accepted: {why}");
            }
        });
    };
}
