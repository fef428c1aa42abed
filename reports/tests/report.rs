//! Reports rendered from a tiny hand-made comparison (2 MoE layers x 4 experts, top-2, 4 tokens)
//! whose run objects follow the `sim run --json` keys of the run, `cache` and `timing` blocks.

use reports::{Results, RunCoords, RunEntry, Shard, TraceInfo, FORMAT};
use serde_json::{json, Map, Value};
use std::path::Path;
use traces::{ModelSpec, Provenance, SequenceInfo};

fn trace(name: &str) -> TraceInfo {
    TraceInfo {
        name: name.into(),
        file: format!("{name}.bin"),
        model: ModelSpec::uniform("tiny", 2, 4, 2),
        provenance: Provenance {
            source: "hand-made".into(),
            tool: "test".into(),
            ..Default::default()
        },
        sequences: vec![SequenceInfo {
            name: "s".into(),
            prefill_tokens: 0,
            decode_tokens: 4,
        }],
        phase: "decode".into(),
        tokens: 4,
        accesses: 16,
        // 4 tokens x top-2 = 8 selections per layer
        expert_counts: vec![vec![4, 3, 1, 0], vec![2, 2, 2, 2]],
        stats: Some(json!({"tokens": 4, "accesses": 16, "distinct_keys": 7})),
    }
}

/// Expert size 3 MiB: useful_mib_total = 8 keys x 3 MiB = 24.
fn streaming(resident: f64, transfer: f64) -> Value {
    json!({
        "resident_mib_per_layer_step": resident,
        "transfer_mib_per_layer_step": transfer,
        "resident_experts_per_layer_step": transfer / 3.0,
        "hot_units_per_layer_step": 2.0,
        "waste_factor": 1.3333333333333333,
        "selectivity": transfer / 6.0,
        "always_on_units": 1,
        "units_per_layer": 4,
        "committed_mib_total": 32.0,
        "useful_mib_total": 24.0
    })
}

fn cache(bytes_per_token: f64, page_ins: u64) -> Value {
    json!({
        "tokens": 4, "accesses": 16, "page_ins": page_ins,
        "page_ins_per_token": page_ins as f64 / 4.0, "miss_rate": page_ins as f64 / 16.0,
        "bytes_per_token": bytes_per_token, "evictions": page_ins.saturating_sub(2),
        "budget_units": 2, "peak_resident_mib": 6.0
    })
}

fn timing(p50: f64, tps: f64) -> Value {
    json!({
        "step_ms_p50": p50, "step_ms_p90": p50 * 1.5, "step_ms_p99": p50 * 2.0,
        "step_ms_max": p50 * 3.0, "step_ms_mean": p50 * 1.1, "tokens_per_s": tps,
        "compute_ms_per_step": 1.0, "h2d_ms_per_step": p50 - 1.5, "vmm_ms_per_step": 0.5,
        "fault_ms_per_step": 0.0, "stall_ms_per_step": 0.0, "peak_mapped_mib": 12.0,
        "map_calls": 10, "unmap_calls": 8, "prefetch_issued": 0, "prefetch_used": 0
    })
}

fn entry(
    run: usize,
    t: &str,
    mech: &str,
    evict: Option<&str>,
    budget: Option<&str>,
    blocks: Vec<(&str, Value)>,
) -> RunEntry {
    let mut result = Map::new();
    result.insert(
        "inputs".into(),
        json!({
            "policy": mech, "trace": t, "profile_trace": t, "phase": "decode", "model": "tiny",
            "moe_layers": 2, "tokens": 4, "dtype": null, "expert_bytes": 3 * 1048576,
            "expert_mib": 3.0, "granule_bytes": 2 * 1048576
        }),
    );
    for (k, v) in blocks {
        result.insert(k.into(), v);
    }
    let result = serde_json::from_value(Value::Object(result)).expect("a run report");
    RunEntry {
        run,
        grid: RunCoords {
            trace: t.into(),
            profile_trace: t.into(),
            mechanism: mech.into(),
            evict: evict.map(Into::into),
            budget: budget.map(Into::into),
            split: budget.map(|_| "global".into()),
            batch: None,
            predictor: None,
            window: None,
            verify: None,
            acceptance: None,
            prefill_chunk: None,
            cpu_experts: None,
            dtype: None,
        },
        does_not_fit: None,
        result,
    }
}

