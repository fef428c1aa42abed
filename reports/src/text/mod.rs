//! Terminal renderings: the text the `sim` binary prints for a result, so the binary only
//! parses arguments and calls.

pub mod grid;
pub mod profile;
pub mod run;
