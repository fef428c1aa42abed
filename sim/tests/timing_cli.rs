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
    // the host profiles --hw-host takes are listed too
    assert!(
        out.contains("dev-box-host") && out.contains("h200-host"),
        "{out}"
    );
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

const GRANITE_CODE: &str = "../traces/data/granite/code.bin";
const GRANITE_PROSE: &str = "../traces/data/granite/prose.bin";

/// `sim CMD` on granite code, e1 under LRU 50% (global), timed on h200-linux, then `extra`.
fn granite_lru<'a>(cmd: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let policy = if cmd == "sweep" {
        "--policies"
    } else {
        "--policy"
    };
    let mut args = vec![
        cmd,
        "--trace",
        GRANITE_CODE,
        policy,
        "e1",
        "--evict",
        "lru",
        "--budget",
        "50%",
        "--split",
        "global",
        "--hw",
        "h200-linux",
    ];
    args.extend_from_slice(extra);
    args
}

/// `sim run --json` of [`granite_lru`] with `extra` flags.
fn prefetch_run(extra: &[&str]) -> serde_json::Value {
    let mut extra = extra.to_vec();
    extra.push("--json");
    let (ok, out, err) = sim(&granite_lru("run", &extra));
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// The `prefetch` block's keys under `--prefetch-issue legacy` (the default adds
/// [`ISSUE_KEYS`]).
const PREFETCH_KEYS: [&str; 16] = [
    "predictor",
    "window",
    "learns_from",
    "issued",
    "used",
    "late",
    "wasted",
    "page_ins",
    "precision",
    "recall",
    "wasted_bytes_per_token",
    "stall_ms_per_step",
    "stall_ms_per_step_none",
    "stall_ms_per_step_oracle",
    "stall_hidden_ms_per_step",
    "stall_hidden_of_oracle",
];

/// The keys the demand-first issue policy adds to the `prefetch` block.
const ISSUE_KEYS: [&str; 4] = ["issue", "cancelled", "blocked_ms_per_step", "cut_curve"];

#[test]
fn the_prefetch_block_agrees_with_separate_runs_without_prefetch_and_with_the_oracle() {
    let none = prefetch_run(&[]);
    assert!(none.get("prefetch").is_none(), "no predictor, no block");
    let stall = |v: &serde_json::Value| v["timing"]["stall_ms_per_step"].as_f64().unwrap();
    let oracle = prefetch_run(&["--predictor", "oracle", "--window", "2"]);
    for (flags, from) in [
        (vec!["--profile-trace", GRANITE_PROSE], "profile"),
        (vec![], "online"),
    ] {
        let mut f = flags.clone();
        f.extend(["--predictor", "next-layer", "--window", "2"]);
        let v = prefetch_run(&f);
        let p = &v["prefetch"];
        let keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, [&PREFETCH_KEYS[..], &ISSUE_KEYS].concat(), "{from}");
        assert_eq!(p["issue"], "demand-first");
        assert_eq!(
            (p["predictor"].as_str(), p["learns_from"].as_str()),
            (Some("next-layer"), Some(from))
        );
        let n = |k: &str| p[k].as_u64().unwrap();
        let x = |k: &str| p[k].as_f64().unwrap();
        assert_eq!(
            n("issued"),
            n("used") + n("late") + n("wasted") + n("cancelled")
        );
        assert_eq!(
            n("issued"),
            v["timing"]["prefetch_issued"].as_u64().unwrap()
        );
        assert_eq!(
            n("used") + n("late"),
            v["timing"]["prefetch_used"].as_u64().unwrap()
        );
        assert_eq!(n("page_ins"), none["cache"]["page_ins"].as_u64().unwrap());
        let caught = (n("used") + n("late")) as f64;
        assert_eq!(x("precision"), caught / n("issued") as f64);
        assert_eq!(x("recall"), caught / n("page_ins") as f64);
        // the baselines are the separate runs' stalls, to the bit
        assert_eq!(x("stall_ms_per_step"), stall(&v));
        assert_eq!(x("stall_ms_per_step_none"), stall(&none));
        assert_eq!(x("stall_ms_per_step_oracle"), stall(&oracle));
        assert_eq!(x("stall_hidden_ms_per_step"), stall(&none) - stall(&v));
        let bound = stall(&none) - stall(&oracle);
        assert_eq!(
            x("stall_hidden_of_oracle"),
            (stall(&none) - stall(&v)) / bound
        );
    }
    assert_eq!(oracle["prefetch"]["learns_from"], "future");
    assert_eq!(oracle["prefetch"]["stall_hidden_of_oracle"], 1.0);
}