const MIB: f64 = 1048576.0;

fn fixture(with_timing: bool) -> Results {
    let mut runs = vec![
        entry(
            0,
            "a",
            "e1",
            None,
            None,
            vec![("streaming", streaming(6.0, 6.0))],
        ),
        entry(
            1,
            "a",
            "e2:index",
            None,
            None,
            vec![("streaming", streaming(9.0, 9.0))],
        ),
        entry(
            2,
            "a",
            "e2:hot",
            None,
            None,
            vec![("streaming", streaming(7.5, 7.5))],
        ),
        entry(
            3,
            "a",
            "e4:hot",
            None,
            None,
            vec![("streaming", streaming(12.0, 12.0))],
        ),
        entry(
            4,
            "a",
            "e4:index",
            None,
            None,
            vec![("streaming", streaming(12.0, 12.0))],
        ),
    ];
    let mut n = runs.len();
    for (budget, scale) in [("25%", 2.0), ("50%", 1.0)] {
        for (p, bytes) in [("lru", 4.0), ("belady", 2.0), ("static-pin", 3.0)] {
            let mut blocks = vec![("cache", cache(bytes * scale * MIB, 2 + n as u64))];
            if with_timing {
                blocks.push(("timing", timing(2.0 + bytes, 1000.0 / (2.0 + bytes))));
            }
            runs.push(entry(n, "a", "e1", Some(p), Some(budget), blocks));
            n += 1;
        }
    }
    // cross-trace: e2:hot packed on b, evaluated on a
    let mut cross = entry(
        n,
        "a",
        "e2:hot",
        None,
        None,
        vec![("streaming", streaming(9.0, 9.0))],
    );
    cross.grid.profile_trace = "b".into();
    runs.push(cross);
    n += 1;
    Results {
        format: FORMAT.into(),
        grid: json!({"mechanisms": ["e1", "e2:index", "e2:hot", "e4:hot", "e4:index"], "admission_cap": null}),
        traces: vec![trace("a"), trace("b")],
        profile: with_timing.then(|| json!({"name": "rtx4060-laptop-wddm"})),
        total_runs: n,
        shard: None,
        runs,
        curves: vec![],
    }
}

fn read(dir: &Path, f: &str) -> String {
    std::fs::read_to_string(dir.join(f)).unwrap()
}

#[test]
fn csv_and_json_agree() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    reports::write_report(&fixture(true), &out).unwrap();
    let json: Value = serde_json::from_str(&read(&out, "results.json")).unwrap();
    let runs = json["runs"].as_array().unwrap();
    let mut rdr = csv::Reader::from_path(out.join("results.csv")).unwrap();
    let header: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
    let rows: Vec<csv::StringRecord> = rdr.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), runs.len());
    // Independent count of the scalar leaves: every one must be a column.
    fn leaves(prefix: &str, v: &Value, out: &mut std::collections::BTreeSet<String>) {
        if let Value::Object(m) = v {
            for (k, c) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&p, c, out);
            }
        } else {
            out.insert(prefix.to_string());
        }
    }
    let mut all = std::collections::BTreeSet::new();
    for r in runs {
        leaves("", r, &mut all);
    }
    assert_eq!(all, header.iter().cloned().collect());
    assert!(header.contains(&"streaming.resident_mib_per_layer_step".to_string()));
    assert!(header.contains(&"cache.bytes_per_token".to_string()));
    assert!(header.contains(&"timing.tokens_per_s".to_string()));
    assert!(header.contains(&"grid.mechanism".to_string()));
    for (run, row) in runs.iter().zip(&rows) {
        for (h, cell) in header.iter().zip(row.iter()) {
            let v = h.split('.').try_fold(run, |v, k| v.get(k));
            match v {
                None | Some(Value::Null) => assert_eq!(cell, "", "{h}"),
                Some(Value::Number(n)) => {
                    assert_eq!(cell.parse::<f64>().unwrap(), n.as_f64().unwrap(), "{h}")
                }
                Some(Value::String(s)) => assert_eq!(cell, s, "{h}"),
                Some(other) => assert_eq!(cell, other.to_string(), "{h}"),
            }
        }
    }
}

