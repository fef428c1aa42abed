//! `sim curve` through the binary: its curves against `sim run` at sampled budgets, its
//! table against its JSON, every flag, and its errors.

use super::{sim, GRANITE_ALL};
use serde_json::Value;

const GRANITE_CODE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../traces/data/granite/code.bin"
);

fn json(args: &[&str]) -> Value {
    let (ok, out, err) = sim(args);
    assert!(ok, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

/// Page-ins of `policy`'s curve at `b` units.
fn at(v: &Value, policy: &str, b: usize) -> u64 {
    let c = v["curves"].as_array().unwrap();
    let c = c.iter().find(|c| c["evict"] == policy).unwrap();
    c["page_ins"][b - 1].as_u64().unwrap()
}

/// `sim run`'s page-ins at `b` units with `extra` flags.
fn run_page_ins(policy: &str, b: usize, extra: &[&str]) -> u64 {
    let b = b.to_string();
    let mut args = vec!["run", "--evict", policy, "--budget", &b, "--json"];
    args.extend_from_slice(extra);
    json(&args)["cache"]["page_ins"].as_u64().unwrap()
}

#[test]
fn curve_equals_sim_run_at_sampled_budgets() {
    let flags = [
        "--trace",
        GRANITE_ALL,
        "--policy",
        "e1",
        "--split",
        "per-layer",
        "--semantics",
        "access",
        "--phase",
        "all",
    ];
    let mut args = vec!["curve", "--json", "--evict", "lru,belady", "--no-progress"];
    args.extend_from_slice(&flags);
    let v = json(&args);
    assert_eq!(v["units"], 768);
    assert_eq!(v["phase"], "all");
    assert_eq!(v["split"], "per-layer");
    assert_eq!(v["semantics"], "access");
    assert_eq!(v["curves"][0]["layers"].as_array().unwrap().len(), 24);
    for b in [1, 7, 100, 333, 768] {
        for policy in ["lru", "belady"] {
            assert_eq!(
                at(&v, policy, b),
                run_page_ins(policy, b, &flags),
                "{policy} at {b}"
            );
        }
    }
    // A profile trace orders the experts of e2 (hot): the same units as `sim run`'s.
    let flags = [
        "--trace",
        GRANITE_ALL,
        "--policy",
        "e2",
        "--profile-trace",
        GRANITE_CODE,
    ];
    let mut args = vec!["curve", "--json", "--progress"];
    args.extend_from_slice(&flags);
    let v = json(&args);
    assert!(v.get("layers").is_none() && v["curves"][0].get("layers").is_none());
    for b in [3, 50, 200] {
        assert_eq!(
            at(&v, "lru", b),
            run_page_ins("lru", b, &flags),
            "e2 lru at {b}"
        );
    }
}

#[test]
fn curve_table_prints_the_json_at_its_points_and_knees() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("curve.txt");
    let common = [
        "--trace",
        GRANITE_ALL,
        "--policy",
        "e4",
        "--expert-mib",
        "8",
    ];
    let mut args = vec![
        "curve",
        "--points",
        "10%,50,1GiB",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(&common);
    let (ok, _, err) = sim(&args);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    let mut args = vec!["curve", "--json"];
    args.extend_from_slice(&common);
    let v = json(&args);
    // 4 experts of 8 MiB a unit: 32 MiB; 192 units. 10% -> 19.2 -> 19; 1 GiB / 32 MiB = 32.
    assert_eq!(v["largest_unit_bytes"], 32u64 << 20);
    assert_eq!(v["units"], 192);
    let accesses = v["accesses"].as_u64().unwrap() as f64;
    let knee = |p: &str| {
        let c = v["curves"].as_array().unwrap();
        c.iter().find(|c| c["evict"] == p).unwrap()["knee"]
            .as_u64()
            .unwrap() as usize
    };
    let rows = [
        ("10%", 19),
        ("50 units", 50),
        ("1 GiB (1073741824 B)", 32),
        ("knee (lru)", knee("lru")),
        ("knee (belady)", knee("belady")),
    ];
    for (label, b) in rows {
        let line = text
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label} in\n{text}"));
        let cols: Vec<&str> = line[label.len()..].split_whitespace().collect();
        let (lru, min) = (at(&v, "lru", b), at(&v, "belady", b));
        assert_eq!(cols[0], b.to_string(), "{line}");
        assert_eq!(cols[1], lru.to_string(), "{line}");
        assert_eq!(cols[2], format!("{:.4}", lru as f64 / accesses), "{line}");
        assert_eq!(cols[3], min.to_string(), "{line}");
        // the smallest budget at which LRU's page-ins are at most MIN's here
        let lru_all: Vec<u64> = (1..=192).map(|c| at(&v, "lru", c)).collect();
        let reach = lru_all.iter().position(|&p| p <= min).map(|i| i + 1);
        assert_eq!(cols[5], reach.unwrap().to_string(), "{line}");
    }
}

#[test]
fn curve_sizes_flags_set_the_unit_bytes() {
    // granite: 3 x 1024 x 512 weights an expert; fp8 = 1.5 MiB, committed in 2 MiB granules.
    let v = json(&["curve", "--json", "--policy", "e1", "--dtype", "fp8"]);
    assert_eq!(v["largest_unit_bytes"], 2u64 << 20);
    assert_eq!(v["trace"], "embedded:prose");
    let v = json(&[
        "curve",
        "--json",
        "--policy",
        "e1",
        "--expert-mib",
        "3",
        "--granule-mib",
        "1",
    ]);
    assert_eq!(v["largest_unit_bytes"], 3u64 << 20);
}

#[test]
fn curve_errors_say_what_to_fix() {
    let (ok, _, err) = sim(&["curve", "--evict", "fifo"]);
    assert!(!ok && err.contains("no exact curve for `fifo`"), "{err}");
    let (ok, _, err) = sim(&["curve", "--points", "200%"]);
    assert!(
        !ok && err.contains("--points: budget 200% is above the bank"),
        "{err}"
    );
    let (ok, _, err) = sim(&["curve", "--split", "per-expert"]);
    assert!(!ok && err.contains("--split"), "{err}");
    let (ok, _, err) = sim(&["curve", "--trace", GRANITE_ALL, "--trace", GRANITE_ALL]);
    assert!(!ok && err.contains("--trace was given 2 times"), "{err}");
}

/// `sim run --vs-belady`'s block against `sim run` at the budgets it names.
fn check_vs_belady(extra: &[&str], budget: &str) {
    let mut args = vec!["run", "--trace", GRANITE_ALL, "--policy", "e1"];
    args.extend_from_slice(extra);
    let mut lru = args.clone();
    lru.extend_from_slice(&[
        "--evict",
        "lru",
        "--budget",
        budget,
        "--vs-belady",
        "--json",
    ]);
    let v = json(&lru);
    let block = &v["vs_belady"];
    assert_eq!(block["policy"], "lru");
    assert_eq!(block["matched_by"], "exact-curve");
    assert_eq!(block["policy_page_ins"], v["cache"]["page_ins"]);
    assert_eq!(block["budget_units"], v["cache"]["budget_units"]);
    let mut min = args.clone();
    min.extend_from_slice(&["--evict", "belady", "--budget", budget, "--json"]);
    let belady = json(&min)["cache"]["page_ins"].as_u64().unwrap();
    assert_eq!(block["belady_page_ins"], belady, "{extra:?}");
    // LRU reaches MIN's page-ins at the block's budget and not one unit below
    let b = block["policy_budget_matching_belady"].as_u64().unwrap() as usize;
    let fixed: Vec<&str> = args[1..].to_vec();
    assert!(run_page_ins("lru", b, &fixed) <= belady);
    assert!(
        run_page_ins("lru", b - 1, &fixed) > belady,
        "{extra:?}: {b}"
    );
}

#[test]
fn run_vs_belady_names_the_budget_lru_needs() {
    check_vs_belady(&[], "10%");
    check_vs_belady(&["--split", "per-layer", "--semantics", "access"], "25%");
    // the text summary
    let (ok, out, err) = sim(&[
        "run",
        "--policy",
        "e2",
        "--evict",
        "lru",
        "--budget",
        "25%",
        "--vs-belady",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("vs belady (policy or working set?):"), "{out}");
    assert!(out.contains("lru matches it at"), "{out}");
    // without the flag, no block
    let v = json(&["run", "--evict", "lru", "--budget", "25%", "--json"]);
    assert!(v.get("vs_belady").is_none());
}

#[test]
fn run_vs_belady_refuses_what_it_cannot_compare() {
    let (ok, _, err) = sim(&["run", "--vs-belady"]);
    assert!(!ok && err.contains("give --evict POLICY --budget"), "{err}");
    let (ok, _, err) = sim(&[
        "run",
        "--evict",
        "lru",
        "--budget",
        "25%",
        "--batch",
        "2",
        "--vs-belady",
    ]);
    assert!(!ok && err.contains("one token per step"), "{err}");
}

/// A 10-token trace of one layer of 4 experts, top-1: experts 0 1 2 0 1 3 0 1 2 3, imported
/// from CSV into `dir`; returns the trace file.
fn tiny_trace(dir: &std::path::Path) -> String {
    let mut csv = String::from("sequence,token,layer,experts\n");
    for (t, e) in [0, 1, 2, 0, 1, 3, 0, 1, 2, 3].iter().enumerate() {
        csv += &format!("s,{t},0,{e}\n");
    }
    let src = dir.join("t.csv");
    std::fs::write(&src, csv).unwrap();
    let d = dir.to_str().unwrap();
    let (ok, _, err) = sim(&[
        "trace",
        "import",
        "--format",
        "csv",
        src.to_str().unwrap(),
        "--out",
        d,
    ]);
    assert!(ok, "{err}");
    dir.join("t.bin").to_str().unwrap().to_string()
}

#[test]
fn vs_belady_on_a_tiny_trace_matches_the_hand_count() {
    // Budget 2 units (experts), stream 0 1 2 0 1 3 0 1 2 3.
    // LRU at 2: every access misses (each reuse is 3 accesses later): 10; at 3: misses at
    //   0 1 2, then 3 (evicts 2), 2 (evicts 3), 3: 6 <= 7, so LRU needs 3 units.
    // MIN at 2: 0 1 2 (evicts 1, next use 4 > 3), 0 hit, 1 (evicts 2), 3 (evicts 1),
    //   0 hit, 1 (evicts 0, never used again), 2 (evicts 1), 3 hit: 7 page-ins.
    // FIFO at 3: 0 1 2, 0 1 hit, 3 (out 0), 0 (out 1), 1 (out 2), 2 (out 3), 3 (out 0): 8 > 7;
    //   at 4 only the 4 first uses: FIFO needs 4 units.
    let dir = tempfile::tempdir().unwrap();
    let trace = tiny_trace(dir.path());
    let block = |policy: &str| {
        let v = json(&[
            "run",
            "--trace",
            &trace,
            "--policy",
            "e1",
            "--expert-mib",
            "1",
            "--evict",
            policy,
            "--budget",
            "2",
            "--vs-belady",
            "--json",
        ]);
        v["vs_belady"].clone()
    };
    let lru = block("lru");
    assert_eq!(
        (
            &lru["policy_page_ins"],
            &lru["belady_page_ins"],
            &lru["policy_budget_matching_belady"]
        ),
        (&10.into(), &7.into(), &3.into())
    );
    assert_eq!(lru["matched_by"], "exact-curve");
    let fifo = block("fifo");
    assert_eq!(
        (
            &fifo["policy_page_ins"],
            &fifo["belady_page_ins"],
            &fifo["policy_budget_matching_belady"]
        ),
        (&10.into(), &7.into(), &4.into())
    );
    assert_eq!(fifo["matched_by"], "bisection");
    let min = block("belady");
    assert_eq!(
        (
            &min["policy_page_ins"],
            &min["belady_page_ins"],
            &min["policy_budget_matching_belady"]
        ),
        (&7.into(), &7.into(), &2.into())
    );
    // the text
    let (ok, out, err) = sim(&[
        "run",
        "--trace",
        &trace,
        "--policy",
        "e1",
        "--expert-mib",
        "1",
        "--evict",
        "fifo",
        "--budget",
        "2",
        "--vs-belady",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("belady page-ins 7 at 2 units (fifo 10); fifo matches it at 4 units (2.00x this budget; bisection)"),
        "{out}"
    );
}

#[test]
fn allocate_compares_the_curve_optimal_split_with_global_and_equal() {
    let flags = ["--trace", GRANITE_CODE, "--policy", "e1"];
    let mut args = vec!["curve", "--json", "--allocate", "10%,96", "--no-progress"];
    args.extend_from_slice(&flags);
    let v = json(&args);
    let rows = v["allocations"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "lru and belady at 2 budgets");
    for r in rows {
        let (policy, b) = (
            r["evict"].as_str().unwrap(),
            r["budget_units"].as_u64().unwrap(),
        );
        assert!(b == 77 || b == 96, "10% of 768 units = 76.8 -> 77");
        let b = b as usize;
        // the global and equal per-layer columns are what sim run counts
        assert_eq!(
            r["global_page_ins"],
            run_page_ins(policy, b, &flags),
            "{policy} {b}"
        );
        let mut per_layer = flags.to_vec();
        per_layer.extend_from_slice(&["--split", "per-layer"]);
        assert_eq!(
            r["per_layer_page_ins"],
            run_page_ins(policy, b, &per_layer),
            "{policy} {b}"
        );
        // the optimum: layer budgets within the total, at least 1 unit each, no worse than
        // the equal split (one of the allocations it searched)
        let opt = &r["curve_optimal"];
        let units: Vec<u64> = opt["layer_units"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_u64().unwrap())
            .collect();
        assert_eq!(units.len(), 24);
        assert!(units.iter().all(|&u| (1..=32).contains(&u)));
        assert!(units.iter().sum::<u64>() <= b as u64);
        assert!(opt["page_ins"].as_u64() <= r["per_layer_page_ins"].as_u64());
        assert!(["greedy", "dynamic-programming"].contains(&opt["method"].as_str().unwrap()));
    }
    // the text names the three splits
    let mut args = vec!["curve", "--allocate", "25%", "--no-progress"];
    args.extend_from_slice(&flags);
    let (ok, out, err) = sim(&args);
    assert!(ok, "{err}");
    assert!(
        out.contains("global") && out.contains("per-layer") && out.contains("curve-optimal"),
        "{out}"
    );
    let (ok, _, err) = sim(&["curve", "--allocate", "200%"]);
    assert!(!ok && err.contains("--allocate"), "{err}");
}
