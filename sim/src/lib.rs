//! Library side of the `sim` binary: the simulation drivers (streaming regime, cache regime),
//! the discrete-event engine, the cost model and metrics. The binary (`main.rs` and `cmd/`)
//! is thin glue that parses arguments and prints what these return.

pub mod cache;
pub mod cost;
pub mod engine;
pub mod model_profile;
pub mod runner;
pub mod streaming;
