//! Through the binary: every command has `--json`; `sim compare`, `sim report` and `sim trace
//! export` say in JSON what they wrote; `sim plan --json` names its recommended row; compare
//! and sweep warn when budgets map more than the profile's usable VRAM without a cap; and the
//! report's at-a-glance table says why a pinning policy falls below the Belady figure.
//!
//! The granite prose trace (`traces/data/granite/prose.bin`): 1 sequence of 64 decode tokens,
//! 24 MoE layers of 32 experts (768 in all), top-8, hidden 1024 and expert FFN 512, so a bf16
//! expert is 3 x 1024 x 512 x 2 = 3,145,728 bytes (3 MiB).

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const PROSE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../traces/data/granite/prose.bin"
);

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> Output {
    let o = sim(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The subcommand names a `--help` text lists under "Commands:" (`help` left out).
fn commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_command_documents_json_in_its_help() {
    let top = String::from_utf8(ok(&["--help"]).stdout).unwrap();
    let mut leaves: Vec<Vec<String>> = Vec::new();
    for c in commands(&top) {
        let help = String::from_utf8(ok(&[&c, "--help"]).stdout).unwrap();
        let subs = commands(&help);
        if subs.is_empty() {
            leaves.push(vec![c]);
        } else {
            leaves.extend(subs.into_iter().map(|s| vec![c.clone(), s]));
        }
    }
    // run sweep trace{import,export,stats,gen} profile{list,show,union-curve,check-churn}
    // calibrate validate curve compare plan report
    assert_eq!(leaves.len(), 16, "{leaves:?}");
    for leaf in &leaves {
        let mut args: Vec<&str> = leaf.iter().map(String::as_str).collect();
        args.push("--help");
        let help = String::from_utf8(ok(&args).stdout).unwrap();
        assert!(
            help.contains("--json"),
            "`sim {}` has no --json",
            leaf.join(" ")
        );
    }
}

#[test]
fn trace_export_json_says_format_path_and_counts() {
    let d = tempfile::tempdir().unwrap();
    let og = d.path().join("p.oracleGeneral");
    let o = ok(&[
        "trace",
        "export",
        "--format",
        "oracle-general",
        "--dtype",
        "bf16",
        PROSE,
        "--out",
        og.to_str().unwrap(),
        "--json",
    ]);
    let v = stdout_json(&o);
    assert_eq!(v["format"], "oracle-general");
    assert_eq!(v["file"], PROSE);
    assert_eq!(v["out"], og.to_str().unwrap());
    assert_eq!(v["phase"], "decode");
    // 64 tokens x 24 MoE layers x top-8, and 24 bytes per request in the file
    assert_eq!(v["count"], 64 * 24 * 8);
    assert_eq!(std::fs::metadata(&og).unwrap().len(), 24 * 64 * 24 * 8);
    assert_eq!(v["unit"], "requests");
    assert_eq!(v["object_size"], 3 * 1024 * 512 * 2);

    let csv = d.path().join("p.csv");
    let v = stdout_json(&ok(&[
        "trace",
        "export",
        "--format",
        "csv",
        PROSE,
        "--out",
        csv.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["format"], "csv");
    assert_eq!(v["unit"], "rows");
    assert!(v.get("object_size").is_none());
    // one row per (token, MoE layer), plus the header line in the file
    assert_eq!(v["count"], 64 * 24);
    let lines = std::fs::read_to_string(&csv).unwrap().lines().count();
    assert_eq!(lines, 64 * 24 + 1);
}

/// `sim compare` of e1 under LRU and static-pin at 25% and 90% of the bank (untimed), with
/// `extra` flags, writing `out`.
fn compare(out: &Path, extra: &[&str]) -> Output {
    let mut a = vec![
        "compare",
        "--trace",
        PROSE,
        "--policies",
        "e1",
        "--evict",
        "lru,static-pin",
        "--budgets",
        "25%,90%",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    a.extend(extra);
    ok(&a)
}

#[test]
fn compare_and_report_json_say_what_was_written() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("report");
    let o = compare(&out, &["--json"]);
    let v = stdout_json(&o);
    assert_eq!(v["out"], out.to_str().unwrap());
    assert_eq!(v["replaced"], false);
    // the streaming run, then Belady, LRU and static-pin at each of the two budgets
    assert_eq!(v["runs_written"], 7);
    assert_eq!(v["total_runs"], 7);
    assert!(v.get("shard").is_none());
    let files: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(
        &files[..4],
        ["report.md", "report.html", "results.json", "results.csv"]
    );
    let mut plots: Vec<String> = std::fs::read_dir(out.join("plots"))
        .unwrap()
        .map(|e| format!("plots/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    plots.sort();
    assert_eq!(
        files[4..],
        plots.iter().map(String::as_str).collect::<Vec<_>>()[..]
    );

    // every run's figures are its results.json blocks'
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 7);
    for (s, r) in runs.iter().zip(results["runs"].as_array().unwrap()) {
        assert_eq!(s["run"], r["run"]);
        assert_eq!(s["grid"], r["grid"]);
        assert_eq!(
            s["resident_mib_per_layer_step"],
            r["streaming"]["resident_mib_per_layer_step"]
        );
        for k in ["page_ins_per_token", "miss_rate", "bytes_per_token"] {
            assert_eq!(s.get(k), r.get("cache").and_then(|c| c.get(k)), "{k}");
        }
        assert!(s.get("tokens_per_s").is_none(), "untimed");
    }
    // by hand: Belady at 90% pages in 756 units of 3 MiB over 64 tokens, static-pin 104
    let at_90 = |evict: &str| {
        runs.iter()
            .find(|r| r["grid"]["evict"] == evict && r["grid"]["budget"] == "90%")
            .unwrap()["bytes_per_token"]
            .as_f64()
            .unwrap()
    };
    let mib = 1024.0 * 1024.0;
    assert_eq!(at_90("belady"), 756.0 * 3.0 * mib / 64.0);
    assert_eq!(at_90("static-pin"), 104.0 * 3.0 * mib / 64.0);

    // regenerating in place replaces the report and says so
    let again = stdout_json(&ok(&["report", out.to_str().unwrap(), "--json"]));
    assert_eq!(again["replaced"], true);
    assert_eq!(again["runs"], v["runs"]);
    assert_eq!(again["files"], v["files"]);
}

#[test]
fn the_glance_table_says_why_static_pin_is_below_the_bound() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("report");
    compare(&out, &[]);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let glance = md
        .lines()
        .find(|l| l.starts_with("| `e1` |"))
        .expect("the at-a-glance row of e1");
    // 104 / 756 page-ins of equal units: 0.1376, printed to 3 significant digits
    assert!(
        glance.contains(
            "static-pin 4.88 (0.138x; not bounded by Belady: its pins, chosen from the profile trace, are never page-ins)"
        ),
        "{glance}"
    );
    // at 25% every policy is above the bound: only the 90% cell gives a reason
    assert_eq!(
        glance.matches("not bounded by Belady").count(),
        1,
        "{glance}"
    );
    assert!(
        md.contains("A ratio below 1x (`static-pin`) does not beat the optimum"),
        "{md}"
    );
    assert!(md.contains("which does not bound it (0.138x"), "{md}");
}

#[test]
fn plan_json_names_the_recommended_row_beside_its_index() {
    let o = ok(&[
        "plan",
        "--trace",
        PROSE,
        "--hw",
        "rtx4060-laptop-wddm",
        "--evict",
        "lru,static-pin",
        "--policies",
        "e1",
        "--admission-cap",
        "0.35",
        "--json",
    ]);
    let v = stdout_json(&o);
    let i = v["recommended"].as_u64().unwrap() as usize;
    let row = &v["recommended_row"];
    assert_eq!(row, &v["rows"][i]);
    assert_eq!(row["mechanism"], "e1");
    assert_eq!(row["bound"], false);
    // nothing fits: both are null
    let o = sim(&[
        "plan",
        "--trace",
        PROSE,
        "--hw",
        "rtx4060-laptop-wddm",
        "--policies",
        "e1",
        "--evict",
        "lru",
        "--nonexpert-mib",
        "9000",
        "--json",
    ]);
    assert!(!o.status.success());
    let v = stdout_json(&o);
    assert!(v["recommended"].is_null() && v["recommended_row"].is_null());
}

/// The e1 / LRU sweep at 25% and 90% of the bank with 12 MiB experts on the RTX 4060
/// profile, with `extra` flags. By hand: 25% is 192 units x 12 MiB = 2,304 MiB, 90% is 691
/// units = 8,292 MiB of experts alone, above the profile's 7,959 MiB of usable VRAM.
fn big_sweep(extra: &[&str]) -> Output {
    let mut a = vec![
        "sweep",
        "--trace",
        PROSE,
        "--policies",
        "e1",
        "--evict",
        "lru",
        "--split",
        "global",
        "--budget",
        "25%,90%",
        "--expert-mib",
        "12",
        "--hw",
        "rtx4060-laptop-wddm",
    ];
    a.extend(extra);
    ok(&a)
}

#[test]
fn sweep_and_compare_warn_of_budgets_over_usable_vram() {
    let o = big_sweep(&["--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    let rows = stdout_json(&o);
    let peak_90 = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["retention"]["budget"] == "90%")
        .map(|r| r["timing"]["peak_mapped_mib"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(peak_90 > 8292.0, "{peak_90}");
    let named = format!(
        "warning: without --admission-cap, the runs at budget 90% (peak {} MiB mapped) map more than the 7,959 MiB of usable VRAM of `rtx4060-laptop-wddm`",
        thousands(peak_90.round() as u64)
    );
    assert!(err.contains(&named), "{err}");
    assert!(err.contains("give --admission-cap 1.0"), "{err}");
    assert!(!err.contains("25%"), "{err}");

    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("report");
    let big_compare = |extra: &[&str]| {
        let mut a = vec![
            "compare",
            "--trace",
            PROSE,
            "--policies",
            "e1",
            "--evict",
            "lru",
            "--budgets",
            "25%,90%",
            "--expert-mib",
            "12",
            "--hw",
            "rtx4060-laptop-wddm",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ];
        a.extend(extra);
        ok(&a)
    };
    let o = big_compare(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.stdout.is_empty());
    assert!(
        err.contains("warning: without --admission-cap, the runs at budget 90% (peak "),
        "{err}"
    );
    assert!(
        !err.contains("budget 25%") && !err.contains("budgets"),
        "{err}"
    );
    // with a cap, the cells over it say they do not fit instead: no warning
    let o = big_compare(&["--admission-cap", "1.0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("@ 90%): does not fit") && !err.contains("warning"),
        "{err}"
    );
}

/// `n` with thousands separators, written out here independently of the binary's formatter.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `sim run` warns as sweep does: at 90% the peak mapped memory (read from the run's own
/// `--json`) is above the laptop's 7,959 MiB of usable VRAM and is named; at 25% it is not,
/// and no warning is printed.
#[test]
fn run_warns_of_a_budget_over_usable_vram() {
    let run = |budget: &str| {
        ok(&[
            "run",
            "--trace",
            PROSE,
            "--policy",
            "e1",
            "--evict",
            "lru",
            "--budget",
            budget,
            "--expert-mib",
            "12",
            "--hw",
            "rtx4060-laptop-wddm",
            "--json",
        ])
    };
    let o = run("90%");
    let peak = stdout_json(&o)["timing"]["peak_mapped_mib"]
        .as_f64()
        .unwrap();
    assert!(peak > 7959.0, "{peak}");
    let err = String::from_utf8_lossy(&o.stderr);
    let named = format!(
        "warning: without --admission-cap, the runs at budget 90% (peak {} MiB mapped) map more than the 7,959 MiB of usable VRAM",
        thousands(peak.round() as u64)
    );
    assert!(err.contains(&named), "{err}");
    let o = run("25%");
    assert!(
        stdout_json(&o)["timing"]["peak_mapped_mib"]
            .as_f64()
            .unwrap()
            < 7959.0
    );
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"));
}
