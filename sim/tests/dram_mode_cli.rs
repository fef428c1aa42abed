//! `--dram-mode page-cache` end to end: the refusals that name the flags, the `tiers` block
//! naming the mode, and the page-cache hits' copy time recomputed from the shipped H200
//! profile's own constants (pageable H2D rate and latency) on a generated granite trace.

use std::path::{Path, PathBuf};
use std::process::Command;

fn sim(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .expect("the sim binary runs");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A 32-token granite trace.
fn trace(dir: &Path) -> PathBuf {
    let g = dir.join("g.bin");
    let (ok, _, e) = sim(&[
        "trace",
        "gen",
        "--preset",
        "granite-3.0-1b-a400m",
        "--tokens",
        "32",
        "--seed",
        "5",
        "--skew",
        "1",
        "--locality",
        "0.3",
        "--out",
        g.to_str().unwrap(),
    ]);
    assert!(ok, "{e}");
    g
}

/// `sim run` of the trace on the H200 profiles with an LRU cache of 25% and `extra`.
fn run(g: &str, extra: &[&str]) -> (bool, String, String) {
    let base = [
        "run",
        "--trace",
        g,
        "--policy",
        "e1",
        "--hw",
        "h200-linux",
        "--hw-host",
        "h200-host",
        "--evict",
        "lru",
        "--budget",
        "25%",
    ];
    sim(&[&base[..], extra].concat())
}

fn json(g: &str, extra: &[&str]) -> serde_json::Value {
    let (ok, out, err) = run(g, &[extra, &["--json"]].concat());
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// A constant's value in the shipped H200 profile, in its file's unit.
fn h200(name: &str) -> f64 {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profile/profiles/h200-linux.json"
    );
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    p["constants"][name]["value"].as_f64().unwrap()
}

#[test]
fn page_cache_mode_without_dram_names_both_flags() {
    let dir = tempfile::tempdir().unwrap();
    let g = trace(dir.path());
    let (ok, _, err) = run(g.to_str().unwrap(), &["--dram-mode", "page-cache"]);
    assert!(!ok);
    assert!(
        err.contains("--dram-mode") && err.contains("--dram B"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_list_of_modes_is_refused_naming_the_flag() {
    let (ok, _, err) = sim(&[
        "sweep",
        "--trace",
        "x.bin",
        "--dram-mode",
        "pinned,page-cache",
    ]);
    assert!(!ok);
    assert!(
        err.contains("--dram-mode") && err.contains("not a list"),
        "{err}"
    );
}

#[test]
fn page_cache_hits_copy_at_the_pageable_rate() {
    let dir = tempfile::tempdir().unwrap();
    let g = trace(dir.path());
    let g = g.to_str().unwrap();
    let pinned = json(g, &["--dram", "50%"]);
    assert!(pinned["tiers"].get("mode").is_none());
    // naming the default is the run without the flag
    assert_eq!(json(g, &["--dram", "50%", "--dram-mode", "pinned"]), pinned);
    let paged = json(g, &["--dram", "50%", "--dram-mode", "page-cache"]);
    let t = &paged["tiers"];
    assert_eq!(t["mode"], "page-cache");
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    assert_eq!(
        n(&t["dram_hits"]) + n(&t["ssd_compulsory"]) + n(&t["ssd_capacity"]),
        n(&paged["cache"]["page_ins"])
    );
    // every hit copies one expert (e1) from pageable memory: latency (µs) + bytes / (MB/s)
    let d = &paged["timing_detail"];
    let hits = n(&d["tiers"]["dram_hits"]) as f64;
    assert!(hits > 0.0);
    let bytes = paged["inputs"]["expert_bytes"].as_f64().unwrap();
    let copy_us = h200("h2d_latency") + bytes / h200("h2d_pageable_bandwidth");
    let got_us =
        d["tiers"]["dram_copy_ms_per_step"].as_f64().unwrap() * 1e3 * n(&d["steps"]) as f64;
    assert!(
        (got_us - hits * copy_us).abs() < 1e-6 * got_us,
        "{got_us} vs {}",
        hits * copy_us
    );
    let slower =
        paged["timing"]["tokens_per_s"].as_f64() < pinned["timing"]["tokens_per_s"].as_f64();
    assert!(
        slower,
        "pageable copies are slower on the H200 (6.9 vs 55 GB/s)"
    );
    // the text names the mode
    let (ok, out, err) = run(g, &["--dram", "50%", "--dram-mode", "page-cache"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("page cache") && out.contains("--dram-mode page-cache"),
        "{out}"
    );
}
