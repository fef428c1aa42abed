//! Library side of the `sim` binary: the command line (`cli`, `cmd/`), thin glue that parses
//! arguments and prints what the `engine` crate returns, here so that tests can walk it, and the
//! prediction side of GPU validation. The binary (`main.rs`) only dispatches. The simulation
//! library's modules are re-exported under their old `sim::` paths.

// `cmd/` names this crate `sim::`, as it did when it was part of the binary.
extern crate self as sim;

pub use ::engine::*;

pub mod cli;
pub mod cli_reference;
pub mod cmd;
pub mod validation;
