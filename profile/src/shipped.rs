//! The shipped profiles (embedded JSON) and [`load`] by name or path.

use crate::error::ProfileError;
use crate::schema::Profile;
use std::path::Path;

/// (name, JSON) of every shipped profile. The H200 file is replaced by the calibration's
/// measured file under the same name.
const SHIPPED: &[(&str, &str)] = &[
    (
        "rtx4060-laptop-wddm",
        include_str!("../profiles/rtx4060-laptop-wddm.json"),
    ),
    ("h200-linux", include_str!("../profiles/h200-linux.json")),
];

/// Names of the shipped profiles.
pub fn shipped_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|(n, _)| *n).collect()
}

/// A shipped profile by name, parsed and validated; `None` for an unknown name.
pub fn shipped(name: &str) -> Option<Result<Profile, ProfileError>> {
    SHIPPED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, json)| Profile::from_json(json, n))
}

/// Load a profile: a shipped name (`sim profile list`) or the path of a profile JSON file.
/// Errors: [`ProfileError::UnknownProfile`] when it is neither, `Io`/`Parse`/validation
/// errors for a bad file.
pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
    if let Some(p) = shipped(name_or_path) {
        return p;
    }
    let path = Path::new(name_or_path);
    if !path.is_file() {
        return Err(ProfileError::UnknownProfile {
            name: name_or_path.to_string(),
            known: shipped_names().join(", "),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
        path: name_or_path.to_string(),
        source,
    })?;
    Profile::from_json(&text, name_or_path).map_err(|e| match e {
        // These already name the file (their label is the path).
        ProfileError::Parse { .. } | ProfileError::Io { .. } => e,
        inner => ProfileError::InFile {
            path: name_or_path.to_string(),
            inner: Box::new(inner),
        },
    })
}
