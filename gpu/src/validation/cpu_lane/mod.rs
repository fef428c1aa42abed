//! Validation of the CPU lane on the CPU: the expert calls a trace's steps put on the host
//! CPU (`--cpu-experts all` or `layers:N`), priced by the host cost model ([`predict_steps`],
//! the prediction) and run for real with the host calibration's kernels
//! (`validate::host::lane_replay`, the measurement), step by step.
//!
//! A step is one batch of requests (fifo, [`cpu_steps`]); its CPU-lane work is one call per
//! distinct expert per CPU-resident MoE layer, on as many tokens as the step's requests picked
//! it. Only the CPU lane is compared: the GPU part of a step (attention, the GPU-resident
//! experts, the activations' PCIe round trips) is neither run nor priced here.

mod predict;
mod report;
mod steps;

pub use predict::predict_steps;
pub use report::{cpu_lane_table, quantile, CpuLaneRow, CpuLaneValidation, Probe};
pub use steps::{cpu_steps, CpuCall, CpuStep};

#[cfg(test)]
mod tests;
