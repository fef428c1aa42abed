//! Hardware profiles: every cost constant as value + unit + provenance.
//!
//! Owned here: the profile schema ([`Profile`], [`Constant`], [`Provenance`]), the catalogue of
//! constant names with their physical dimension ([`ConstantName`]), loading and validating
//! profile JSON ([`load`]), the constructor API the calibration (`sim calibrate`) fills and saves
//! atomically, and the shipped profiles (`profiles/*.json`, embedded at build time).
//! Not here: how constants are combined into costs (the `sim` crate's cost model) or how they
//! are measured (the `validate` crate).
//!
//! A constant that was never measured is *absent*: the schema has no zero or default stand-in.
//! Asking for an absent constant with [`Profile::require`] gives [`ProfileError::Missing`],
//! which names the constant, the profile and what needed it.

pub mod constant;
pub mod error;
pub mod kernel_curve;
pub mod schema;
pub mod shipped;

pub use constant::{
    Constant, ConstantName, Dimension, Domain, Measurement, Provenance, Regressor, Span,
};
pub use error::ProfileError;
pub use kernel_curve::{KernelCurve, KernelCurvePoint};
pub use schema::{Device, OsPaging, Profile, SCHEMA_VERSION};
pub use shipped::{load, shipped, shipped_host_names, shipped_names, with_host, HOST_CONSTANTS};
