//! `--verify`, `--acceptance`, `--accepted`, `--prefill-chunk` and `sim profile union-curve`
//! from the command line: K = 0 changes nothing, bad values name their flag, the sweep's
//! stepping axis, and the union-curve table of the shipped H200 profile.

mod common;

use common::sim;

const RUN: [&str; 9] = [
    "run",
    "--policy",
    "e1",
    "--evict",
    "lru",
    "--budget",
    "25%",
    "--hw",
    "h200-linux",
];

#[test]
fn verify_zero_is_byte_identical_to_no_flag() {
    let (ok, plain, e) = sim(&[&RUN[..], &["--json"]].concat());
    assert!(ok, "{e}");
    let (ok, zero, e) = sim(&[&RUN[..], &["--json", "--verify", "0"]].concat());
    assert!(ok, "{e}");
    assert_eq!(plain, zero);
    let v: serde_json::Value = serde_json::from_str(&plain).unwrap();
    assert!(v.get("steps").is_none());
}

#[test]
fn bad_stepping_values_name_their_flag_and_fail() {
    for (args, flag) in [
        (&["--verify", "2"][..], "--acceptance"),
        (
            &["--verify", "2", "--acceptance", "1.5"],
            "--acceptance 1.5",
        ),
        (&["--verify", "2", "--accepted", "3"], "--accepted 3"),
        (&["--acceptance", "0.5"], "--verify"),
        (&["--prefill-chunk", "8"], "--phase all"),
        (
            &["--prefill-chunk", "0", "--phase", "all"],
            "--prefill-chunk 0",
        ),
        (&["--verify", "1,2", "--acceptance", "0.5"], "sim sweep"),
    ] {
        let (ok, out, e) = sim(&[&RUN[..], args].concat());
        assert!(!ok && out.is_empty(), "{args:?} succeeded");
        assert!(e.contains(flag), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{args:?}: {e}");
    }
}

#[test]
fn a_verify_run_reports_its_steps_and_is_deterministic() {
    let args = [
        &RUN[..],
        &["--verify", "2", "--acceptance", "0.7", "--json"],
    ]
    .concat();
    let (ok, a, e) = sim(&args);
    assert!(ok, "{e}");
    let (_, b, _) = sim(&args);
    assert_eq!(a, b);
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    let s = &v["steps"];
    assert_eq!(s["verify"], 2);
    assert_eq!(s["acceptance"], 0.7);
    // (1 - 0.7^3) / (1 - 0.7) = 1 + 0.7 + 0.49
    assert!((s["expected_tokens_per_step"].as_f64().unwrap() - 2.19).abs() < 1e-12);
    // the cache block counts every token produced
    assert_eq!(v["cache"]["tokens"], s["decode_tokens"]);
    assert_eq!(v["timing_detail"]["tokens"], s["decode_tokens"]);
    assert!(s["baseline_tokens_per_s"].as_f64().unwrap() > 0.0);
    // another seed draws other acceptances
    let (_, c, _) = sim(&[&args[..], &["--seed", "3"]].concat());
    assert_ne!(a, c);
}

/// `sim sweep` of e1 under LRU at 50% (global) on the H200, with `more` arguments.
fn sweep(more: &[&str]) -> (bool, String, String) {
    let base = [
        "sweep",
        "--policies",
        "e1",
        "--evict",
        "lru",
        "--budget",
        "50%",
        "--split",
        "global",
        "--hw",
        "h200-linux",
    ];
    sim(&[&base[..], more].concat())
}

#[test]
fn the_sweep_crosses_k_with_p_and_tabulates_them() {
    let (ok, out, e) = sweep(&[
        "--verify",
        "0,1,2",
        "--acceptance",
        "0.5,0.9",
        "--format",
        "json",
    ]);
    assert!(ok, "{e}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // belady and lru, each at K = 0 once and K = 1, 2 at both P: 2 x 5 rows
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 10);
    let k: Vec<Option<u64>> = rows[..5]
        .iter()
        .map(|r| r["steps"]["verify"].as_u64())
        .collect();
    assert_eq!(k, [None, Some(1), Some(1), Some(2), Some(2)]);
    let (ok, table, e) = sweep(&["--verify", "0,2", "--acceptance", "0.7"]);
    assert!(ok, "{e}");
    assert!(table.contains("tokens per step against K and P"), "{table}");
    assert!(table.contains("verify K=2 P=0.7"), "{table}");
}

#[test]
fn the_union_curve_of_the_shipped_h200_profile() {
    let (ok, out, e) = sim(&[
        "profile",
        "union-curve",
        "--hw",
        "h200-linux",
        "--slots",
        "60",
        "--json",
    ]);
    assert!(ok, "{e}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // the curve as stored in the profile file, read apart from the profile crate
    let text = include_str!("../../profile/profiles/h200-linux.json");
    let p: serde_json::Value = serde_json::from_str(text).unwrap();
    let curve = &p["expert_kernel_curve"];
    let bytes = curve["expert_bytes"].as_f64().unwrap();
    let stream = p["constants"]["stream_read_bandwidth"]["value"]
        .as_f64()
        .unwrap();
    // the bound the repeat rate's provenance states ("within X% of every per-slot arm")
    let method = p["constants"]["expert_kernel_repeat_bandwidth"]["provenance"]["method"]
        .as_str()
        .unwrap();
    let bound: f64 = method
        .split("within ")
        .nth(1)
        .and_then(|t| t.split('%').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no stated bound in {method}"));
    let rows = v["rows"].as_array().unwrap();
    let points = curve["points"].as_array().unwrap();
    assert_eq!(rows.len(), points.len());
    for (r, q) in rows.iter().zip(points) {
        let d = q["distinct"].as_f64().unwrap();
        let t = q["per_slot_us"].as_f64().unwrap();
        assert_eq!(r["distinct"], q["distinct"]);
        assert_eq!(r["per_slot_measured_us"], q["per_slot_us"]);
        assert_eq!(r["union_measured_us"], q["union_us"]);
        // the surface reproduces each measurement within the bound its provenance states
        let fit = r["per_slot_us"].as_f64().unwrap();
        assert!(
            100.0 * ((fit - t) / t).abs() <= bound + 0.05,
            "{d}: {fit} vs {t} (bound {bound}%)"
        );
        // rates from the measured time: distinct bytes and all 60 slots' bytes
        let rd = r["distinct_bytes_per_us"].as_f64().unwrap();
        let rs = r["slot_bytes_per_us"].as_f64().unwrap();
        assert!((rd - d * bytes / t).abs() < 1e-6 * rd);
        assert!((rs - 60.0 * bytes / t).abs() < 1e-6 * rs);
        assert_eq!(r["slot_possible"], rs <= stream);
    }
    // a profile without the kernel fit names what is missing
    let (ok, _, e) = sim(&[
        "profile",
        "union-curve",
        "--hw",
        "rtx4060-laptop-wddm",
        "--slots",
        "60",
    ]);
    assert!(!ok && e.contains("expert_kernel_fixed"), "{e}");
    let (ok, _, e) = sim(&[
        "profile",
        "union-curve",
        "--hw",
        "h200-linux",
        "--slots",
        "8",
        "--distinct",
        "9",
    ]);
    assert!(!ok && e.contains("--distinct 9"), "{e}");
}

#[test]
fn the_comparison_report_draws_tokens_per_second_against_k() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rep");
    let (ok, _, e) = sim(&[
        "compare",
        "--trace",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../traces/data/granite/prose.bin"
        ),
        "--policies",
        "e1",
        "--evict",
        "lru",
        "--budget",
        "50%",
        "--hw",
        "h200-linux",
        "--verify",
        "0,2",
        "--acceptance",
        "0.5,0.9",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{e}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Several tokens per step"), "{md}");
    assert!(out
        .join("plots/steps_tokens_prose_e1___lru___50_.svg")
        .is_file());
    // per mechanism and budget: K = 0 once, K = 2 at both P, with their grid coordinates
    let res: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let lru: Vec<(u64, Option<String>)> = res["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["grid"]["evict"] == "lru")
        .map(|r| {
            let g = &r["grid"];
            (
                g["verify"].as_u64().unwrap(),
                g["acceptance"].as_str().map(String::from),
            )
        })
        .collect();
    assert_eq!(
        lru,
        [(0, None), (2, Some("0.5".into())), (2, Some("0.9".into()))]
    );
    assert_eq!(res["grid"]["steps"].as_array().unwrap().len(), 3);
}
