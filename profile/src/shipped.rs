//! The shipped profiles (embedded JSON), [`load`] by name or path, and [`with_host`], a GPU
//! profile combined with a host profile (`--hw` with `--hw-host`).

use crate::constant::ConstantName;
use crate::error::ProfileError;
use crate::schema::Profile;
use std::path::Path;

/// (name, JSON) of every shipped GPU profile. The H200 file is replaced by the
/// calibration's measured file under the same name; `h100-linux` is the pool of three full
/// calibrations of one H100 (validate/data/h100-linux-2026-12-07).
const SHIPPED: &[(&str, &str)] = &[
    (
        "rtx4060-laptop-wddm",
        include_str!("../profiles/rtx4060-laptop-wddm.json"),
    ),
    ("h200-linux", include_str!("../profiles/h200-linux.json")),
    ("h100-linux", include_str!("../profiles/h100-linux.json")),
];

/// (name, JSON) of every shipped host profile (host CPU constants only, for `--hw-host`):
/// `dev-box-host` is the development machine's CPU, measured by `sim calibrate --only host`;
/// `h200-host` the CPU of the H200 machine that measured `h200-linux`, the pool of three host
/// calibrations (validate/data/h200-linux-p16/h{4,5,6}); `h100-linux-host` the CPU of the H100
/// machine that measured `h100-linux`, the pool of the host arms of its three full calibrations
/// (validate/data/h100-linux-2026-12-07). Loaded by name like the GPU profiles,
/// listed apart from them.
const SHIPPED_HOST: &[(&str, &str)] = &[
    (
        "dev-box-host",
        include_str!("../profiles/dev-box-host.json"),
    ),
    ("h200-host", include_str!("../profiles/h200-host.json")),
    (
        "h100-linux-host",
        include_str!("../profiles/h100-linux-host.json"),
    ),
];

/// The host CPU's constants: what `sim calibrate --only host` measures and `--hw-host`
/// brings into a GPU profile. (`host_read_bandwidth`, a GPU kernel reading host RAM over
/// the bus, is a GPU constant and stays the GPU profile's.)
pub const HOST_CONSTANTS: &[ConstantName] = &[
    ConstantName::HostExpertInt4Bandwidth,
    ConstantName::HostExpertInt4CallOverhead,
    ConstantName::HostExpertInt4Bandwidth1Thread,
    ConstantName::HostExpertInt4Tokens16Bandwidth,
    ConstantName::HostExpertBf16Bandwidth,
    ConstantName::HostExpertBf16CallOverhead,
    ConstantName::HostMemoryReadBandwidth,
    ConstantName::HostMemoryReadBandwidth1Thread,
    ConstantName::HostSsdReadBandwidth,
    ConstantName::HostSsdReadBandwidthQd4,
];

/// `gpu` with the host CPU's constants of `host` ([`HOST_CONSTANTS`]): every host constant
/// of `gpu` is dropped and those `host` has are copied with their provenance, so a host
/// constant the host profile never measured is absent in the result. The name becomes
/// `GPU+HOST`, the device's `host` field the host profile's CPU, and a note says where the
/// host constants come from. Errors when `host` holds no host constant (not a host profile).
pub fn with_host(gpu: &Profile, host: &Profile) -> Result<Profile, ProfileError> {
    if !HOST_CONSTANTS.iter().any(|&n| host.constant(n).is_some()) {
        return Err(ProfileError::Missing {
            profile: host.name.clone(),
            constant: "host_expert_int4_bandwidth",
            needed_for: "a host profile for --hw-host (it holds no host CPU constant; write one with `sim calibrate --only host --out FILE`)".into(),
        });
    }
    let mut out = gpu.clone();
    out.name = format!("{}+{}", gpu.name, host.name);
    for &n in HOST_CONSTANTS {
        out.constants.remove(n.as_str());
        if let Some(c) = host.constant(n) {
            out.set(n, c.clone());
        }
    }
    out.device.host = host.device.host.clone().or(Some(host.name.clone()));
    out.notes.push(format!(
        "host CPU constants (host_expert_*, host_memory_*, host_ssd_*) from host profile `{}`: {}",
        host.name, host.description
    ));
    Ok(out)
}

/// Names of the shipped GPU profiles.
pub fn shipped_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|(n, _)| *n).collect()
}

/// Names of the shipped host profiles (for `--hw-host`).
pub fn shipped_host_names() -> Vec<&'static str> {
    SHIPPED_HOST.iter().map(|(n, _)| *n).collect()
}

/// A shipped profile (GPU or host) by name, parsed and validated; `None` for an unknown name.
pub fn shipped(name: &str) -> Option<Result<Profile, ProfileError>> {
    SHIPPED
        .iter()
        .chain(SHIPPED_HOST)
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
            known: format!(
                "{}; host profiles for --hw-host: {}",
                shipped_names().join(", "),
                shipped_host_names().join(", ")
            ),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Constant, Device};

    fn profile(name: &str, consts: &[(ConstantName, f64, &str)]) -> Profile {
        let mut p = Profile::new(name, "test", Device::default());
        for &(n, v, u) in consts {
            p.set(n, Constant::assumed(v, u, "a test value"));
        }
        p
    }

    #[test]
    fn host_constants_come_from_the_host_profile_only() {
        use ConstantName as C;
        let gpu = profile(
            "gpu",
            &[
                (C::H2dBandwidth, 5600.0, "MB/s"),
                (C::HostReadBandwidth, 20000.0, "MB/s"),
                (C::HostExpertInt4Bandwidth, 1.0, "MB/s"),
                (C::HostSsdReadBandwidth, 3.0, "MB/s"),
            ],
        );
        let host = profile("cpu", &[(C::HostExpertInt4Bandwidth, 2.0, "MB/s")]);
        let both = with_host(&gpu, &host).unwrap();
        assert_eq!(both.name, "gpu+cpu");
        assert_eq!(both.get(C::H2dBandwidth), Some(5600.0));
        // a GPU constant, kept
        assert_eq!(both.get(C::HostReadBandwidth), Some(20000.0));
        assert_eq!(both.get(C::HostExpertInt4Bandwidth), Some(2.0));
        // the host profile never measured the SSD: absent, not the GPU profile's figure
        assert_eq!(both.get(C::HostSsdReadBandwidth), None);
        assert_eq!(both.device.host.as_deref(), Some("cpu"));
        // a GPU profile is not a host profile
        let e = with_host(&host, &profile("x", &[(C::H2dBandwidth, 1.0, "MB/s")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--hw-host"), "{e}");
    }

    #[test]
    fn shipped_host_profiles_combine_with_the_gpu_profiles() {
        for (host, gpu) in [
            ("dev-box-host", "rtx4060-laptop-wddm"),
            ("h200-host", "h200-linux"),
            ("h100-linux-host", "h100-linux"),
        ] {
            let host = load(host).unwrap();
            let gpu = load(gpu).unwrap();
            let both = with_host(&gpu, &host).unwrap();
            for &n in HOST_CONSTANTS {
                assert_eq!(both.get(n), host.get(n), "{n}");
            }
            assert_eq!(
                both.get(ConstantName::H2dBandwidth),
                gpu.get(ConstantName::H2dBandwidth)
            );
        }
    }
}
