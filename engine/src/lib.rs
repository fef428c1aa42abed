//! The simulation library behind the `sim` binary: the simulation drivers (streaming regime,
//! cache regime), the discrete-event engine, the cost model and metrics. CUDA-free and without
//! a command line: `sim` turns its flags into calls of this crate and prints what they return.
//!
//! The front door is [`run`]: a [`RunConfig`] (mechanism, phase, sizes, retention under a
//! budget, timing on a hardware profile, tokens per step) and a [`TraceSource`] give a
//! [`RunReport`] or a [`RunError`]:
//!
//! ```
//! use engine::{run, RunConfig, TraceSource};
//! // `e2` units on the bundled prose trace, streaming regime only
//! let report = run(&RunConfig::default(), TraceSource::Bundled).unwrap();
//! let streaming = report.streaming.expect("every run has streaming metrics");
//! assert!(streaming.transfer_mib_per_layer_step > 0.0);
//! ```

pub mod bounded;
pub mod cache;
pub mod cost;
pub mod curve;
pub mod engine;
pub mod front;
pub mod grid;
pub mod host_cost;
pub mod kernel_surface;
pub mod model_profile;
pub mod output;
pub mod plan;
pub mod plan_engine;
pub mod plan_engines;
pub mod plan_host;
pub mod runner;
pub mod spec;
pub mod streaming;
pub mod verify;
pub mod verify_report;

pub use front::{run, run_with, RunError, TraceSource};
pub use runner::{RunConfig, RunReport};
pub use spec::{run_spec, RetentionSpec, RunSpec, SpecGap};

/// Bytes in one MiB (2^20, the unit of every `*_mib` report field), as `f64` for byte-to-MiB
/// conversions; the same value as [`policies::mechanisms::MIB`].
pub const MIB: f64 = policies::mechanisms::MIB as f64;
