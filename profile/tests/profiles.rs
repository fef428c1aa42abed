//! Shipped profiles, validation errors and the save/load round trip.

use profile::{load, shipped_names, Constant, ConstantName, Device, Profile, ProfileError};

#[test]
fn shipped_profiles_load_and_convert_units() {
    assert_eq!(
        shipped_names(),
        vec!["rtx4060-laptop-wddm", "h200-linux", "h100-linux"]
    );
    // The H100 pool, read independently from its three sets: vmm[fill 0.65%].set_access_us of
    // validate/data/h100-linux-2026-12-07/c{1,2,3}.measurements.json took 22.639, 22.891 and
    // 21.061 µs per granule; the pool is their median.
    let h100 = load("h100-linux").unwrap();
    let set_access = h100.get(ConstantName::CuMemSetAccess).unwrap();
    assert!((set_access - 22.63901953125).abs() < 1e-9, "{set_access}");
    let rtx = load("rtx4060-laptop-wddm").unwrap();
    // 5.6 GB/s = 5.6e9 B / 1e6 µs = 5600 B/µs
    assert_eq!(rtx.get(ConstantName::H2dBandwidth), Some(5600.0));
    assert_eq!(
        rtx.get(ConstantName::VramUsable),
        Some(7959.0 * 1024.0 * 1024.0)
    );
    assert_eq!(rtx.get(ConstantName::VmmGranule), Some(2.0 * 1048576.0));
    assert!(!rtx.os_paging.as_ref().unwrap().prefetch_hints);
    assert_eq!(rtx.get(ConstantName::PrefetchBandwidth), None);

    let h200 = load("h200-linux").unwrap();
    // Measured by `sim calibrate`, read independently from the stored sets: the per-slot
    // kernel's arm (kernels[2560x640, 60 slots, 60 distinct, PerSlot (moe_dot_fd_r2j1s3b1)])
    // of validate/data/h200-linux-p18/k{1,2,3}.json took 49.60000142455101, 48.608001321554184
    // and 49.40799996256828 µs: the median, 49.408 µs, gives 60 x 2611200 B / 49.408 µs =
    // 3170984.5 B/µs (3.17 TB/s, MB/s = B/µs); vmm[fill 0.4%].set_access_us of
    // validate/data/h200-linux-p9.measurements.json = 24.4195 µs per granule.
    let bw = 60.0 * 2611200.0 / 49.40799996256828;
    assert!((h200.get(ConstantName::DeviceReadBandwidth).unwrap() - bw).abs() < 0.01);
    let set_access = h200.get(ConstantName::CuMemSetAccess).unwrap();
    assert!((set_access - 24.4194765625).abs() < 1e-4, "{set_access}");
    assert!(h200.os_paging.as_ref().unwrap().prefetch_hints);
}

#[test]
fn rtx_vmm_fit_reproduces_the_small_expert_churn_rows() {
    // Independent recomputation from docs/reference/measurements.md: driver µs per page-in (commit of the
    // new expert + decommit of the victim) = map/unmap ms per step / (page-ins / 200 steps).
    let per = |pageins: f64, ms: f64| ms * 1000.0 / (pageins / 200.0);
    let one_granule = (per(1345.0, 3.48) + per(719.0, 2.01)) / 2.0; // 2 MiB rows
    let two_granules = (per(1229.0, 3.26) + per(649.0, 1.85)) / 2.0; // 3 MiB rows
    let p = load("rtx4060-laptop-wddm").unwrap();
    let g = |n| p.get(n).unwrap();
    let fixed = g(ConstantName::VmmCommitFixed) + g(ConstantName::VmmDecommitFixed);
    let per_granule = g(ConstantName::VmmCommit) + g(ConstantName::VmmDecommit);
    assert!((fixed + per_granule - one_granule).abs() < 0.3);
    assert!((fixed + 2.0 * per_granule - two_granules).abs() < 0.3);
}

