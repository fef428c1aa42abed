//! `sim sweep` over several `--trace`: its rows are, trace by trace in the order given, the
//! rows of one sweep of each trace alone (JSON, CSV with a leading `trace` column, table),
//! whether the traces run side by side (all small) or one after another; the first failing
//! trace in that order gives the error; `sim run` refuses a second `--trace`; `--progress`
//! draws nothing on a short run.

mod common;
use common::sim;

fn granite(name: &str) -> String {
    format!(
        "{}/../traces/data/granite/{name}.bin",
        env!("CARGO_MANIFEST_DIR")
    )
}

const GRID: [&str; 6] = [
    "--evict",
    "lru,belady,static-pin",
    "--budget",
    "25%,50%",
    "--split",
    "global",
];

/// The output of one sweep of `traces` in `format`.
fn sweep(traces: &[String], format: &str) -> String {
    let mut args: Vec<&str> = vec!["sweep", "--format", format];
    for t in traces {
        args.extend(["--trace", t.as_str()]);
    }
    args.extend(GRID);
    let (ok, out, err) = sim(&args);
    assert!(ok, "{err}");
    out
}

/// Assert that one JSON sweep of `names` gives, in order, the rows of a sweep of each alone;
/// the number of rows.
fn json_rows_alone_and_together(names: &[String]) -> usize {
    let alone: Vec<serde_json::Value> = names
        .iter()
        .flat_map(|t| {
            let v: serde_json::Value =
                serde_json::from_str(&sweep(std::slice::from_ref(t), "json")).unwrap();
            v.as_array().unwrap().clone()
        })
        .collect();
    let together: serde_json::Value = serde_json::from_str(&sweep(names, "json")).unwrap();
    assert_eq!(together.as_array().unwrap(), &alone);
    alone.len()
}

#[test]
fn several_traces_give_the_rows_of_separate_sweeps() {
    let names = ["prose", "code", "math"].map(granite);
    assert_eq!(json_rows_alone_and_together(&names), 3 * 3 * 2);

    let tables: Vec<String> = names
        .iter()
        .map(|t| sweep(std::slice::from_ref(t), "table"))
        .collect();
    assert_eq!(sweep(&names, "table"), tables.join("\n"));
}

#[test]
fn csv_of_several_traces_adds_a_trace_column() {
    let names = ["prose", "code"].map(granite);
    let together = sweep(&names, "csv");
    let mut lines = together.lines();
    let header = lines.next().unwrap();
    let alone: Vec<String> = names
        .iter()
        .map(|t| sweep(std::slice::from_ref(t), "csv"))
        .collect();
    assert_eq!(
        header,
        format!("trace,{}", alone[0].lines().next().unwrap())
    );
    let expected: Vec<String> = names
        .iter()
        .zip(&alone)
        .flat_map(|(t, csv)| csv.lines().skip(1).map(move |l| format!("{t},{l}")))
        .collect();
    assert_eq!(lines.map(str::to_string).collect::<Vec<_>>(), expected);
}

#[test]
fn a_trace_too_large_to_run_side_by_side_gives_the_same_rows() {
    // 2,300 DeepSeek-V3 tokens are 1,067,200 selections, past the side-by-side bound (1 Mi)
    let dir = tempfile::tempdir().unwrap();
    let large = dir.path().join("ds.bin").display().to_string();
    let (ok, _, err) = sim(&[
        "trace",
        "gen",
        "--preset",
        "deepseek-v3",
        "--tokens",
        "2300",
        "--skew",
        "1.0",
        "--locality",
        "0.3",
        "--seed",
        "3",
        "--out",
        &large,
    ]);
    assert!(ok, "{err}");
    let names = [granite("prose"), large];
    json_rows_alone_and_together(&names);
}

#[test]
fn the_first_damaged_trace_in_order_gives_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let damaged: Vec<String> = ["code", "prose", "math"]
        .iter()
        .map(|n| {
            let mut bytes = std::fs::read(granite(n)).unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 0x5a;
            let p = dir.path().join(format!("{n}-damaged.bin"));
            std::fs::write(&p, bytes).unwrap();
            p.display().to_string()
        })
        .collect();
    let mut args: Vec<&str> = vec!["sweep"];
    for t in &damaged {
        args.extend(["--trace", t.as_str()]);
    }
    args.extend(GRID);
    let (ok, out, err) = sim(&args);
    assert!(!ok);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("code-damaged.bin"), "{err}");
    assert!(!err.contains("prose-damaged.bin"), "{err}");
}

#[test]
fn run_refuses_a_second_trace() {
    let (ok, _, err) = sim(&[
        "run",
        "--trace",
        &granite("prose"),
        "--trace",
        &granite("code"),
    ]);
    assert!(!ok);
    assert!(err.contains("--trace was given 2 times"), "{err}");
}

#[test]
fn a_short_run_draws_no_bar_even_when_asked() {
    let (ok, _, err) = sim(&[
        "sweep",
        "--trace",
        &granite("prose"),
        "--evict",
        "lru",
        "--budget",
        "25%",
        "--progress",
    ]);
    assert!(ok, "{err}");
    assert!(err.is_empty(), "{err}");
}
