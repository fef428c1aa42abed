//! `sim compare` and timed `sim sweep` on generated trace files (which now stream the files
//! instead of loading them) give, run by run, the reports of the in-memory path
//! (`sim::runner::run` on the loaded traces), the per-trace statistics of `sim compare`'s
//! report included; and `sim sweep --admission-cap` marks a cell over the cap "does not fit"
//! and goes on, as `sim compare` does.

mod common;

use common::{retention, sim, Files};
use policies::PolicyKind;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use serde_json::Value;
use sim::cache::{RetentionConfig, Semantics, Split};
use sim::engine::TimingConfig;
use sim::runner::{self, RunConfig, TraceInput, Workload};
use std::path::Path;
use std::sync::Arc;
use traces::PhaseSel;

/// A trace file `t.bin` (four sequences with prefill tokens) and a profile trace `p.bin`
/// of a 4-layer model of 16 experts, top-2.
fn files() -> Files {
    let mut rng = Pcg64::seed_from_u64(57);
    Files::write(&common::timed_model(), &common::MIXED_LENS, &mut rng)
}

fn load(p: &Path) -> TraceInput {
    TraceInput::load(Some(p)).unwrap()
}

/// The configuration of the CLI defaults for `mechanism` (phase all, int4) with retention
/// `evict` at `budget` (global split, group semantics, seed 0) and `timing`.
fn config(
    mechanism: &str,
    retention_of: Option<(&str, &str)>,
    timing: Option<TimingConfig>,
) -> RunConfig {
    let r = retention_of.map(|(evict, budget)| {
        let mut r: RetentionConfig = retention(
            PolicyKind::parse(evict).unwrap(),
            budget,
            Split::Global,
            Semantics::Group,
        );
        r.cache.seed = 0;
        r
    });
    let mut c = RunConfig {
        policy: mechanism.into(),
        phase: PhaseSel::All,
        retention: r,
        timing,
        ..RunConfig::default()
    };
    c.sizes.dtype = Some(traces::model::DType::Int4);
    c
}

fn h200(step_latencies: bool) -> TimingConfig {
    TimingConfig {
        step_latencies,
        ..TimingConfig::new("h200-linux", Arc::new(profile::load("h200-linux").unwrap()))
    }
}

/// `v` without the keys `keys` (a results.json entry less its grid coordinates).
fn without(mut v: Value, keys: &[&str]) -> Value {
    for k in keys {
        v.as_object_mut().unwrap().remove(*k);
    }
    v
}

/// Run `sim compare` on both files with `extra` flags and check every run and trace against
/// the in-memory path; returns the number of runs.
fn compare_matches_in_memory(f: &Files, extra: &[&str], timing: Option<TimingConfig>) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let mut args = vec![
        "compare",
        "--trace",
        f.trace.to_str().unwrap(),
        "--trace",
        f.profile.to_str().unwrap(),
        "--policies",
        "e1,e2:hot",
        "--evict",
        "lru,static-pin",
        "--budget",
        "25%",
        "--phase",
        "all",
        "--dtype",
        "int4",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let (ok, _, err) = sim(&args);
    assert!(ok, "{err}");
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let loaded = [load(&f.trace), load(&f.profile)];
    let index = |name: &str| ["t", "p"].iter().position(|&n| n == name).unwrap();
    for (info, (input, name)) in results["traces"]
        .as_array()
        .unwrap()
        .iter()
        .zip(loaded.iter().zip(["t", "p"]))
    {
        let (want, _) = sim::grid::trace_info(name, &input.label, &input.trace, PhaseSel::All);
        assert_eq!(info, &serde_json::to_value(&want).unwrap());
    }
    let runs = results["runs"].as_array().unwrap();
    for run in runs {
        let g = &run["grid"];
        let (t, p) = (
            index(g["trace"].as_str().unwrap()),
            index(g["profile_trace"].as_str().unwrap()),
        );
        let w = Workload::new(loaded[t].clone(), (p != t).then(|| loaded[p].clone())).unwrap();
        let r = g["evict"].as_str().zip(g["budget"].as_str());
        let cfg = config(g["mechanism"].as_str().unwrap(), r, timing.clone());
        let want = serde_json::to_value(runner::run(&cfg, &w).unwrap()).unwrap();
        assert_eq!(without(run.clone(), &["run", "grid"]), want, "{g}");
    }
    runs.len()
}