#[test]
fn missing_constant_names_itself_and_the_profile() {
    let rtx = load("rtx4060-laptop-wddm").unwrap();
    let e = rtx
        .require(ConstantName::CuMemCreate, "--handle-pool")
        .unwrap_err();
    assert!(matches!(
        e,
        ProfileError::Missing {
            constant: "cu_mem_create",
            ..
        }
    ));
    let msg = e.to_string();
    assert!(msg.contains("rtx4060-laptop-wddm") && msg.contains("cu_mem_create"));
    assert!(msg.contains("--handle-pool"));
}

#[test]
fn unknown_profile_lists_the_shipped_ones() {
    let e = load("no-such-gpu").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("no-such-gpu") && msg.contains("h200-linux"),
        "{msg}"
    );
}

fn tiny() -> Profile {
    let mut p = Profile::new("tiny", "test", Device::default());
    p.set(
        ConstantName::H2dBandwidth,
        Constant::assumed(10.0, "GB/s", "test"),
    );
    p
}

#[test]
fn bad_unit_is_rejected_with_the_accepted_units() {
    let mut p = tiny();
    p.set(
        ConstantName::CuMemMap,
        Constant::assumed(3.0, "GB/s", "test"),
    );
    let e = Profile::from_json(&p.to_json(), "tiny").unwrap_err();
    assert!(matches!(e, ProfileError::BadUnit { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("cu_mem_map") && msg.contains("GB/s") && msg.contains("ms"),
        "{msg}"
    );
}

#[test]
fn unknown_constant_schema_version_and_bad_values_are_rejected() {
    let json = tiny().to_json().replace("h2d_bandwidth", "h2d_bandwith");
    let e = Profile::from_json(&json, "tiny").unwrap_err();
    assert!(e.to_string().contains("h2d_bandwith"));

    let json = tiny()
        .to_json()
        .replace("\"schema_version\": 1", "\"schema_version\": 9");
    assert!(matches!(
        Profile::from_json(&json, "tiny").unwrap_err(),
        ProfileError::SchemaVersion { found: 9, .. }
    ));

    let mut p = tiny();
    p.set(
        ConstantName::H2dBandwidth,
        Constant::assumed(0.0, "GB/s", "test"),
    );
    assert!(matches!(p.validate(), Err(ProfileError::BadValue { .. })));

    let mut p = tiny();
    p.set(
        ConstantName::CuMemMap,
        Constant::assumed(5.0, "us", "test").with_range(1.0, 2.0),
    );
    assert!(p.validate().unwrap_err().to_string().contains("range"));
}

#[test]
fn a_live_curve_exponent_outside_0_to_1_is_refused() {
    for (bad, ok) in [(1.5, 0.59), (0.0, 1.0)] {
        let mut p = tiny();
        p.set(
            ConstantName::VmmCommitLivePowerExp,
            Constant::assumed(bad, "ratio", "test"),
        );
        let msg = p.validate().unwrap_err().to_string();
        assert!(
            msg.contains("vmm_commit_live_power_exp") && msg.contains("at most 1"),
            "{msg}"
        );
        p.set(
            ConstantName::VmmCommitLivePowerExp,
            Constant::assumed(ok, "ratio", "test"),
        );
        p.validate().unwrap();
    }
}

#[test]
fn save_then_load_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let p = load("h200-linux").unwrap();
    p.save(&path).unwrap();
    let q = load(path.to_str().unwrap()).unwrap();
    assert_eq!(p, q);
    // nothing else (no leftover temporary) in the directory
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// A saved profile is ordinary data: readable by everyone (0644), not the temporary file's
/// owner-only 0600.
#[cfg(unix)]
#[test]
fn saved_profile_is_mode_0644() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    load("h200-linux").unwrap().save(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644);
}

#[test]
fn a_bad_profile_file_is_named_by_its_path_not_only_its_internal_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("my-gpu.json");
    let json = tiny().to_json();
    // 10 GB/s -> -1: a negative bandwidth, rejected by validation (not by the JSON parser).
    let bad = json.replacen("\"value\": 10.0", "\"value\": -1.0", 1);
    assert_ne!(bad, json);
    std::fs::write(&path, bad).unwrap();
    let e = load(path.to_str().unwrap()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("profile file {}: profile 'tiny':", path.display())),
        "{msg}"
    );
    assert!(msg.contains("'h2d_bandwidth' has value -1"), "{msg}");
    match e {
        ProfileError::InFile { inner, .. } => {
            assert!(matches!(*inner, ProfileError::BadValue { .. }))
        }
        other => panic!("expected InFile, got {other:?}"),
    }
}

