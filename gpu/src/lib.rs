//! The GPU side of the simulator, beside the CUDA crates (`validate`, `kernels`): the
//! prediction that `sim validate` holds a real GPU replay against, and its tables
//! ([`validation`]). It builds on the `engine` crate, whose modules it names as its own
//! (`crate::engine`, `crate::cost`, ...); the engine never depends on it.

pub use ::engine::{cache, cost, engine, host_cost, model_profile, plan, runner, MIB};

pub mod plan_interval;
pub mod run_interval;
pub mod validation;
