//! `sim run` / `sim sweep` with retention options: exact JSON keys, the grid, bad input.

#[path = "cache_cli/curve.rs"]
mod curve;

use std::process::Command;

fn sim(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn keys(v: &serde_json::Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

const GRANITE_ALL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../traces/data/granite/all.bin"
);

#[test]
fn run_json_blocks_have_exactly_the_issue_keys() {
    let (ok, out, err) = sim(&[
        "run",
        "--trace",
        GRANITE_ALL,
        "--policy",
        "e1",
        "--evict",
        "lru",
        "--budget",
        "25%",
        "--dram",
        "10%",
        "--batch",
        "2",
        "--queue",
        "4",
        "--schedule",
        "route-aware",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        keys(&v["cache"]),
        [
            "tokens",
            "accesses",
            "page_ins",
            "page_ins_per_token",
            "miss_rate",
            "bytes_per_token",
            "evictions",
            "budget_units",
            "peak_resident_mib"
        ]
    );
    assert_eq!(
        keys(&v["tiers"]),
        ["dram_hits", "ssd_compulsory", "ssd_capacity"]
    );
    assert_eq!(
        keys(&v["schedule"]),
        ["unions_per_token", "delay_p50", "delay_p99", "delay_max"]
    );
    // 3 prompts x 64 decode tokens; 25% of 24 x 32 units = 192.
    assert_eq!(v["cache"]["tokens"], 192);
    assert_eq!(v["cache"]["budget_units"], 192);
    let c = &v["cache"];
    let t = &v["tiers"];
    assert_eq!(
        t["dram_hits"].as_u64().unwrap()
            + t["ssd_compulsory"].as_u64().unwrap()
            + t["ssd_capacity"].as_u64().unwrap(),
        c["page_ins"].as_u64().unwrap()
    );
}

#[test]
fn sweep_prints_the_grid_with_the_belady_bound_and_both_splits() {
    let (ok, out, err) = sim(&[
        "sweep",
        "--policies",
        "e1",
        "--evict",
        "lru,fifo",
        "--budget",
        "25%,50%",
        "--format",
        "json",
    ]);
    assert!(ok, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    // belady added first; 3 policies x 2 budgets x 2 splits, nested in that order.
    assert_eq!(rows.len(), 12);
    let key = |r: &serde_json::Value| {
        format!(
            "{}/{}/{}",
            r["retention"]["evict"].as_str().unwrap(),
            r["retention"]["budget"].as_str().unwrap(),
            r["retention"]["split"].as_str().unwrap()
        )
    };
    assert_eq!(key(&rows[0]), "belady/25%/global");
    assert_eq!(key(&rows[1]), "belady/25%/per-layer");
    assert_eq!(key(&rows[2]), "belady/50%/global");
    assert_eq!(key(&rows[11]), "fifo/50%/per-layer");
    for r in &rows {
        let bound = rows
            .iter()
            .find(|b| {
                b["retention"]["evict"] == "belady"
                    && b["retention"]["budget"] == r["retention"]["budget"]
                    && b["retention"]["split"] == r["retention"]["split"]
            })
            .unwrap();
        assert!(bound["cache"]["page_ins"].as_u64() <= r["cache"]["page_ins"].as_u64());
    }
    // Same command, same bytes.
    let (_, again, _) = sim(&[
        "sweep",
        "--policies",
        "e1",
        "--evict",
        "lru,fifo",
        "--budget",
        "25%,50%",
        "--format",
        "json",
    ]);
    assert_eq!(out, again);
}

#[test]
fn target_search_reports_the_search_kind() {
    let (ok, out, err) = sim(&[
        "run",
        "--policy",
        "e1",
        "--evict",
        "static-pin",
        "--target-tokens-per-s",
        "100",
        "--link-gbps",
        "25",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["target"]["search"], "binary");
    // The floor at the found budget reaches the target.
    let bpt = v["cache"]["bytes_per_token"].as_f64().unwrap();
    assert!(bpt == 0.0 || 25e9 / bpt >= 100.0);
    let (ok, out, _) = sim(&[
        "run",
        "--policy",
        "e1",
        "--evict",
        "fifo",
        "--target-tokens-per-s",
        "100",
        "--link-gbps",
        "25",
        "--json",
    ]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["target"]["search"], "scan");
}

#[test]
fn batch_and_queue_beyond_the_requests_run() {
    // A batch and queue of u32::MAX on a 3-sequence trace: each batch holds what is waiting
    // (nothing is sized by the flag's value), so the run completes.
    let (ok, out, err) = sim(&[
        "run",
        "--trace",
        GRANITE_ALL,
        "--policy",
        "e2",
        "--evict",
        "lru",
        "--budget",
        "50%",
        "--batch",
        "4294967295",
        "--queue",
        "4294967295",
        "--schedule",
        "route-aware",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["cache"]["page_ins"].as_u64().unwrap() > 0, "{out}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--policy", "e1", "--evict", "lru", "--budget", "0"],
            "holds no unit",
        ),
        (
            &["run", "--policy", "e1", "--evict", "lru", "--budget", "769"],
            "above the bank",
        ),
        (
            &[
                "run", "--policy", "e1", "--evict", "lru", "--budget", "120%",
            ],
            "above the bank",
        ),
        (
            &[
                "run", "--policy", "e1", "--evict", "lru", "--budget", "0.25",
            ],
            "percent sign",
        ),
        (
            &[
                "run", "--policy", "e1", "--evict", "lru", "--budget", "25%", "--batch", "4",
                "--queue", "2",
            ],
            "smaller than --batch",
        ),
        (
            &[
                "run", "--policy", "e1", "--evict", "nope", "--budget", "25%",
            ],
            "unknown eviction policy",
        ),
        (
            &["run", "--policy", "e1", "--evict", "lru"],
            "needs --budget",
        ),
        (
            &[
                "run",
                "--policy",
                "region:64",
                "--evict",
                "lru",
                "--budget",
                "25%",
                "--split",
                "per-layer",
            ],
            "spans MoE layers",
        ),
    ];
    for (args, needle) in cases {
        let (ok, out, err) = sim(args);
        assert!(!ok, "{args:?} should fail");
        assert!(out.is_empty(), "{args:?} printed {out}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn profile_trace_of_another_geometry_is_refused() {
    use traces::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.bin");
    let model = ModelSpec::uniform("other", 2, 4, 2);
    let t = Trace::decode_only(
        model,
        Provenance::default(),
        &[vec![vec![vec![0, 1], vec![2, 3]]]],
    )
    .unwrap();
    traces::write_file(&path, &t).unwrap();
    let (ok, _, err) = sim(&[
        "run",
        "--policy",
        "e1",
        "--evict",
        "static-pin",
        "--budget",
        "25%",
        "--profile-trace",
        path.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("profile"), "{err}");
}
