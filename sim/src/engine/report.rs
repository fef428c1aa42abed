//! What a timed replay reports: the `timing` block (exact keys) and the details beside it.
//! The types live in `reports::run`, which reads them back from result files.

pub use reports::run::{StepParts, TimingDetail, TimingReport};
pub use reports::step_latency::StepLatencies;

/// The step latencies a timed run keeps when asked (`TimingConfig::step_latencies`, set by
/// `sim compare`): `step_us` are the replay's step times, µs, in step order, the same steps
/// the `timing` block's percentiles summarize.
pub fn keep_step_latencies(detail: &mut TimingDetail, step_us: &[f64]) {
    detail.step_latency = Some(StepLatencies::of_steps(step_us));
}