#[test]
fn every_plot_is_valid_svg_with_expected_series() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    reports::write_report(&fixture(true), &out).unwrap();
    let mut files: Vec<String> = std::fs::read_dir(out.join("plots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "bytes_per_token_a_e1.svg",
            "concentration.svg",
            "skew_a.svg",
            "skew_b.svg",
            "step_cdf_a_25_.svg",
            "step_cdf_a_50_.svg",
            "time_split_a_25_.svg",
            "time_split_a_50_.svg",
            "trade_curve_a.svg",
        ]
    );
    let texts = |f: &str| -> Vec<String> {
        let s = read(&out.join("plots"), f);
        let doc = roxmltree::Document::parse(&s).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg", "{f}");
        doc.descendants()
            .filter(|n| n.is_text())
            .map(|n| n.text().unwrap().trim().to_string())
            .collect()
    };
    for f in &files {
        texts(f);
    }
    let has = |f: &str, series: &[&str]| {
        let t = texts(f);
        for s in series {
            assert!(t.iter().any(|x| x == s), "{f} lacks series {s:?}: {t:?}");
        }
    };
    has(
        "trade_curve_a.svg",
        &[
            "resident, index",
            "transfer, index",
            "resident, hot",
            "transfer, hot",
            "ideal bound (top-k x expert)",
        ],
    );
    has(
        "bytes_per_token_a_e1.svg",
        &["lru", "static-pin", "belady (lower bound)"],
    );
    has(
        "time_split_a_25_.svg",
        &[
            "compute",
            "stall (waiting for paging)",
            "H2D copy busy",
            "VMM calls busy",
            "faults busy",
        ],
    );
    has(
        "step_cdf_a_25_.svg",
        &["e1 / lru", "e1 / belady (bound)", "e1 / static-pin"],
    );
    has("concentration.svg", &["a", "b"]);
}

#[test]
fn html_has_no_external_references() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    reports::write_report(&fixture(true), &out).unwrap();
    let html = read(&out, "report.html").to_lowercase();
    assert!(html.contains("<svg"), "plots are inlined");
    assert!(!html.contains("<link"));
    assert!(!html.contains("<script"));
    assert!(!html.contains("<img"));
    assert!(!html.contains("url("));
    assert!(!html.contains("@import"));
    for attr in ["src=", "href=", "xlink:href="] {
        for (i, _) in html.match_indices(attr) {
            let v = html[i + attr.len()..].trim_start_matches(['"', '\'']);
            assert!(
                !v.starts_with("http:") && !v.starts_with("https:") && !v.starts_with("//"),
                "external reference at {}",
                &html[i..i + 60]
            );
        }
    }
}

