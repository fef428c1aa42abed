//! Terminal renderings: the text the `sim` binary prints for a result, so the binary only
//! parses arguments and calls.

pub mod grid;
pub mod placement;
pub mod prefetch;
pub mod profile;
pub mod run;
pub mod steps;
pub mod union_curve;

/// Bytes in one MiB, as `f64` for byte-to-MiB conversions in the texts.
const MIB: f64 = policies::mechanisms::MIB as f64;
