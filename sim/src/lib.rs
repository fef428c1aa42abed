//! Library side of the `sim` binary: the simulation drivers (streaming regime, cache regime),
//! the discrete-event engine, the cost model and metrics; and the command line (`cli`, `cmd/`),
//! thin glue that parses arguments and prints what these return, here so that tests can walk
//! it. The binary (`main.rs`) only dispatches.

// `cmd/` names this crate `sim::`, as it did when it was part of the binary.
extern crate self as sim;

pub mod bounded;
pub mod cache;
pub mod cli;
pub mod cmd;
pub mod cost;
pub mod curve;
pub mod engine;
pub mod grid;
pub mod host_cost;
pub mod kernel_surface;
pub mod model_profile;
pub mod output;
pub mod plan;
pub mod plan_engine;
pub mod plan_engines;
pub mod plan_host;
pub mod plan_interval;
pub mod run_interval;
pub mod runner;
pub mod streaming;
pub mod validation;
pub mod verify;
pub mod verify_report;

/// Bytes in one MiB (2^20, the unit of every `*_mib` report field), as `f64` for byte-to-MiB
/// conversions; the same value as [`policies::mechanisms::MIB`].
pub const MIB: f64 = policies::mechanisms::MIB as f64;