/// `--prefetch-issue legacy` prints the block as before the policies (no issue keys, nothing
/// cancelled); `--prefetch-cap` is reported in MiB and is refused where it cannot apply.
#[test]
fn the_issue_policy_and_the_cap_are_flags_of_run() {
    let legacy = prefetch_run(&["--predictor", "oracle", "--prefetch-issue", "legacy"]);
    let p = &legacy["prefetch"];
    let keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, PREFETCH_KEYS);
    let n = |p: &serde_json::Value, k: &str| p[k].as_u64().unwrap();
    assert_eq!(n(p, "issued"), n(p, "used") + n(p, "late") + n(p, "wasted"));
    let free = prefetch_run(&["--predictor", "oracle"]);
    let capped = prefetch_run(&["--predictor", "oracle", "--prefetch-cap", "0.5"]);
    let c = &capped["prefetch"];
    assert_eq!(c["cap_mib"], 0.5);
    assert_eq!(c["issue"], "demand-first");
    assert_eq!(
        n(c, "issued"),
        n(c, "used") + n(c, "late") + n(c, "wasted") + n(c, "cancelled")
    );
    // a cap below one unit runs one prefetch at a time: the run differs from the uncapped
    assert_ne!(capped["timing"], free["timing"]);
    for (flags, says) in [
        (
            vec!["--predictor", "oracle", "--prefetch-cap", "-1"],
            "positive number of MiB",
        ),
        (vec!["--prefetch-cap", "4"], "add a --predictor"),
        (
            vec![
                "--predictor",
                "oracle",
                "--prefetch-cap",
                "4",
                "--prefetch-issue",
                "legacy",
            ],
            "demand-first",
        ),
        (
            vec!["--predictor", "oracle", "--prefetch-issue", "eager"],
            "demand-first",
        ),
    ] {
        let (ok, _, err) = sim(&granite_lru("run", &flags));
        assert!(!ok && err.contains(says), "{flags:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `--prefetch-issue idle-only` never blocks demand work (the block reports 0 ms waited) and
/// `--prefetch-buffer N` is reported as `buffer_units`; with one slot no more than one
/// prefetch is held at once, so fewer start than without a bound. Both are refused where
/// they cannot apply.
#[test]
fn idle_only_issue_and_a_staging_buffer_are_flags_of_run() {
    let n = |p: &serde_json::Value, k: &str| p[k].as_u64().unwrap();
    let fates =
        |p: &serde_json::Value| n(p, "used") + n(p, "late") + n(p, "wasted") + n(p, "cancelled");
    let idle = prefetch_run(&["--predictor", "next-layer", "--prefetch-issue", "idle-only"]);
    let p = &idle["prefetch"];
    assert_eq!(p["issue"], "idle-only");
    assert_eq!(p["blocked_ms_per_step"], 0.0);
    assert_eq!(n(p, "issued"), fates(p));
    let free = prefetch_run(&["--predictor", "oracle"]);
    let one = prefetch_run(&["--predictor", "oracle", "--prefetch-buffer", "1"]);
    let (f, o) = (&free["prefetch"], &one["prefetch"]);
    assert_eq!(o["buffer_units"], 1);
    assert!(f.get("buffer_units").is_none());
    assert_eq!(n(o, "issued"), fates(o));
    assert!(n(o, "cancelled") > n(f, "cancelled"), "{o} {f}");
    let (ok, out, err) = sim(&granite_lru(
        "run",
        &["--predictor", "oracle", "--prefetch-buffer", "2"],
    ));
    assert!(ok, "{err}");
    assert!(out.contains("staged in a buffer of 2 units"), "{out}");
    for (flags, says) in [
        (
            vec!["--predictor", "oracle", "--prefetch-buffer", "0"],
            "positive number of unit slots",
        ),
        (
            vec!["--predictor", "oracle", "--prefetch-buffer", "-1"],
            "--prefetch-buffer",
        ),
        (vec!["--prefetch-buffer", "4"], "add a --predictor"),
        (
            vec![
                "--predictor",
                "oracle",
                "--prefetch-buffer",
                "4",
                "--prefetch-issue",
                "legacy",
            ],
            "idle-only",
        ),
    ] {
        let (ok, _, err) = sim(&granite_lru("run", &flags));
        assert!(!ok && err.contains(says), "{flags:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `--prefetch-min-score` cuts a scoring predictor's predictions (fewer issued, the block says
/// the cut and its precision is the cut run's own), leaves the oracle (every unit scores 1)
/// whole, and is refused without a predictor or outside (0, 1].
#[test]
fn a_confidence_cut_is_a_flag_of_run() {
    let free = prefetch_run(&["--predictor", "next-layer"]);
    let cut = prefetch_run(&["--predictor", "next-layer", "--prefetch-min-score", "1"]);
    let (f, c) = (&free["prefetch"], &cut["prefetch"]);
    assert!(f.get("min_score").is_none());
    assert_eq!(c["min_score"], 1.0);
    let n = |p: &serde_json::Value, k: &str| p[k].as_u64().unwrap();
    assert!(n(c, "issued") < n(f, "issued"), "{c} {f}");
    let caught = (n(c, "used") + n(c, "late")) as f64;
    assert_eq!(
        c["precision"].as_f64().unwrap(),
        caught / n(c, "issued") as f64
    );
    assert_eq!(c["stall_ms_per_step_oracle"], f["stall_ms_per_step_oracle"]);
    // the curve: ten cuts, fewer issued at higher cuts, each point's precision its own
    let curve = f["cut_curve"].as_array().unwrap();
    assert_eq!(curve.len(), 10);
    let issued: Vec<u64> = curve.iter().map(|p| n(p, "issued")).collect();
    assert!(issued.windows(2).all(|w| w[0] >= w[1]), "{issued:?}");
    assert!(
        issued[0] <= n(f, "issued") && issued[9] < issued[0],
        "{issued:?}"
    );
    for p in curve {
        let (prec, rec) = (
            p["precision"].as_f64().unwrap(),
            p["recall"].as_f64().unwrap(),
        );
        let caught = rec * n(f, "page_ins") as f64;
        assert!((prec * n(p, "issued") as f64 - caught).abs() < 1e-6, "{p}");
    }
    let oracle = |extra: &[&str]| {
        let mut flags = vec!["--predictor", "oracle"];
        flags.extend_from_slice(extra);
        prefetch_run(&flags)["timing"].clone()
    };
    assert_eq!(oracle(&["--prefetch-min-score", "1"]), oracle(&[]));
    let (ok, out, err) = sim(&granite_lru(
        "run",
        &["--predictor", "next-layer", "--prefetch-min-score", "0.5"],
    ));
    assert!(ok, "{err}");
    assert!(out.contains("cut ") && out.contains("0.5"), "{out}");
    assert!(out.contains("by cut") && out.contains(" 1: "), "{out}");
    for (flags, says) in [
        (vec!["--prefetch-min-score", "0.5"], "add a --predictor"),
        (
            vec!["--predictor", "static", "--prefetch-min-score", "-0.5"],
            "above 0 and at most 1",
        ),
        (
            vec!["--predictor", "static", "--prefetch-min-score", "0"],
            "above 0 and at most 1",
        ),
        (
            vec!["--predictor", "static", "--prefetch-min-score", "1.5"],
            "above 0 and at most 1",
        ),
        (
            vec!["--predictor", "static", "--prefetch-min-score", "most"],
            "nor `auto`",
        ),
        (
            vec!["--predictor", "static", "--prefetch-min-score", "auto"],
            "add --profile-trace",
        ),
    ] {
        let (ok, _, err) = sim(&granite_lru("run", &flags));
        assert!(!ok && err.contains(says), "{flags:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `--prefetch-min-score auto` chooses, among no cut and 0.1 .. 1, the cut whose run of the
/// profile trace (as the evaluated trace, learning from itself) is fastest: checked
/// against those eleven runs made separately; the run then equals one at that cut, and a
/// note says the choice. A sweep refuses `auto`.
#[test]
fn an_auto_cut_is_the_fastest_on_the_profile_trace() {
    let tps = |trace: &str, cut: Option<&str>| {
        let mut flags = vec!["--predictor", "next-layer", "--window", "2"];
        flags.extend(["--profile-trace", GRANITE_PROSE, "--json"]);
        if let Some(c) = cut {
            flags.extend(["--prefetch-min-score", c]);
        }
        let mut args = granite_lru("run", &flags);
        args[2] = trace;
        let (ok, out, err) = sim(&args);
        assert!(ok, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let cuts = [
        "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1",
    ];
    let speed = |v: &serde_json::Value| v["timing"]["tokens_per_s"].as_f64().unwrap();
    let mut best = (None, speed(&tps(GRANITE_PROSE, None)));
    for c in cuts {
        let t = speed(&tps(GRANITE_PROSE, Some(c)));
        if t > best.1 {
            best = (Some(c), t);
        }
    }
    let auto = tps(GRANITE_CODE, Some("auto"));
    let chosen = best.0.expect("a cut beats none on this profile");
    let mut p = auto["prefetch"].clone();
    let why = p.as_object_mut().unwrap().remove("min_score_auto").unwrap();
    let why = why.as_str().unwrap();
    assert!(
        why.starts_with(&format!("--prefetch-min-score auto chose {chosen}:")),
        "{why}"
    );
    let fixed = tps(GRANITE_CODE, Some(chosen));
    assert_eq!(auto["timing"], fixed["timing"]);
    assert_eq!(p, fixed["prefetch"]);
    let mut flags = vec!["--predictor", "next-layer", "--prefetch-min-score", "auto"];
    flags.extend(["--profile-trace", GRANITE_PROSE]);
    let (ok, _, err) = sim(&granite_lru("sweep", &flags));
    assert!(!ok && err.contains("one `sim run`"), "{err}");
}

#[test]
fn predictor_and_window_lists_are_a_sweep_axis_and_one_value_in_run() {
    let (ok, _, err) = sim(&["run", "--hw", "h200-linux", "--predictor", "static,eam"]);
    assert!(!ok);
    assert!(err.contains("`sim sweep` or `sim compare`"), "{err}");
    let axis = ["--predictor", "none,oracle,static", "--window", "1,2"];
    let mut extra = vec!["--profile-trace", GRANITE_PROSE, "--format", "json"];
    extra.extend(axis);
    let (ok, out, err) = sim(&granite_lru("sweep", &extra));
    assert!(ok, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let point = |r: &serde_json::Value| {
        let p = &r["prefetch"];
        (
            p["predictor"].as_str().map(String::from),
            p["window"].as_u64(),
        )
    };
    // Belady's bound rows come first, then LRU's; each runs the whole prefetch axis
    let lru = rows.iter().filter(|r| r["retention"]["evict"] == "lru");
    let got: Vec<_> = lru.map(point).collect();
    let s = |p: &str, w: u64| (Some(p.to_string()), Some(w));
    // none once (its window changes nothing), windows innermost
    assert_eq!(
        got,
        [
            (None, None),
            s("oracle", 1),
            s("oracle", 2),
            s("static", 1),
            s("static", 2)
        ]
    );
    assert_eq!(rows.len(), 10);
    assert_eq!(rows[8]["prefetch"]["learns_from"], "profile");
    let axis = ["--predictor", "none,eam", "--window", "1,2"];
    let (ok, table, err) = sim(&granite_lru("sweep", &axis));
    assert!(ok, "{err}");
    // the retention table once, then one prefetch row per run with a predictor
    assert_eq!(table.matches("\ne1         lru").count(), 1, "{table}");
    assert_eq!(table.matches(" eam ").count(), 4, "{table}"); // Belady and LRU, w 1 and 2
    assert!(table.contains(" online "), "{table}");
    // the cancelled column: its count per run under demand first, absent under legacy
    let header = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("mechanism / retention") && l.contains("prec%"))
            .unwrap()
            .to_string()
    };
    assert!(header(&table).contains(" wasted  cancel "), "{table}");
    let json = |extra: &[&str]| {
        let mut flags = axis.to_vec();
        flags.extend_from_slice(extra);
        flags.extend(["--format", "json"]);
        let (ok, out, err) = sim(&granite_lru("sweep", &flags));
        assert!(ok, "{err}");
        serde_json::from_str::<Vec<serde_json::Value>>(&out).unwrap()
    };
    let cancelled: Vec<u64> = json(&[])
        .iter()
        .filter_map(|r| r["prefetch"]["cancelled"].as_u64())
        .collect();
    let row = table.lines().find(|l| l.contains(" eam ")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    let at = cells.iter().position(|&c| c == "eam").unwrap();
    // predictor, w, learns, issued, used, late, wasted, cancel
    assert_eq!(cells[at + 7], cancelled[0].to_string(), "{row}");
    let mut legacy = axis.to_vec();
    legacy.extend(["--prefetch-issue", "legacy"]);
    let (ok, table, err) = sim(&granite_lru("sweep", &legacy));
    assert!(ok, "{err}");
    assert!(!header(&table).contains("cancel"), "{table}");
}

#[test]
fn compare_runs_the_prefetch_axis_and_cross_traces_only_the_learning_predictors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let (ok, _, err) = sim(&[
        "compare",
        "--trace",
        GRANITE_CODE,
        "--trace",
        GRANITE_PROSE,
        "--policies",
        "e1",
        "--hw",
        "h200-linux",
        "--predictor",
        "oracle,static",
        "--window",
        "1",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let res: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = res["runs"].as_array().unwrap();
    let coords: Vec<(String, String, String)> = runs
        .iter()
        .map(|r| {
            let g = &r["grid"];
            let s = |k: &str| g[k].as_str().unwrap().to_string();
            (s("trace"), s("profile_trace"), s("predictor"))
        })
        .collect();
    let c = |t: &str, p: &str, k: &str| (t.to_string(), p.to_string(), k.to_string());
    assert_eq!(
        coords,
        [
            c("code", "code", "oracle"),
            c("code", "code", "static"),
            c("prose", "prose", "oracle"),
            c("prose", "prose", "static"),
            c("code", "prose", "static"),
            c("prose", "code", "static"),
        ]
    );
    assert_eq!(runs[4]["prefetch"]["learns_from"], "profile");
    assert_eq!(runs[1]["prefetch"]["learns_from"], "online");
    assert_eq!(res["grid"]["prefetch"][1]["predictor"], "static");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Prefetch predictors"));
    assert!(
        md.contains("### `code`, e1, learning from profile `prose`"),
        "{md}"
    );
    assert!(md.contains("| e1 + static w1 |"));
    // the verdict of code learning from prose: static's hidden stall (runs[4]) says whether
    // it pays off; the oracle's bound is code's own (runs[0])
    let hidden =
        |r: &serde_json::Value| r["prefetch"]["stall_hidden_ms_per_step"].as_f64().unwrap();
    let (learned, bound) = (hidden(&runs[4]), hidden(&runs[0]));
    let head = if learned > 0.0 {
        "Pays off here: `static` at window 1; the best, `static` at window 1, hides"
    } else {
        "No learned predictor pays off here: the best, `static` at window 1, hides"
    };
    assert!(
        md.contains(&format!("{head} {learned:.3} ms of the ")),
        "{md}"
    );
    let oracle = format!("The oracle (the bound) would hide {bound:.3} ms per step at window 1");
    assert!(md.contains(&oracle), "{md}");
}

/// A budget below one token's units misses every access, so `prev-token` prefetches the
/// step before's units at every group and most are wasted, while the driver is never idle.
/// Their queued decommits then run before a page-in that would map past 90% of usable VRAM,
/// instead of piling up until the run needs the profile's missing 90-100% band.
#[test]
fn wasted_prefetches_are_unmapped_before_the_oversubscription_curve() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("ds.bin");
    let (ok, _, err) = sim(&[
        "trace",
        "gen",
        "--preset",
        "deepseek-v3",
        "--tokens",
        "100",
        "--seed",
        "7",
        "--skew",
        "1.0",
        "--locality",
        "0.3",
        "--out",
        trace.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let (ok, out, err) = sim(&[
        "run",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "e1",
        "--evict",
        "lru",
        "--budget",
        "3%",
        "--hw",
        "h200-linux",
        "--dtype",
        "int4",
        "--predictor",
        "prev-token",
        "--json",
    ]);
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let detail = &report["timing_detail"];
    assert_eq!(detail["oversubscribed_page_ins"], 0, "{out}");
    assert!(detail["prefetch_wasted"].as_u64().unwrap() > 1000, "{out}");
    // the mapped total stays near 90% of usable VRAM (KV growth between page-ins aside)
    let (peak, usable) = (
        report["timing"]["peak_mapped_mib"].as_f64().unwrap(),
        detail["usable_mib"].as_f64().unwrap(),
    );
    assert!(peak < 0.91 * usable, "peak mapped {peak} MiB of {usable}");
}

/// `sim run --json` of `trace` (DeepSeek-V3, int4, e1, LRU) at `budget` on `hw`, with `extra`:
/// (success, parsed stdout or Null, stderr).
fn ds3_run(
    trace: &str,
    hw: &str,
    budget: &str,
    extra: &[&str],
) -> (bool, serde_json::Value, String) {
    let mut args = vec![
        "run", "--trace", trace, "--policy", "e1", "--dtype", "int4", "--evict", "lru", "--hw", hw,
        "--budget", budget, "--json",
    ];
    args.extend_from_slice(extra);
    let (ok, out, err) = sim(&args);
    (
        ok,
        serde_json::from_str(&out).unwrap_or(serde_json::Value::Null),
        err,
    )
}

#[test]
fn live_sets_past_the_measured_range_are_reported_and_priced_per_outside_range() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("ds3.bin");
    let t = trace.to_str().unwrap();
    let (ok, _, err) = sim(&[
        "trace",
        "gen",
        "--preset",
        "deepseek-v3",
        "--tokens",
        "40",
        "--seed",
        "7",
        "--skew",
        "1.0",
        "--locality",
        "0.3",
        "--out",
        t,
    ]);
    assert!(ok, "{err}");
    // the shipped profile without its domains: priced as before domains were recorded
    let (ok, json, err) = sim(&["profile", "show", "h200-linux", "--json"]);
    assert!(ok, "{err}");
    let mut p: serde_json::Value = serde_json::from_str(&json).unwrap();
    for c in p["constants"].as_object_mut().unwrap().values_mut() {
        c.as_object_mut().unwrap().remove("domain");
    }
    let bare = dir.path().join("bare.json");
    std::fs::write(&bare, p.to_string()).unwrap();
    let bare = bare.to_str().unwrap();

    // 10% of DeepSeek-V3's 14,848 experts = 1,484 units of 11 granules: about 16,000 live
    // granules, past the 0..6,144 the live-set slopes were fitted over
    let (ok, clamp, err) = ds3_run(t, "h200-linux", "10%", &[]);
    assert!(ok, "{err}");
    let (ok, extra, err) = ds3_run(t, "h200-linux", "10%", &["--outside-range", "extrapolate"]);
    assert!(ok, "{err}");
    let (ok, old, err) = ds3_run(t, bare, "10%", &[]);
    assert!(ok, "{err}");
    // extrapolating is the old price; a profile without domains flags nothing
    assert_eq!(extra["timing"], old["timing"]);
    assert!(old["timing_detail"].get("outside_range").is_none());
    let out = clamp["timing_detail"]["outside_range"].as_array().unwrap();
    let names: Vec<&str> = out
        .iter()
        .map(|o| o["constant"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["vmm_commit_busy_live_slope", "vmm_decommit_busy_live_slope"]
    );
    for o in out {
        let v = o["value"].as_f64().unwrap();
        assert_eq!(o["measured_max"].as_f64(), Some(6144.0));
        assert_eq!(o["measured_min"].as_f64(), Some(0.0));
        assert!(v > 6144.0 && v <= 1484.0 * 11.0 + 11.0, "{v}");
        assert!((o["distance"].as_f64().unwrap() - v / 6144.0).abs() < 1e-12);
        let share = o["share"].as_f64().unwrap();
        assert!(share > 0.0 && share <= 1.0, "{share}");
        assert_eq!(o["priced"], "clamped");
    }
    assert_eq!(
        extra["timing_detail"]["outside_range"][0]["priced"],
        "extrapolated"
    );
    // clamping the slope term at the edge prices every commit past it lower
    let tps = |r: &serde_json::Value| r["timing"]["tokens_per_s"].as_f64().unwrap();
    let vmm = |r: &serde_json::Value| r["timing"]["vmm_ms_per_step"].as_f64().unwrap();
    assert!(vmm(&clamp) < vmm(&extra) && tps(&clamp) > tps(&extra));
    // refuse: an error naming the constant and the flag, nothing on stdout
    let (ok, v, err) = ds3_run(t, "h200-linux", "10%", &["--outside-range", "refuse"]);
    assert!(!ok && v.is_null());
    assert!(
        err.contains("vmm_commit_busy_live_slope") && err.contains("--outside-range"),
        "{err}"
    );
    // the constants' spread says nothing past their range: the interval is unknown, naming them
    let (ok, v, err) = ds3_run(t, "h200-linux", "10%", &["--intervals", "2"]);
    assert!(ok, "{err}");
    let i = &v["interval90"];
    assert!(i.get("tokens_per_s").is_none(), "{i}");
    assert!(
        i["unknown"]
            .as_str()
            .unwrap()
            .contains("vmm_commit_busy_live_slope"),
        "{i}"
    );
    // the text prints one line
    let (ok, text, err) = sim(&[
        "run",
        "--trace",
        t,
        "--policy",
        "e1",
        "--dtype",
        "int4",
        "--evict",
        "lru",
        "--hw",
        "h200-linux",
        "--budget",
        "10%",
    ]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("outside the measured range"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains("measured 0..6,144") && lines[0].contains("clamped"),
        "{}",
        lines[0]
    );
    // inside the range (2% = 296 units, at most 3,267 live granules): nothing flagged, every
    // mode prices the same bytes
    let (_, a, _) = ds3_run(t, "h200-linux", "2%", &[]);
    let (_, b, _) = ds3_run(t, "h200-linux", "2%", &["--outside-range", "refuse"]);
    let (_, c, _) = ds3_run(t, bare, "2%", &[]);
    assert!(a["timing_detail"].get("outside_range").is_none());
    assert_eq!(a["timing"], b["timing"]);
    assert_eq!(a["timing"], c["timing"]);
    // an unknown mode is refused by the parser with the choices
    let (ok, _, err) = sim(&["run", "--hw", "h200-linux", "--outside-range", "wild"]);
    assert!(!ok && err.contains("clamp"), "{err}");
}

#[test]
fn reprice_intervals_hold_each_measured_p50_against_its_band() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let stored = root.join("validate/data/h200-linux-p9-validation/gs.json");
    std::fs::copy(&stored, dir.path().join("gs.json")).unwrap();
    let d = dir.path().to_str().unwrap();
    let run = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_sim"))
            .args(["validate", "--reprice", d, "--intervals", "3"])
            .args(extra)
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let json = run(&["--json"]);
    assert_eq!(
        json,
        run(&["--json"]),
        "seeded: the same intervals every time"
    );
    let r: serde_json::Value = serde_json::from_str(&json).unwrap();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stored).unwrap()).unwrap();
    let rows = r["reprice"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let mut inside = 0;
    for (row, s) in rows
        .iter()
        .zip(file["validation"]["rows"].as_array().unwrap())
    {
        let i = &row["interval"];
        let (lo, hi) = (
            i["p50_ms"][0].as_f64().unwrap(),
            i["p50_ms"][1].as_f64().unwrap(),
        );
        let m = i["measured_p50_ms"].as_f64().unwrap();
        assert_eq!(m, s["measured"]["p50_ms"].as_f64().unwrap());
        assert!(lo <= hi && lo > 0.0, "{lo} {hi}");
        assert!(i["p99_ms"][0].as_f64().unwrap() <= i["p99_ms"][1].as_f64().unwrap());
        assert_eq!(i["draws"], 3);
        assert_eq!(i["inside"].as_bool(), Some(lo <= m && m <= hi));
        inside += usize::from(lo <= m && m <= hi);
    }
    let text = run(&[]);
    let line = format!("20 draws): {inside} of 4 rows").replace("20", "3");
    assert!(text.contains(&line), "{text}");
    // --intervals needs --reprice
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(["validate", "--policy", "e1", "--intervals", "3"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--reprice"));
}

/// `sim run --intervals N`: the 90% band of N runs under profiles drawn from the constants'
/// spread. Checked apart: the same draws made here (the library's `drawn_profile`, seed 0), each
/// written as a profile file and run through the binary with `--hw FILE`; with 3 draws the
/// nearest-rank 5th and 95th percentiles (ranks ceil(0.15) = 1 and ceil(2.85) = 3) are the
/// smallest and largest of the three.
#[test]
fn run_intervals_are_the_band_of_runs_under_drawn_profiles() {
    use rand::SeedableRng;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let trace = root.join("sim/tests/fixtures/golden/inputs/granite-fit-4tok.bin");
    let trace = trace.to_str().unwrap();
    let run = |hw: &str, extra: &[&str]| {
        let mut args = vec![
            "run", "--trace", trace, "--policy", "e1", "--evict", "lru", "--budget", "50%", "--hw",
            hw, "--json",
        ];
        args.extend_from_slice(extra);
        let (ok, out, err) = sim(&args);
        assert!(ok, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let v = run("h200-linux", &["--intervals", "3"]);
    let i = &v["interval90"];
    assert_eq!(i["draws"], 3);
    assert!(i.get("unknown").is_none());
    let dir = tempfile::tempdir().unwrap();
    let base = profile::load("h200-linux").unwrap();
    let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
    let mut got: Vec<[f64; 3]> = Vec::new();
    for k in 0..3 {
        let p = sim::run_interval::drawn_profile(&base, &mut rng);
        assert_eq!(p.constants["vram_usable"], base.constants["vram_usable"]);
        let f = dir.path().join(format!("d{k}.json"));
        std::fs::write(&f, p.to_json()).unwrap();
        let t = &run(f.to_str().unwrap(), &[])["timing"];
        let x = |k: &str| t[k].as_f64().unwrap();
        got.push([x("tokens_per_s"), x("step_ms_p50"), x("step_ms_p99")]);
    }
    for (j, key) in ["tokens_per_s", "step_ms_p50", "step_ms_p99"]
        .iter()
        .enumerate()
    {
        let xs: Vec<f64> = got.iter().map(|g| g[j]).collect();
        let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let band = &i[*key];
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(
            close(band[0].as_f64().unwrap(), lo) && close(band[1].as_f64().unwrap(), hi),
            "{key}: {band} against {xs:?}"
        );
        assert!(lo < hi, "{key}: the draws moved nothing: {xs:?}");
    }
    // the text prints one line; without --hw the flag is refused, naming it
    let (ok, text, err) = sim(&[
        "run",
        "--trace",
        trace,
        "--policy",
        "e1",
        "--hw",
        "h200-linux",
        "--intervals",
        "2",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        text.matches("interval    90% over 2 drawn profiles")
            .count(),
        1,
        "{text}"
    );
    let (ok, _, err) = sim(&["run", "--trace", trace, "--intervals", "2"]);
    assert!(!ok && err.contains("--hw"), "{err}");
}

/// A timed run says where it lies against docs/VALIDATION.md's regions (on stderr; stdout
/// unchanged): the stored granite replays' own settings on h200-linux are inside the granite
/// region (`e1 | lru, budget 50% | 1 | 736–3069 | 21 | +4.1%`), a GPU with no stored replay is
/// outside, and an untimed run says nothing.
#[test]
fn a_timed_run_says_where_the_model_was_checked() {
    let granite = |hw: Option<&str>| {
        let mut a = vec![
            "run",
            "--trace",
            "traces/data/granite/prose.bin",
            "--policy",
            "e1",
            "--evict",
            "lru",
            "--budget",
            "50%",
        ];
        if let Some(hw) = hw {
            a.extend(["--hw", hw]);
        }
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let o = Command::new(env!("CARGO_BIN_EXE_sim"))
            .current_dir(root)
            .args(&a)
            .output()
            .expect("the sim binary runs");
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let inside = granite(Some("h200-linux"));
    assert!(
        inside.contains(
            "validated region: inside (nearest: h200-linux e1 lru, budget 50%, batch 1, live \
             granules 736–3069, granite-3.0-1b-a400m-instruct: median error +4.1% over 21 replays"
        ),
        "{inside}"
    );
    let outside = granite(Some("rtx4060-laptop-wddm"));
    assert!(
        outside.contains("validated region: outside (nearest: "),
        "{outside}"
    );
    assert!(!granite(None).contains("validated region"));
}
