//! `sim run --hw`, `sim profile`: the timing block's exact keys, determinism, errors.

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

const KEYS: [&str; 16] = [
    "step_ms_p50",
    "step_ms_p90",
    "step_ms_p99",
    "step_ms_max",
    "step_ms_mean",
    "tokens_per_s",
    "compute_ms_per_step",
    "h2d_ms_per_step",
    "vmm_ms_per_step",
    "fault_ms_per_step",
    "stall_ms_per_step",
    "peak_mapped_mib",
    "map_calls",
    "unmap_calls",
    "prefetch_issued",
    "prefetch_used",
];

#[test]
fn run_with_hw_has_exactly_the_timing_keys_and_is_deterministic() {
    let args = [
        "run",
        "--policy",
        "e2",
        "--evict",
        "lru",
        "--budget",
        "25%",
        "--batch",
        "2",
        "--hw",
        "rtx4060-laptop-wddm",
        "--json",
    ];
    let (ok, out, err) = sim(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let t = v["timing"].as_object().unwrap();
    let mut keys: Vec<&str> = t.keys().map(|k| k.as_str()).collect();
    keys.sort();
    let mut want = KEYS.to_vec();
    want.sort();
    assert_eq!(keys, want);
    let (p50, p99, max) = (
        t["step_ms_p50"].as_f64().unwrap(),
        t["step_ms_p99"].as_f64().unwrap(),
        t["step_ms_max"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max);
    // conservation against the cache block: one map call per granule of each page-in (e2 of
    // 3 MiB experts: 6 MiB chunks = 3 granules)
    let page_ins = v["cache"]["page_ins"].as_u64().unwrap();
    assert_eq!(t["map_calls"].as_u64().unwrap(), 3 * page_ins);
    let (_, again, _) = sim(&args);
    assert_eq!(out, again);
}

#[test]
fn timeline_is_chrome_trace_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let (ok, _, err) = sim(&[
        "run",
        "--policy",
        "e1",
        "--hw",
        "h200-linux",
        "--timeline",
        path.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["ph"] == "X" && e["name"] == "h2d"));
}

#[test]
fn profile_commands_and_errors() {
    let (ok, out, _) = sim(&["profile", "list"]);
    assert!(ok && out.contains("rtx4060-laptop-wddm") && out.contains("h200-linux"));
    let (ok, out, _) = sim(&["profile", "show", "rtx4060-laptop-wddm"]);
    assert!(ok && out.contains("onnx-genai") && out.contains("prefetch hints: no"));
    // A whole-number range end keeps the value's decimals (h2d_bandwidth 5.6 GB/s, 5.2-6.0).
    assert!(out.contains("5.60 GB/s  [5.20-6.00]"), "{out}");
    assert!(out.contains("7959 MiB   [7100-7959]"), "{out}");
    // Text rounds for reading (cu_mem_create is 8.763296875 µs in the shipped H200 profile);
    // --json keeps every digit.
    let (ok, out, _) = sim(&["profile", "show", "h200-linux"]);
    assert!(ok && out.contains("8.76 us    [8.49-9.48]"), "{out}");
    assert!(!out.contains("8.763296875"), "{out}");
    let (ok, out, _) = sim(&["profile", "show", "h200-linux", "--json"]);
    assert!(ok && out.contains("8.763296875"), "{out}");
    let (ok, _, err) = sim(&["run", "--hw", "gtx-9000"]);
    assert!(
        !ok && err.contains("unknown hardware profile 'gtx-9000'"),
        "{err}"
    );
    let (ok, _, err) = sim(&[
        "run",
        "--policy",
        "e1",
        "--hw",
        "rtx4060-laptop-wddm",
        "--handle-pool",
    ]);
    assert!(!ok && err.contains("cu_mem_map"), "{err}");
    let (ok, _, err) = sim(&["run", "--predictor", "oracle"]);
    assert!(!ok && err.contains("--hw"), "{err}");
}

/// `sim sweep --admission-cap`: every configuration runs without and with the cap. The cache
/// table shows each configuration once, the CSV has one header (the union of the rows'
/// columns) and the JSON says of every row whether it was capped.
#[test]
fn sweep_with_admission_cap_prints_each_cache_row_once_and_a_rectangular_csv() {
    let base = [
        "sweep",
        "--policies",
        "e2",
        "--evict",
        "lru",
        "--budget",
        "25%",
        "--split",
        "global",
        "--batch",
        "1,2",
        "--hw",
        "rtx4060-laptop-wddm",
        "--admission-cap",
        "0.9",
    ];
    // configurations: evict {belady (always added), lru} x batch {1, 2}
    let configs = [("belady", "1"), ("belady", "2"), ("lru", "1"), ("lru", "2")];

    let (ok, out, err) = sim(&base);
    assert!(ok, "{err}");
    let cache_rows: Vec<Vec<&str>> = out
        .lines()
        .skip_while(|l| !l.starts_with("mechanism "))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    let seen: Vec<(&str, &str)> = cache_rows.iter().map(|c| (c[1], c[4])).collect();
    assert_eq!(seen, configs, "{out}");

    let mut csv_args = base.to_vec();
    csv_args.extend(["--format", "csv"]);
    let (ok, out, err) = sim(&csv_args);
    assert!(ok, "{err}");
    let mut rd = csv::Reader::from_reader(out.as_bytes());
    let header = rd.headers().unwrap().clone();
    let cap_col = header.iter().position(|h| h == "admission.cap").unwrap();
    let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), 2 * configs.len());
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), header.len());
        // uncapped first, then its capped twin
        let want = if i % 2 == 0 { "" } else { "0.9" };
        assert_eq!(&row[cap_col], want, "row {i}");
    }

    let mut json_args = base.to_vec();
    json_args.extend(["--format", "json"]);
    let (ok, out, err) = sim(&json_args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let runs = v.as_array().unwrap();
    assert_eq!(runs.len(), 2 * configs.len());
    for (i, r) in runs.iter().enumerate() {
        let a = &r["admission"];
        let batch = r["retention"]["batch"].as_u64().unwrap();
        assert_eq!(batch.to_string(), configs[i / 2].1);
        assert_eq!(a["requested"].as_u64(), Some(batch), "row {i}");
        if i % 2 == 0 {
            assert!(a["cap"].is_null(), "row {i}: {a}");
            assert_eq!(a["admitted"].as_u64(), Some(batch));
        } else {
            assert_eq!(a["cap"].as_f64(), Some(0.9), "row {i}: {a}");
        }
    }
}

/// Files written through a temporary file (`--out` of run and sweep, `--timeline`) end up
/// 0644 like any ordinary output, and `--out` names the file it wrote on stderr.
#[cfg(unix)]
#[test]
fn out_and_timeline_files_are_mode_0644_and_named_on_stderr() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let run_out = dir.path().join("run.txt");
    let timeline = dir.path().join("t.json");
    let (ok, _, err) = sim(&[
        "run",
        "--policy",
        "e1",
        "--hw",
        "h200-linux",
        "--out",
        run_out.to_str().unwrap(),
        "--timeline",
        timeline.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(mode(&run_out), 0o644);
    assert_eq!(mode(&timeline), 0o644);
    assert!(
        err.contains(&format!("wrote {}", run_out.display())),
        "{err}"
    );

    let sweep_out = dir.path().join("sweep.csv");
    let (ok, _, err) = sim(&[
        "sweep",
        "--policies",
        "e1,e2",
        "--format",
        "csv",
        "--out",
        sweep_out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(mode(&sweep_out), 0o644);
    assert_eq!(err.trim(), format!("wrote {}", sweep_out.display()));
}
