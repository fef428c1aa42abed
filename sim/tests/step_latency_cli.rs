//! `sim compare` keeps every step's latency for the report's CDF, and those latencies agree
//! with the `timing` block computed from the same steps by other means (hdrhistogram
//! percentiles, the exact max and mean); `sim run --json` does not carry them.

use serde_json::Value;
use std::process::Command;

fn granite(name: &str) -> String {
    format!(
        "{}/../traces/data/granite/{name}.bin",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn sim(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .expect("sim runs");
    assert!(
        o.status.success(),
        "sim {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The value of rank ceil(p n) (at least 1) of `sorted`: the smallest with a fraction p of
/// the values at or below it.
fn quantile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank - 1]
}

#[test]
fn compare_keeps_every_step_and_it_agrees_with_the_timing_block() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    let trace = granite("english_prose");
    sim(&[
        "compare",
        "--trace",
        &trace,
        "--policies",
        "e1,os64k",
        "--evict",
        "lru",
        "--budgets",
        "25%",
        "--hw",
        "rtx4060-laptop-wddm",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let res: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = res["runs"].as_array().unwrap();
    let mut checked = 0;
    for r in runs.iter().filter(|r| r.get("timing").is_some()) {
        let (t, d) = (&r["timing"], &r["timing_detail"]);
        let s = &d["step_latency"];
        assert_eq!(s["form"], "every-step");
        let steps = d["steps"].as_u64().unwrap();
        assert_eq!(s["steps"].as_u64().unwrap(), steps);
        let mut us: Vec<f64> = s["us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(us.len() as u64, steps);
        // the latencies keep 0.01 µs
        for &x in &us {
            assert!(((x * 100.0).round() - x * 100.0).abs() < 1e-6, "{x}");
        }
        us.sort_by(f64::total_cmp);
        let ms = |k: &str| t[k].as_f64().unwrap() * 1e3;
        // max and mean are exact in the timing block; the kept values are within 0.005 µs
        assert!((us[us.len() - 1] - ms("step_ms_max")).abs() <= 0.0051);
        let mean = us.iter().sum::<f64>() / us.len() as f64;
        assert!((mean - ms("step_ms_mean")).abs() <= 0.0051, "{mean}");
        // hdrhistogram's percentiles (3 significant digits) bound the exact ones from above
        for (p, k) in [
            (0.5, "step_ms_p50"),
            (0.9, "step_ms_p90"),
            (0.99, "step_ms_p99"),
        ] {
            let exact = quantile(&us, p);
            let hdr = ms(k);
            assert!(
                hdr >= exact - 0.0051 && hdr <= exact * 1.001 + 0.0051,
                "{k}: hdr {hdr} µs, exact {exact} µs"
            );
        }
        checked += 1;
    }
    assert!(checked >= 3, "{checked} timed runs");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("drawn as the empirical CDF of every step's latency"));
    assert!(!md.contains("keep no per-step latencies"));
}

#[test]
fn run_json_leaves_the_step_latencies_out() {
    let trace = granite("english_prose");
    let json = sim(&[
        "run",
        "--policy",
        "e1",
        "--trace",
        &trace,
        "--evict",
        "lru",
        "--budget",
        "25%",
        "--hw",
        "rtx4060-laptop-wddm",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert!(v["timing_detail"].is_object());
    assert!(v["timing_detail"].get("step_latency").is_none());
}
