//! The profile document: device description, OS-paging capabilities and the constants.

use crate::constant::{Constant, ConstantName};
use crate::error::ProfileError;
use crate::kernel_curve::KernelCurve;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Version of the profile JSON schema this build reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

/// The machine a profile describes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// GPU model, e.g. `NVIDIA GeForce RTX 4060 Laptop GPU (8 GB)`.
    pub gpu: String,
    /// Operating system and driver model, e.g. `Windows 11 (WDDM)`.
    pub os: String,
    /// Driver version, e.g. `580.159.04`.
    pub driver: String,
    /// CUDA version the driver supports, e.g. `13.0`.
    pub cuda: String,
    /// Host link, e.g. `PCIe 4.0 x8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Host CPU, when relevant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// What OS paging (CUDA managed memory) can do on this machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OsPaging {
    /// True when cuMemAdvise / cuMemPrefetchAsync work, so `os*` mechanisms can prefetch;
    /// false means `os*` pages fault in on demand only.
    pub prefetch_hints: bool,
    /// Why (the observation behind `prefetch_hints`).
    pub note: String,
}

/// A hardware profile. JSON layout:
/// `{schema_version, name, description, device, os_paging?, constants: {name: Constant},
/// expert_kernel_curve?, notes}`.
///
/// Build one with [`Profile::new`] and [`Profile::set`], write it with [`Profile::save`]
/// (atomic), read one with [`crate::load`] (validated).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Version of this schema the file was written for; [`SCHEMA_VERSION`] for this build.
    pub schema_version: u32,
    /// Short name, e.g. `h200-linux`; shipped profiles are loaded by it.
    pub name: String,
    /// One line on what the profile describes and where its figures come from.
    pub description: String,
    /// The hardware the constants describe.
    pub device: Device,
    /// Absent when OS paging was not characterised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_paging: Option<OsPaging>,
    /// Constants by JSON key (see [`ConstantName`]); unmeasured constants are absent.
    pub constants: BTreeMap<String, Constant>,
    /// The expert kernels' time against distinct experts at one slot count, as measured;
    /// absent when the calibration did not run that sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_kernel_curve: Option<KernelCurve>,
    /// Free-text remarks (what differs from other profiles, caveats).
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Profile {
    /// An empty profile (no constants) of the current schema version.
    pub fn new(name: &str, description: &str, device: Device) -> Self {
        Profile {
            schema_version: SCHEMA_VERSION,
            name: name.to_string(),
            description: description.to_string(),
            device,
            os_paging: None,
            constants: BTreeMap::new(),
            expert_kernel_curve: None,
            notes: Vec::new(),
        }
    }

    /// Set (or replace) a constant. The unit is checked when the profile is validated.
    pub fn set(&mut self, name: ConstantName, c: Constant) -> &mut Self {
        self.constants.insert(name.as_str().to_string(), c);
        self
    }

    /// The constant as stored, if present.
    pub fn constant(&self, name: ConstantName) -> Option<&Constant> {
        self.constants.get(name.as_str())
    }

    /// Value in the canonical unit (bytes, µs, bytes per µs, ratio), `None` when absent.
    /// Assumes a validated profile (units checked by [`Profile::validate`]).
    pub fn get(&self, name: ConstantName) -> Option<f64> {
        self.constant(name)
            .and_then(|c| c.canonical(name.dimension()))
    }

    /// Value in the canonical unit, or [`ProfileError::Missing`] naming the constant, this
    /// profile and `needed_for` (e.g. `"e* page-ins (H2D copy)"`).
    pub fn require(&self, name: ConstantName, needed_for: &str) -> Result<f64, ProfileError> {
        self.get(name).ok_or_else(|| ProfileError::Missing {
            profile: self.name.clone(),
            constant: name.as_str(),
            needed_for: needed_for.to_string(),
        })
    }

    /// Check the schema version, that every constant name is known, every unit fits its
    /// dimension and every value is finite, non-negative and inside its own range.
    pub fn validate(&self) -> Result<(), ProfileError> {
        if self.schema_version != SCHEMA_VERSION {
            return Err(ProfileError::SchemaVersion {
                profile: self.name.clone(),
                found: self.schema_version,
                expected: SCHEMA_VERSION,
            });
        }
        for (key, c) in &self.constants {
            let name = ConstantName::parse(key).ok_or_else(|| ProfileError::UnknownConstant {
                profile: self.name.clone(),
                constant: key.clone(),
                known: ConstantName::ALL
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
            let dim = name.dimension();
            if dim.factor(&c.unit).is_none() {
                return Err(ProfileError::BadUnit {
                    profile: self.name.clone(),
                    constant: key.clone(),
                    unit: c.unit.clone(),
                    expected: dim.unit_list(),
                });
            }
            let bad = |reason: String| ProfileError::BadValue {
                profile: self.name.clone(),
                constant: key.clone(),
                reason,
            };
            if !c.value.is_finite() || c.value < 0.0 {
                return Err(bad(format!(
                    "has value {}, expected a finite non-negative number",
                    c.value
                )));
            }
            if matches!(
                name,
                ConstantName::H2dBandwidth
                    | ConstantName::DeviceReadBandwidth
                    | ConstantName::HostReadBandwidth
                    | ConstantName::FaultBandwidth
                    | ConstantName::PrefetchBandwidth
                    | ConstantName::VmmGranule
                    | ConstantName::VramUsable
                    | ConstantName::AdmissionCap
                    | ConstantName::FirstTouchBelow90
                    | ConstantName::FaultDenseBandwidth
                    | ConstantName::ExpertKernelBandwidth
                    | ConstantName::ExpertKernelRepeatBandwidth
                    | ConstantName::UnionKernelBandwidth
                    | ConstantName::StreamReadBandwidth
                    | ConstantName::OsEvictBandwidth
            ) && c.value == 0.0
            {
                return Err(bad(
                    "is 0; a rate, size or curve base of 0 cannot be used (leave the constant out when it was not measured)".into(),
                ));
            }
            if matches!(
                name,
                ConstantName::VmmCommitLivePowerExp | ConstantName::VmmDecommitLivePowerExp
            ) && !(c.value > 0.0 && c.value <= 1.0)
            {
                return Err(bad(format!(
                    "has value {}, expected an exponent above 0 and at most 1 (a concave live-set curve; a linear one is the live slope)",
                    c.value
                )));
            }
            if let Some(d) = &c.domain {
                if let Some(s) = d
                    .ranges
                    .iter()
                    .find(|s| !(s.min.is_finite() && s.max.is_finite() && s.min <= s.max))
                {
                    return Err(bad(format!(
                        "has a domain range of {} from {} to {}, expected finite bounds with min <= max",
                        s.of.words(),
                        s.min,
                        s.max
                    )));
                }
            }
            if let (Some(lo), Some(hi)) = (c.min, c.max) {
                if !(lo <= c.value && c.value <= hi) {
                    return Err(bad(format!(
                        "has value {} outside its measured range [{lo}, {hi}]",
                        c.value
                    )));
                }
            }
        }
        if let Some(c) = &self.expert_kernel_curve {
            c.validate(&self.name)?;
        }
        Ok(())
    }

    /// Parse and validate profile JSON; `label` names it in errors (file path or name).
    pub fn from_json(text: &str, label: &str) -> Result<Profile, ProfileError> {
        let p: Profile = serde_json::from_str(text).map_err(|source| ProfileError::Parse {
            profile: label.to_string(),
            source,
        })?;
        p.validate()?;
        Ok(p)
    }

    /// Pretty JSON of the profile.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile always serialises")
    }

    /// Validate, then write to `path` atomically (a temporary file in the same directory,
    /// renamed over the target), so a failure never leaves a half-written profile.
    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        self.validate()?;
        let io = |source| ProfileError::Io {
            path: path.display().to_string(),
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        tmp.write_all(self.to_json().as_bytes()).map_err(io)?;
        tmp.write_all(b"\n").map_err(io)?;
        // Temporary files are owner-only (0600); a profile is ordinary data (0644). This
        // crate depends on no workspace crate, so it keeps its own copy of
        // `traces::file_mode::share_file`.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644))
                .map_err(io)?;
        }
        tmp.persist(path).map_err(|e| io(e.error))?;
        Ok(())
    }
}