#[test]
fn compare_on_trace_files_matches_the_in_memory_path() {
    let f = files();
    // per trace: 2 streaming runs and 2 x 3 retention runs (Belady added); cross-trace:
    // e2:hot streaming and static-pin for both mechanisms, each way
    assert_eq!(
        compare_matches_in_memory(&f, &[], None),
        2 * (2 + 6) + 2 * 3
    );
    let timed = compare_matches_in_memory(&f, &["--hw", "h200-linux"], Some(h200(true)));
    assert_eq!(timed, 2 * (2 + 6) + 2 * 3);
}

#[test]
fn a_timed_sweep_of_a_trace_file_matches_the_in_memory_path() {
    let f = files();
    let args = [
        "sweep",
        "--trace",
        f.trace.to_str().unwrap(),
        "--policies",
        "e1,e2:coact",
        "--evict",
        "lru,belady",
        "--budget",
        "10%,25%",
        "--split",
        "global",
        "--phase",
        "all",
        "--hw",
        "h200-linux",
        "--dtype",
        "int4",
        "--json",
    ];
    let (ok, out, err) = sim(&args);
    assert!(ok, "{err}");
    // one worker gives the same rows as the default pool
    let (ok, one, err) = sim(&[&args[..], &["--threads", "1"]].concat());
    assert!(ok, "{err}");
    assert_eq!(one, out, "--threads 1");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    let w = Workload::new(load(&f.trace), None).unwrap();
    let mut want = Vec::new();
    // e2:coact now streams its co-activation pass; both cells match the loaded trace
    for m in ["e1", "e2:coact"] {
        // the policies in the order given (Belady is given, so not added first)
        for evict in ["lru", "belady"] {
            for budget in ["10%", "25%"] {
                let cfg = config(m, Some((evict, budget)), Some(h200(false)));
                want.push(serde_json::to_value(runner::run(&cfg, &w).unwrap()).unwrap());
            }
        }
    }
    assert_eq!(rows.len(), want.len());
    for (i, (got, want)) in rows.iter().zip(&want).enumerate() {
        assert!(got == want, "row {i}: {got}\nin memory: {want}");
    }
}

/// granite's bank is 3 GiB at e1 (768 experts of 4 MiB committed): 90% of it is over 0.3 x
/// the usable VRAM of the laptop profile (about 2.3 GiB), 10% is well under.
#[test]
fn a_sweep_row_over_the_admission_cap_does_not_fit_and_the_sweep_goes_on() {
    let prose = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../traces/data/granite/prose.bin"
    );
    let args = |format: &'static str| {
        vec![
            "sweep",
            "--trace",
            prose,
            "--policies",
            "e1",
            "--evict",
            "lru",
            "--budget",
            "10%,90%",
            "--split",
            "global",
            "--hw",
            "rtx4060-laptop-wddm",
            "--admission-cap",
            "0.3",
            "--format",
            format,
        ]
    };
    let (ok, out, err) = sim(&args("json"));
    assert!(ok, "{err}");
    // Belady and LRU at 90%
    assert_eq!(
        err.matches("at batch 1: does not fit: the admission cap admits no sequence")
            .count(),
        2,
        "{err}"
    );
    assert!(
        err.contains("sweep row `e1 lru 90% global` at batch 1: does not fit:"),
        "{err}"
    );
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    // every configuration without and with the cap
    assert_eq!(rows.len(), 2 * 2 * 2);
    let over: Vec<&Value> = rows
        .iter()
        .filter(|r| r["admission"]["admitted"] == 0)
        .collect();
    assert_eq!(over.len(), 2);
    for r in &over {
        assert_eq!(r["retention"]["budget"], "90%");
        assert!(r.get("timing").is_none() && r.get("cache").is_some(), "{r}");
        assert_eq!(r["admission"]["cap"], 0.3);
        // its cache block is that of the same configuration without the cap
        let twin = rows
            .iter()
            .find(|x| x["retention"] == r["retention"] && x.get("timing").is_some())
            .unwrap();
        assert_eq!(r["cache"], twin["cache"]);
    }
    let (ok, table, err) = sim(&args("table"));
    assert!(ok, "{err}");
    let rows_over: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("does not fit"))
        .collect();
    assert_eq!(rows_over.len(), 2, "{table}");
    assert!(rows_over
        .iter()
        .all(|l| l.contains("90%") && l.contains("0/1")));
}
