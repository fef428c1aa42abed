//! Typed errors of profile loading, validation and lookup. Every message names the profile
//! and the constant involved and says how to fix it.

use thiserror::Error;

/// What can go wrong with a hardware profile.
#[derive(Debug, Error)]
pub enum ProfileError {
    /// `load(name)` got neither a shipped profile name nor an existing file.
    #[error("unknown hardware profile '{name}': not a shipped profile ({known}) and no such file; pass a shipped name or the path of a profile JSON (see `sim profile list`)")]
    UnknownProfile { name: String, known: String },
    /// The profile file could not be read or written.
    #[error("cannot access profile file {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The JSON does not follow the schema.
    #[error("profile '{profile}' is not valid profile JSON")]
    Parse {
        profile: String,
        #[source]
        source: serde_json::Error,
    },
    /// The file was written for another schema version.
    #[error("profile '{profile}' has schema_version {found}, this build reads version {expected}; re-run `sim calibrate` or convert the file")]
    SchemaVersion {
        profile: String,
        found: u32,
        expected: u32,
    },
    /// A constant name that is not in the catalogue (usually a typo).
    #[error("profile '{profile}' has an unknown constant '{constant}'; known constants: {known}")]
    UnknownConstant {
        profile: String,
        constant: String,
        known: String,
    },
    /// A unit that does not fit the constant's dimension.
    #[error(
        "profile '{profile}': constant '{constant}' has unit '{unit}', expected one of {expected}"
    )]
    BadUnit {
        profile: String,
        constant: String,
        unit: String,
        expected: String,
    },
    /// A value that is negative, not finite, or outside its own [min, max].
    #[error("profile '{profile}': constant '{constant}' {reason}")]
    BadValue {
        profile: String,
        constant: String,
        reason: String,
    },
    /// A validation error of the profile file at `path`: the inner error names the profile by
    /// its internal `name`, which need not match the file the user gave.
    #[error("profile file {path}: {inner}")]
    InFile {
        path: String,
        inner: Box<ProfileError>,
    },
    /// A run needs a constant the profile does not have (it was never measured).
    #[error("profile '{profile}' has no constant '{constant}', needed for {needed_for}; measure it with `sim calibrate` or add it (value, unit, provenance) to the profile JSON")]
    Missing {
        profile: String,
        constant: &'static str,
        needed_for: String,
    },
}