#[test]
fn domains_round_trip_and_old_json_still_parses() {
    use profile::{Domain, Regressor, Span};
    // a constant written before domains existed: no `domain` key
    let old = r#"{"schema_version":1,"name":"old","description":"d","device":{"gpu":"g","os":"o","driver":"1","cuda":"1"},
        "constants":{"h2d_bandwidth":{"value":5.6,"unit":"GB/s","provenance":{"kind":"assumed","reason":"r"}}}}"#;
    let p = Profile::from_json(old, "old").unwrap();
    assert_eq!(p.constant(ConstantName::H2dBandwidth).unwrap().domain, None);
    assert!(!p.to_json().contains("domain"));
    // with a domain: written, read back, described
    let mut q = tiny();
    let d = Domain::of([
        Span::of_levels(Regressor::LiveGranules, [3072.0, 0.0, 6144.0, 1024.0]),
        Span::of_levels(Regressor::UnitGranules, []),
    ]);
    assert_eq!(d.ranges.len(), 1);
    q.set(
        ConstantName::VmmCommit,
        Constant::assumed(40.0, "us", "t").with_domain(d.clone()),
    );
    let back = Profile::from_json(&q.to_json(), "q").unwrap();
    assert_eq!(
        back.constant(ConstantName::VmmCommit).unwrap().domain,
        Some(d.clone())
    );
    assert_eq!(d.describe(), "live granules 0..6,144");
    let fill = Domain::of([
        Span::of_levels(Regressor::UnitGranules, [1.0]),
        Span::of_levels(Regressor::VramFill, [0.8978]),
    ]);
    assert_eq!(fill.describe(), "granules per unit 1; VRAM fill 89.8%");
    assert_eq!(
        Domain::unknown("the publication states no range").describe(),
        "unknown (the publication states no range)"
    );
    // distance: 40,960 live granules against 0..6,144 is 6.67x; inside is None
    let s = d.span(Regressor::LiveGranules).unwrap();
    assert!((s.distance(40960.0).unwrap() - 40960.0 / 6144.0).abs() < 1e-12);
    assert_eq!(s.distance(6144.0), None);
    let low = Span {
        of: Regressor::Bytes,
        min: 65536.0,
        max: 1e6,
    };
    assert_eq!(low.distance(16384.0), Some(4.0));
    // a range with min above max is refused, naming the constant
    let mut bad = tiny();
    bad.set(
        ConstantName::VmmCommit,
        Constant::assumed(40.0, "us", "t").with_domain(Domain {
            ranges: vec![Span {
                of: Regressor::Slots,
                min: 9.0,
                max: 1.0,
            }],
            unknown: None,
        }),
    );
    let e = bad.validate().unwrap_err().to_string();
    assert!(e.contains("vmm_commit") && e.contains("slots"), "{e}");
}

#[test]
fn every_shipped_constant_has_a_domain() {
    use profile::{shipped, shipped_host_names, Regressor};
    for name in shipped_names().into_iter().chain(shipped_host_names()) {
        let p = shipped(name).unwrap().unwrap();
        for (k, c) in &p.constants {
            assert!(c.domain.is_some(), "{name}: {k} has no domain");
        }
    }
    // the published RTX 4060 figures: the churn rows' 1- and 2-granule units; a rate the
    // publication gives without sizes says so
    let rtx = load("rtx4060-laptop-wddm").unwrap();
    let d = rtx
        .constant(ConstantName::VmmCommit)
        .unwrap()
        .domain
        .clone()
        .unwrap();
    let s = d.span(Regressor::UnitGranules).unwrap();
    assert_eq!((s.min, s.max), (1.0, 2.0));
    let h2d = rtx
        .constant(ConstantName::H2dBandwidth)
        .unwrap()
        .domain
        .clone()
        .unwrap();
    assert!(h2d.ranges.is_empty() && h2d.unknown.is_some());
}
