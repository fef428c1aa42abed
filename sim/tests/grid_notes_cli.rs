//! Grids that meet an input they cannot fully run say so and go on: a batch larger than the
//! trace's sequences warns, a sweep leaves out the per-layer split of a mechanism whose units
//! span layers, a comparison of traces of different models leaves out their cross-trace runs.

use std::process::Command;

fn sim(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

const PROSE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../traces/data/granite/prose.bin"
);

#[test]
fn a_batch_larger_than_the_sequences_warns_once() {
    let (ok, _, err) = sim(&[
        "sweep", "--trace", PROSE, "--evict", "lru,lfu", "--budget", "25%", "--batch", "2,4",
    ]);
    assert!(ok, "{err}");
    let warning = "warning: the trace has 1 sequence(s) with decode tokens, fewer than --batch";
    assert_eq!(err.matches(warning).count(), 1, "{err}");
    let (ok, _, err) = sim(&[
        "run", "--trace", PROSE, "--policy", "e1", "--evict", "lru", "--budget", "25%", "--batch",
        "1",
    ]);
    assert!(ok && !err.contains("warning"), "{err}");
}

#[test]
fn a_sweep_leaves_out_the_per_layer_split_of_spanning_units() {
    let (ok, out, err) = sim(&[
        "sweep",
        "--trace",
        PROSE,
        "--policies",
        "e1,region:64",
        "--evict",
        "lru",
        "--budget",
        "25%",
    ]);
    assert!(ok, "{err}");
    assert!(
        err.contains(
            "the units of `region:64` span MoE layers, so its per-layer split is left out"
        ),
        "{err}"
    );
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("region:64")).collect();
    // Belady (always included) and LRU, global split only
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows.iter().all(|r| r.contains("global")), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("e1 ")).count(),
        4,
        "{out}"
    );
    // asked for explicitly, the per-layer split of spanning units is still an error
    let (ok, _, err) = sim(&[
        "sweep",
        "--trace",
        PROSE,
        "--policies",
        "region:64",
        "--evict",
        "lru",
        "--budget",
        "25%",
        "--split",
        "per-layer",
    ]);
    assert!(!ok && err.contains("per-layer"), "{err}");
}

#[test]
fn a_comparison_of_two_models_leaves_out_their_cross_trace_runs() {
    let d = tempfile::tempdir().unwrap();
    let other = d.path().join("other.bin");
    let (ok, _, err) = sim(&[
        "trace",
        "gen",
        "--preset",
        "olmoe-1b-7b",
        "--skew",
        "1",
        "--locality",
        "0.3",
        "--tokens",
        "16",
        "--out",
        other.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let out = d.path().join("report");
    let (ok, _, err) = sim(&[
        "compare",
        "--trace",
        PROSE,
        "--trace",
        other.to_str().unwrap(),
        "--policies",
        "e1,e2:hot",
        "--evict",
        "lru,static-pin",
        "--budgets",
        "25%",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("traces `prose` (granite-3.0-1b-a400m-instruct, 24 MoE layers of [32] experts) and `other` ("), "{err}");
    assert!(
        err.contains("16 MoE layers of [64] experts) come from different models"),
        "{err}"
    );
    assert!(!err.contains("--profile-trace"), "{err}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    for r in results["runs"].as_array().unwrap() {
        assert_eq!(r["grid"]["trace"], r["grid"]["profile_trace"]);
    }
}
