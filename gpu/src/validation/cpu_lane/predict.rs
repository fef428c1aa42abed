//! The predicted CPU-lane time of each step.

use super::CpuStep;
use crate::host_cost::HostCostModel;
use profile::ProfileError;
use traces::DType;

/// µs of each step's CPU lane: the sum over its calls of
/// [`HostCostModel::expert_call_us`]`(dtype, expert_bytes, tokens)`, the price the engine's
/// CPU lane puts on each call (calls run one after another, each on every host thread).
/// `expert_bytes` is one expert's weight bytes as the engine sizes it (the same for every
/// layer). Errors: a constant the calls need is missing from the host profile.
pub fn predict_steps(
    model: &HostCostModel,
    dtype: DType,
    expert_bytes: u64,
    steps: &[CpuStep],
) -> Result<Vec<f64>, ProfileError> {
    steps
        .iter()
        .map(|s| {
            s.calls
                .iter()
                .map(|c| model.expert_call_us(dtype, expert_bytes, c.tokens))
                .sum()
        })
        .collect()
}
