//! GPU calibration of the simulator's cost constants and real-GPU replay of traces, through
//! cudarc with dynamic loading.
//!
//! Owned here: the measurements ([`mod@calibrate`]), their statistics ([`stats`]), the
//! conversion into a hardware profile ([`to_profile`]; the live-set arm's fit in
//! [`live_set_fit`]), the pooling of several calibrations' measurement sets ([`pool`]) and the substitution of
//! re-measured kernel arms into one ([`kernel_splice`]), the
//! VMM call wrappers ([`vmm`]) and the real-GPU replay of a simulator plan ([`replay_plan`]: the plan as plain data and its layout;
//! [`mod@replay`]: executing and timing it; [`warmup`]: how many untimed steps a retention
//! replay runs first), and what a blocked validation adds ([`blocks`]: the seeded order;
//! [`probe`]: the host probe and VMM arm around each block; [`host_context`]: the host's state).
//! Not here: the kernels themselves (`kernels`), the profile schema (`profile`) or the
//! simulator's prediction (`sim` runs it and compares). Every entry point checks that the CUDA
//! driver and NVRTC load and returns an error, never a panic, when they do not.

pub mod blocks;
pub mod calibrate;
pub mod device;
pub mod host;
pub mod host_context;
pub mod kernel_splice;
mod kernel_surface;
pub mod live_power_fit;
pub mod live_set_fit;
pub mod pool;
pub mod probe;
pub mod replay;
pub mod replay_cpu;
pub mod replay_plan;
pub mod stats;
pub mod to_profile;
pub mod vmm;
pub mod warmup;

pub use calibrate::{
    calibrate, calibrate_kernels, CalibrateError, CalibrateOptions, Calibration, KernelCalibration,
};
pub use device::DeviceInfo;
pub use replay::{
    replay, replay_composed, HostBreakdown, ReplayError, ReplayMeasurement, ReplayOptions,
};
pub use replay_plan::{ReplayGroup, ReplayPlan};