#[test]
fn report_marks_best_cells_and_distance_from_the_bound() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    reports::write_report(&fixture(true), &out).unwrap();
    let md = read(&out, "report.md");
    // expert MiB = 24 MiB / 8 keys = 3, ideal = top-2 x 3 = 6 MiB; e1 holds 6 (1x, best),
    // e2:index 9 (1.5x)
    assert!(md.contains("| e1 | **6** |"), "{md}");
    assert!(md.contains("| e2:index | 9 |"));
    assert!(md.contains("| 1.50x |"));
    assert!(md.contains("least memory held is `e1` at 6 MiB per layer step, 1x the ideal of 6 MiB"));
    // budget 25%: lru 8 MiB/token, belady 4, static-pin 6 -> 2x and 1.5x the bound; static-pin best
    assert!(md.contains("| lru | 8 (2x) | 4 (2x) |"), "{md}");
    assert!(md.contains("| static-pin | **6 (1.50x)** | **3 (1.50x)** |"));
    assert!(md.contains("| belady (bound) | 4 (1x) | 2 (1x) |"));
    assert!(md.contains("fewest bytes moved by `e1 / static-pin @ 25%` with 6 MiB per token; Belady/MIN needs 4 MiB, so it is 1.50x the bound"));
    // timing: step p50 = 2 + bytes: lru 6, belady 4 -> 1.50x
    assert!(md.contains("on `rtx4060-laptop-wddm`"));
    // cross-trace: 9 vs 7.5 on itself = +20.0%
    assert!(
        md.contains("| e2:hot | `b` | `a` | resident MiB/layer step | 9 | 7.50 | +20.0% |"),
        "{md}"
    );
    // at a glance: e1 holds the ideal; its best policy at each budget is static-pin, 1.5x
    // Belady; its best tokens/s is static-pin (1000 / (2 + 3)), the last of equal maxima
    assert!(
        md.contains("| `e1` | **6 (1x)** | static-pin 6 (1.50x) | static-pin 3 (1.50x) | 200 (static-pin @ 50%) |"),
        "{md}"
    );
    assert!(md.contains("| `e2:index` | 9 (1.50x) | – | – | – |"));
    assert!(md.contains(
        "- largest packing loss: `e2:hot` chosen on `b` and evaluated on `a`, +20.0% memory held"
    ));
    let html = read(&out, "report.html");
    assert!(html.contains("<td class=\"best\">6</td>"));
}

#[test]
fn degrades_gracefully_without_cache_and_timing() {
    let mut r = fixture(false);
    r.runs
        .retain(|e| e.grid.evict.is_none() && !e.grid.is_cross());
    r.total_runs = r.runs.len();
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    reports::write_report(&r, &out).unwrap();
    let md = read(&out, "report.md");
    assert!(md.contains("No run in these results has a `cache` block"));
    assert!(md.contains("No run in these results has a `timing` block"));
    assert!(md.contains("Not in these results: retention under a budget"));
    assert!(!md.contains("Cross-trace stability"));
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for sub in ["", "plots"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                let name = format!("{sub}/{}", e.file_name().to_string_lossy());
                v.push((name, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    v.sort();
    v
}

#[test]
fn merged_shards_equal_the_unsharded_run_byte_for_byte() {
    let full = fixture(true);
    let d = tempfile::tempdir().unwrap();
    let whole = d.path().join("whole");
    reports::write_report(&full, &whole).unwrap();
    for n in [1, 2, 3, 5] {
        let mut parts = Vec::new();
        // write shards in reverse order to show the order of the arguments does not matter
        for i in (0..n).rev() {
            let s = Shard { index: i, count: n };
            let mut part = full.clone();
            part.shard = Some(s);
            part.runs.retain(|r| s.holds(r.run));
            let dir = d.path().join(format!("s{i}of{n}"));
            reports::write_report(&part, &dir).unwrap();
            parts.push(Results::load(&dir.join("results.json")).unwrap());
        }
        let merged = Results::merge(parts).unwrap();
        let out = d.path().join(format!("merged{n}"));
        reports::write_report(&merged, &out).unwrap();
        assert_eq!(files(&whole), files(&out), "n = {n}");
    }
}

#[test]
fn regenerating_from_results_json_reproduces_the_report() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    reports::write_report(&fixture(true), &a).unwrap();
    let again = Results::load(&a.join("results.json")).unwrap();
    // the typed runs read back write the same bytes
    assert_eq!(again.to_json(), read(&a, "results.json"));
    // in place: replaces the previous report directory
    reports::write_report(&again, &a).unwrap();
    let b = d.path().join("b");
    reports::write_report(&again, &b).unwrap();
    assert_eq!(files(&a), files(&b));
    // no temporary directories left behind
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn refuses_to_replace_a_directory_that_is_not_a_report() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("precious.txt"), "data").unwrap();
    let e = reports::write_report(&fixture(false), d.path()).unwrap_err();
    assert!(e.to_string().contains("not a report directory"), "{e}");
    assert_eq!(
        std::fs::read_to_string(d.path().join("precious.txt")).unwrap(),
        "data"
    );
}

#[test]
fn merge_and_shard_errors_name_the_problem() {
    let full = fixture(false);
    let shard = |i, n| {
        let s = Shard { index: i, count: n };
        let mut p = full.clone();
        p.shard = Some(s);
        p.runs.retain(|r| s.holds(r.run));
        p
    };
    let e = Results::merge(vec![shard(0, 3), shard(2, 3)]).unwrap_err();
    assert!(e.to_string().contains("shard 1/3 is missing"), "{e}");
    let e = Results::merge(vec![shard(0, 2), shard(0, 2), shard(1, 2)]).unwrap_err();
    assert!(e.to_string().contains("given twice"), "{e}");
    let mut other = shard(1, 2);
    other.grid = json!({"mechanisms": ["e8"]});
    let e = Results::merge(vec![shard(0, 2), other]).unwrap_err();
    assert!(e.to_string().contains("different comparisons"), "{e}");
    assert!(Results::merge(vec![full.clone()]).is_err());

    assert_eq!(Shard::parse("1/4").unwrap(), Shard { index: 1, count: 4 });
    for bad in ["4/4", "1/0", "x/2", "3", "-1/2"] {
        assert!(Shard::parse(bad).unwrap_err().contains("--shard"), "{bad}");
    }
    // a shard whose runs do not belong to it is rejected when read
    let mut wrong = shard(0, 2);
    wrong.shard = Some(Shard { index: 1, count: 2 });
    let e = Results::from_json(&wrong.to_json(), "x/results.json").unwrap_err();
    assert!(
        e.to_string().contains("does not belong to shard 1/2"),
        "{e}"
    );
    let e = Results::from_json("{\"format\": \"other\"}", "y/results.json").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("y/results.json: not a results.json"),
        "{e}"
    );
}

