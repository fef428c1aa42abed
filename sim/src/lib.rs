//! Library side of the `sim` binary: the command line (`cli`, `cmd/`), thin glue that parses
//! arguments and prints what the `engine` and `gpu` crates return, here so that tests can walk
//! it. The binary (`main.rs`) only dispatches. The simulation library's modules (`engine`) and
//! the prediction side of validation (`gpu`) are re-exported under their old `sim::` paths.

// `cmd/` names this crate `sim::`, as it did when it was part of the binary.
extern crate self as sim;

pub use ::engine::*;
pub use gpu::{plan_interval, run_interval, validation};

pub mod cli;
pub mod cli_reference;
pub mod cmd;
