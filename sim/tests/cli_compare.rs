//! `sim compare` and `sim report` end to end on the bundled granite traces: sharded runs merged
//! equal the unsharded run byte for byte, regeneration reproduces the report, results do not
//! depend on the thread count, and bad input fails with a message instead of a panic.

use std::path::{Path, PathBuf};
use std::process::Command;

fn granite(name: &str) -> String {
    format!(
        "{}/../traces/data/granite/{name}.bin",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .expect("sim runs")
}

fn ok(args: &[&str]) {
    let o = sim(args);
    assert!(
        o.status.success(),
        "sim {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn fails(args: &[&str], needle: &str) {
    let o = sim(args);
    let err = String::from_utf8_lossy(&o.stderr);
    // 1: our errors, 2: clap's usage errors; 101 would be a panic
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "sim {args:?}: {:?} {err}",
        o.status
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(needle),
        "sim {args:?}: expected {needle:?} in {err}"
    );
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for sub in ["", "plots"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                v.push((
                    format!("{sub}/{}", e.file_name().to_string_lossy()),
                    std::fs::read(e.path()).unwrap(),
                ));
            }
        }
    }
    v.sort();
    v
}

fn compare_args(out: &Path) -> Vec<String> {
    [
        "compare",
        "--trace",
        &granite("english_prose"),
        "--trace",
        &granite("code"),
        "--policies",
        "e1,e2:index,e2:hot,e4:coact,region:64,os4k",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn run_compare(out: &Path, extra: &[&str]) {
    let mut a = compare_args(out);
    a.extend(extra.iter().map(|s| s.to_string()));
    ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
}

#[test]
fn merged_shards_equal_the_unsharded_run_byte_for_byte() {
    let d = tempfile::tempdir().unwrap();
    let whole = d.path().join("whole");
    run_compare(&whole, &[]);
    let n = 3;
    let dirs: Vec<PathBuf> = (0..n).map(|i| d.path().join(format!("shard{i}"))).collect();
    for (i, dir) in dirs.iter().enumerate() {
        run_compare(dir, &["--shard", &format!("{i}/{n}")]);
    }
    let merged = d.path().join("merged");
    let mut a = vec!["report", "--merge"];
    // any order
    a.extend(dirs.iter().rev().map(|p| p.to_str().unwrap()));
    a.extend(["--out", merged.to_str().unwrap()]);
    ok(&a);
    assert_eq!(files(&whole), files(&merged));
    // the same with retention, timing and batches (cheap mechanisms only)
    let args = |out: &Path, shard: Option<String>| {
        let mut a: Vec<String> = [
            "compare",
            "--trace",
            &granite("math"),
            "--trace",
            &granite("code"),
            "--policies",
            "e1,e2:hot",
            "--evict",
            "lru,static-pin",
            "--budgets",
            "25%",
            "--batch",
            "1,2",
            "--hw",
            "rtx4060-laptop-wddm",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(s) = shard {
            a.extend(["--shard".to_string(), s]);
        }
        a
    };
    let run = |a: Vec<String>| ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let whole2 = d.path().join("whole2");
    run(args(&whole2, None));
    let parts2: Vec<PathBuf> = (0..2).map(|i| d.path().join(format!("p{i}"))).collect();
    for (i, p) in parts2.iter().enumerate() {
        run(args(p, Some(format!("{i}/2"))));
    }
    let merged2 = d.path().join("merged2");
    ok(&[
        "report",
        "--merge",
        parts2[0].to_str().unwrap(),
        parts2[1].to_str().unwrap(),
        "--out",
        merged2.to_str().unwrap(),
    ]);
    assert_eq!(files(&whole2), files(&merged2));

    // a shard alone is marked partial, and missing slices are refused
    let md = std::fs::read_to_string(dirs[0].join("report.md")).unwrap();
    assert!(md.contains("this directory holds shard 0/3"));
    fails(
        &[
            "report",
            "--merge",
            dirs[0].to_str().unwrap(),
            dirs[2].to_str().unwrap(),
            "--out",
            d.path().join("m2").to_str().unwrap(),
        ],
        "shard 1/3 is missing",
    );
}

#[test]
fn report_regenerates_identically_and_threads_do_not_matter() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    run_compare(&a, &["--threads", "1"]);
    let b = d.path().join("b");
    run_compare(&b, &["--threads", "2"]);
    assert_eq!(files(&a), files(&b));
    let before = files(&a);
    ok(&["report", a.to_str().unwrap()]);
    assert_eq!(before, files(&a));

    // The report answers the questions: the JSON holds streaming blocks of every mechanism,
    // and cross-trace runs pack on one trace and evaluate on the other.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("results.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    // 2 traces x 6 mechanisms, + 2 ordered pairs x 2 profile-ordered mechanisms (e2:hot, e4:coact)
    assert_eq!(runs.len(), 2 * 6 + 2 * 2);
    let cross: Vec<_> = runs
        .iter()
        .filter(|r| r["grid"]["trace"] != r["grid"]["profile_trace"])
        .collect();
    assert_eq!(cross.len(), 4);
    for r in runs {
        assert!(r["streaming"]["resident_mib_per_layer_step"].is_number());
    }
    let md = std::fs::read_to_string(a.join("report.md")).unwrap();
    assert!(md.contains("## Cross-trace stability"));
    assert!(md.contains("least memory held is"));
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    let o = out.to_str().unwrap();
    let t = granite("math");
    fails(
        &["compare", "--trace", &t, "--policies", "e0", "--out", o],
        "--policies",
    );
    fails(
        &["compare", "--trace", &t, "--shard", "3/3", "--out", o],
        "--shard",
    );
    fails(
        &["compare", "--trace", &t, "--trace", &t, "--out", o],
        "distinct file name",
    );
    fails(
        &["compare", "--trace", "/nonexistent/x.bin", "--out", o],
        "/nonexistent/x.bin",
    );
    // an existing directory that is not a report is never replaced
    std::fs::write(d.path().join("keep.txt"), "x").unwrap();
    fails(
        &[
            "compare",
            "--trace",
            &t,
            "--policies",
            "e1",
            "--quiet",
            "--out",
            d.path().to_str().unwrap(),
        ],
        "not a report directory",
    );
    assert!(d.path().join("keep.txt").exists());
    fails(&["report", d.path().to_str().unwrap()], "results.json");
}

#[test]
fn retention_grid_compares_against_belady() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    ok(&[
        "compare",
        "--trace",
        &granite("english_prose"),
        "--trace",
        &granite("math"),
        "--policies",
        "e1,e2:hot",
        "--evict",
        "lru,static-pin",
        "--budgets",
        "10%,50%",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    // per trace: 2 streaming + 2 mechanisms x 2 budgets x 3 policies (belady added);
    // cross: 2 ordered pairs x (e2:hot streaming + 2 mechanisms x 2 budgets x static-pin)
    assert_eq!(runs.len(), 2 * (2 + 2 * 2 * 3) + 2 * (1 + 2 * 2));
    let get = |t: &str, p: &str, m: &str, e: &str, b: &str| {
        runs.iter()
            .find(|r| {
                let g = &r["grid"];
                g["trace"] == t
                    && g["profile_trace"] == p
                    && g["mechanism"] == m
                    && g["evict"] == e
                    && g["budget"] == b
            })
            .unwrap_or_else(|| panic!("no run {t} {p} {m} {e} {b}"))
    };
    for t in ["english_prose", "math"] {
        for m in ["e1", "e2:hot"] {
            for b in ["10%", "50%"] {
                let bel = get(t, t, m, "belady", b)["cache"]["page_ins"]
                    .as_u64()
                    .unwrap();
                let lru = get(t, t, m, "lru", b)["cache"]["page_ins"]
                    .as_u64()
                    .unwrap();
                assert!(bel <= lru, "{t} {m} {b}: belady {bel} > lru {lru}");
            }
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| belady (bound) |"));
    assert!(md.contains("fewest bytes moved by"));
    assert!(out.join("plots/bytes_per_token_math_e2_hot.svg").is_file());
}

#[test]
fn timing_on_the_rtx4060_profile_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    ok(&[
        "compare",
        "--trace",
        &granite("math"),
        "--policies",
        "e1,e2:hot",
        "--evict",
        "lru",
        "--budgets",
        "25%",
        "--batch",
        "1,4",
        "--hw",
        "rtx4060-laptop-wddm",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["profile"]["name"], "rtx4060-laptop-wddm");
    for r in json["runs"].as_array().unwrap() {
        let t = &r["timing"];
        let (p50, p99, mean) = (
            t["step_ms_p50"].as_f64().unwrap(),
            t["step_ms_p99"].as_f64().unwrap(),
            t["step_ms_mean"].as_f64().unwrap(),
        );
        assert!(p50 <= p99 && p99 <= t["step_ms_max"].as_f64().unwrap());
        // the critical path the time-split chart stacks: compute + stall = mean step time
        let path =
            t["compute_ms_per_step"].as_f64().unwrap() + t["stall_ms_per_step"].as_f64().unwrap();
        assert!(
            (path - mean).abs() <= 1e-6 * mean.max(1.0),
            "{path} vs {mean}"
        );
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("Simulated on `rtx4060-laptop-wddm`"));
    assert!(md.contains("fastest is"));
    for f in [
        "tokens_per_s_vs_batch_math.svg",
        "time_split_math_25__b4.svg",
        "step_cdf_math_25__b1.svg",
    ] {
        assert!(out.join("plots").join(f).is_file(), "{f}");
    }
}

/// `--dtype int4,bf16` is a grid axis: each run once per dtype, named by it in the results and
/// the report, with the cache figures of `sim run --dtype` of that dtype (an independent run
/// of the same point); one dtype adds no coordinate (results as before).
#[test]
fn dtype_axis_cells_equal_separate_runs() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("c");
    let base = [
        "--trace",
        &granite("code"),
        "--policies",
        "e1",
        "--evict",
        "lru",
        "--budgets",
        "100MiB",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    ok(&[&["compare"][..], &base, &["--dtype", "int4,bf16"]].concat());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let mut bytes = Vec::new();
    for dtype in ["int4", "bf16"] {
        let cell = runs
            .iter()
            .find(|r| r["grid"]["evict"] == "lru" && r["grid"]["dtype"] == dtype)
            .unwrap_or_else(|| panic!("no lru run in {dtype}"));
        let o = sim(&[
            "run",
            "--trace",
            &granite("code"),
            "--policy",
            "e1",
            "--evict",
            "lru",
            "--budget",
            "100MiB",
            "--dtype",
            dtype,
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(cell["cache"], run["cache"], "{dtype}");
        bytes.push(run["cache"]["bytes_per_token"].as_f64().unwrap());
        assert!(
            md.contains(&format!("### `code`, mechanism `e1 {dtype}`")),
            "{dtype}"
        );
    }
    // the axis changed the expert size: a bf16 expert is larger than an int4 one
    assert!(bytes[1] > bytes[0], "{bytes:?}");
    std::fs::remove_dir_all(&out).unwrap();
    ok(&[&["compare"][..], &base, &["--dtype", "int4"]].concat());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert!(json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["grid"].get("dtype").is_none()));
}

/// The page-ins of `sim run --evict POLICY --budget UNITS` on `code` with `e1`.
fn run_page_ins(policy: &str, units: u64) -> u64 {
    let o = sim(&[
        "run",
        "--trace",
        &granite("code"),
        "--policy",
        "e1",
        "--evict",
        policy,
        "--budget",
        &units.to_string(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    run["cache"]["page_ins"].as_u64().unwrap()
}

#[test]
fn untimed_compare_records_exact_curves_equal_to_separate_runs() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("c");
    let base = [
        "compare",
        "--trace",
        &granite("code"),
        "--policies",
        "e1",
        "--evict",
        "lru",
        "--budgets",
        "25%",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    ok(&base);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let curves = json["curves"]
        .as_array()
        .expect("an untimed grid records curves");
    let evicts: Vec<&str> = curves
        .iter()
        .map(|c| c["evict"].as_str().unwrap())
        .collect();
    assert_eq!(evicts, ["lru", "belady"]);
    for c in curves {
        let points = c["points"].as_array().unwrap();
        let units = c["units"].as_u64().unwrap();
        assert!(points.len() <= 256 && points.len() as u64 <= units);
        assert_eq!(points[0][0], 1);
        assert_eq!(points.last().unwrap()[0], units);
        // budgets off the grid's 25%, checked against a run at each
        for p in [
            &points[1],
            &points[points.len() / 3],
            points.last().unwrap(),
        ] {
            let (b, page_ins) = (p[0].as_u64().unwrap(), p[1].as_u64().unwrap());
            let policy = c["evict"].as_str().unwrap();
            assert_eq!(page_ins, run_page_ins(policy, b), "{policy} at {b} units");
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("The lru and belady lines are their exact curves"));
    // a batch of 4 steps otherwise than the curve: no curve rather than a wrong one
    std::fs::remove_dir_all(&out).unwrap();
    ok(&[&base[..], &["--batch", "4"]].concat());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert!(json.get("curves").is_none(), "{}", json["curves"]);
}