/// The report directory is shared data: 0755, not the temporary directory's owner-only 0700,
/// on first write and when a previous report is replaced.
#[cfg(unix)]
#[test]
fn report_directory_is_mode_0755() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    for _ in 0..2 {
        reports::write_report(&fixture(true), &out).unwrap();
        let mode = std::fs::metadata(&out).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
    }
}

/// A results.json that cannot be read names the file and the OS error once each (the error's
/// source is not repeated in its own message).
#[test]
fn unreadable_results_say_the_cause_once() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("results.json");
    let e = anyhow::Error::from(reports::Results::load(&path).unwrap_err());
    let text = format!("{e:#}");
    assert_eq!(text.matches("(os error").count(), 1, "{text}");
    assert_eq!(text.matches(path.to_str().unwrap()).count(), 1, "{text}");
}

/// A results.json whose shard is not a slice of the grid, or lacks runs of its slice, is refused
/// on load; merging shards whose count is huge reports the missing slice instead of allocating
/// a flag per slice.
#[test]
fn damaged_shard_marks_are_errors() {
    use reports::results::{Results, Shard};
    let text = |total: usize, shard: &str| {
        format!(
            r#"{{"format":"{}","grid":{{}},"traces":[],"profile":"p","total_runs":{total},"shard":{shard},"runs":[]}}"#,
            reports::results::FORMAT
        )
    };
    for (shard, want) in [
        (r#"{"index":0,"count":0}"#, "shard 0/0 is not a slice"),
        (r#"{"index":5,"count":2}"#, "shard 5/2 is not a slice"),
        // runs 0 and 1 belong to slice 0/1 of a 2-run grid; none is present
        (
            r#"{"index":0,"count":1}"#,
            "0 runs present, shard 0/1 of the 2-run grid has 2",
        ),
    ] {
        let e = Results::from_json(&text(2, shard), "r.json").unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
    // slice 0 of 2^64 - 1 over an empty grid holds no run, so it loads; merging it alone
    // names the first missing slice
    let part = Results::from_json(
        &text(0, r#"{"index":0,"count":18446744073709551615}"#),
        "r.json",
    )
    .unwrap();
    let e = Results::merge(vec![part]).unwrap_err();
    assert!(
        e.to_string()
            .contains("shard 1/18446744073709551615 is missing"),
        "{e}"
    );
    assert!(Shard::parse("0/0").is_err());
}

/// Values near f64::MAX make an axis span infinite, where plotters' tick search never ends: the
/// chart is refused with an error naming it instead (values of 1e300 still draw).
#[test]
fn charts_refuse_axes_beyond_drawing() {
    use reports::plots::{line_chart, stacked_bars, LineChart, Scale, Series};
    let spec = LineChart {
        title: "t",
        x_label: "x",
        y_label: "y",
        x_scale: Scale::Linear,
        y_from_zero: true,
    };
    let line =
        |lo: f64, hi: f64| line_chart(&spec, &[Series::new("s", vec![(1.0, lo), (2.0, hi)])]);
    let e = line(-1.7e308, 1.7e308).unwrap_err().to_string();
    assert!(e.contains("chart \"t\": its y axis would span"), "{e}");
    assert!(line(-1e300, 1e300).is_ok());
    let e = stacked_bars(
        "b",
        "ms",
        &["c".into()],
        &[
            ("a".into(), 0, vec![1.7e308]),
            ("b".into(), 0, vec![1.7e308]),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("chart \"b\": its value axis would span"), "{e}");
}

/// The report opens with the answer: the fastest online run with its budget in bytes, units
/// and experts. The fixture's e1 bank is 8 units committing 32 MiB (4 MiB each) and holding
/// 8 experts of 3 MiB, so the resolved 2 units are 8 MiB and 2 experts. Belady has the lowest
/// step p50 of the timing table yet is never highlighted there.
#[test]
fn the_report_opens_with_the_answer_and_never_crowns_the_bound() {
    let mut res = fixture(true);
    for r in res.runs.iter_mut().filter(|r| r.grid.evict.is_some()) {
        let retention = json!({
            "evict": r.grid.evict, "budget": r.grid.budget, "split": "global",
            "semantics": "group", "batch": 1, "queue": null, "schedule": "fifo",
            "dram": null, "seed": 0
        });
        r.result.retention = Some(serde_json::from_value(retention).unwrap());
        r.result.streaming = Some(serde_json::from_value(streaming(6.0, 6.0)).unwrap());
    }
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    reports::write_report(&res, &out).unwrap();
    let md = read(&out, "report.md");
    let answer = md.lines().nth(2).unwrap();
    // static-pin's 1000 / (2 + 3) = 200 tokens/s at both budgets; the last of equal maxima
    assert_eq!(
        answer,
        "**Answer:** on `a`, use `e1 / static-pin @ 50%` (budget 50% = 8 MiB = 2 units = 2 experts): 200 tokens/s (simulated on `rtx4060-laptop-wddm`; Belady/MIN, the offline bound, is never recommended)."
    );
    assert!(
        md.contains("| policy | budget 25% = 8 MiB = 2 experts | budget 50% = 8 MiB = 2 experts |"),
        "{md}"
    );
    let belady_rows: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| e1 / belady (bound) @ "))
        .collect();
    assert_eq!(belady_rows.len(), 2, "{md}");
    assert!(
        belady_rows.iter().all(|l| !l.contains("**")),
        "{belady_rows:?}"
    );
    assert!(md
        .contains("No tokens-per-second-against-batch plot for `a`: the runs have one batch size"));
    // the cross-trace choice loses 9 / 7.5 - 1 = 20%, above the 5% called small
    assert!(md.contains("In short: 1 static choice was carried from one trace to another. The worst choice loses +20.0% against choosing on the evaluated trace itself"), "{md}");
}

#[test]
fn step_latency_cdfs_come_from_every_step_and_stay_out_of_the_csv() {
    let mut res = fixture(true);
    for r in res.runs.iter_mut().filter(|r| r.result.timing.is_some()) {
        r.result.timing_detail = Some(reports::TimingDetail {
            steps: 4,
            tokens: 4,
            step_latency: Some(reports::step_latency::StepLatencies::of_steps(&[
                3000.0, 1000.0, 2000.0, 2000.0,
            ])),
            ..Default::default()
        });
    }
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    reports::write_report(&res, &out).unwrap();
    let md = read(&out, "report.md");
    let captions: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("*Step-latency CDF"))
        .collect();
    assert!(!captions.is_empty());
    for c in &captions {
        assert!(
            c.ends_with("drawn as the empirical CDF of every step's latency.*"),
            "{c}"
        );
    }
    // kept in results.json, read back the same; not a CSV column
    let json = read(&out, "results.json");
    assert!(json.contains("\"step_latency\""));
    assert_eq!(Results::load(&out.join("results.json")).unwrap(), res);
    let csv = read(&out, "results.csv");
    assert!(!csv.contains("step_latency"));
    assert!(csv.lines().next().unwrap().contains("timing_detail.steps"));
}

#[test]
fn results_written_before_step_latencies_still_render_their_percentiles() {
    // the fixture's runs follow the older keys: a timing block, no kept step latencies
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("r");
    reports::write_report(&fixture(true), &out).unwrap();
    let md = read(&out, "report.md");
    let captions: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("*Step-latency CDF"))
        .collect();
    assert!(!captions.is_empty());
    for c in &captions {
        assert!(
            c.contains("through the reported p50, p90, p99 and max: these results keep no per-step latencies"),
            "{c}"
        );
    }
    let svg = read(&out, "plots/step_cdf_a_25_.svg");
    assert!(
        svg.contains("<polyline") || svg.contains("<path"),
        "a line is drawn"
    );
}

/// The points of the first polyline drawn in the first series colour (#0072B2) of `svg`.
fn series_pixels(svg: &str) -> Vec<(i32, i32)> {
    let at = svg
        .find("stroke=\"#0072B2\"")
        .expect("a line in the first colour");
    let rest = &svg[at..];
    let start = rest.find("points=\"").unwrap() + "points=\"".len();
    let end = start + rest[start..].find('"').unwrap();
    rest[start..end]
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

#[test]
fn a_cdf_of_every_step_writes_each_pixel_once_and_spans_the_same_line() {
    use reports::plots::{line_chart, LineChart, Scale, Series, SIZE};
    let spec = LineChart {
        title: "t",
        x_label: "ms",
        y_label: "%",
        x_scale: Scale::Linear,
        y_from_zero: true,
    };
    // 20,000 distinct steps of 1..=20,000 µs: 20,001 corners, 40,001 points as steps
    let us: Vec<f64> = (0..20_000).map(|i| ((i * 7) % 20_000 + 1) as f64).collect();
    let cdf = reports::step_latency::StepLatencies::of_steps(&us).cdf();
    assert_eq!(cdf.len(), 20_001);
    let pts: Vec<(f64, f64)> = cdf.iter().map(|&(x, f)| (x / 1e3, f * 100.0)).collect();
    let svg = line_chart(&spec, &[Series::new("s", pts).step()]).unwrap();
    let px = series_pixels(&svg);
    assert!(px.windows(2).all(|w| w[0] != w[1]), "a pixel repeated");
    assert!(
        px.len() <= 2 * (SIZE.0 + SIZE.1) as usize,
        "{} points",
        px.len()
    );
    // a CDF only rises: x never decreases, y (down the screen) never increases
    assert!(px.windows(2).all(|w| w[1].0 >= w[0].0 && w[1].1 <= w[0].1));
    // it starts and ends where the straight line over the same span does
    let ends = vec![(0.001, 0.0), (20.0, 100.0)];
    let line = series_pixels(&line_chart(&spec, &[Series::new("s", ends)]).unwrap());
    assert_eq!((px[0], px[px.len() - 1]), (line[0], line[1]));
}
