//! A vLLM-style hook log with forward passes, through the binary: a profiling pass of
//! identical rows and CUDA-graph capture passes under a real request id, then prompt chunks
//! and decode passes of three requests, `token_idx` restarting at each pass. `--drop-warmup`
//! drops exactly the warm-up passes, and `sim run` replays the passes as served: its LRU
//! page-ins equal those of an independent simulation over the passes as written here.

use super::{ok, sim, MODEL};

/// Experts per layer; two recorded layers, top-2.
const EXPERTS: usize = 16;

/// The log's passes: each row (request, phase) with its two selections (layer 0, layer 1).
type Row = (&'static str, &'static str, [[usize; 2]; 2]);

/// Warm-up passes (dummy rows under request r1, all selecting one set) then the real passes:
/// r1's prompt in chunks of 3 and 2, r2's prompt of 3 and r3's of 2 joining, decode rows of
/// every running request, r1 leaving after 2 decode rows and r2 after 3.
fn passes() -> (Vec<Vec<Row>>, Vec<Vec<Row>>) {
    let dummy = |n| vec![("r1", "prefill", [[0, 8], [1, 9]]); n];
    let warmup = vec![dummy(6), dummy(4), dummy(2), dummy(1)];
    let shape: [&[(&str, &str)]; 6] = [
        &[("r1", "prefill"); 3],
        &[
            ("r1", "prefill"),
            ("r1", "prefill"),
            ("r2", "prefill"),
            ("r2", "prefill"),
            ("r2", "prefill"),
        ],
        &[
            ("r1", "decode"),
            ("r2", "decode"),
            ("r3", "prefill"),
            ("r3", "prefill"),
        ],
        &[("r1", "decode"), ("r2", "decode"), ("r3", "decode")],
        &[("r2", "decode"), ("r3", "decode")],
        &[("r3", "decode")],
    ];
    let mut c = 0;
    let real = shape
        .iter()
        .map(|pass| {
            pass.iter()
                .map(|&(req, phase)| {
                    let sel = |l: usize| {
                        // ids 0..9 of 16: unions of at most 9, reused often
                        let a = (c * 5 + l * 3) % 9;
                        [a, (a + 1 + c % 3) % 9]
                    };
                    let row = (req, phase, [sel(0), sel(1)]);
                    c += 1;
                    row
                })
                .collect()
        })
        .collect();
    (warmup, real)
}

/// The hook log: per pass, layer 0's rows then layer 1's, `token_idx` the row's position.
fn log(passes: &[Vec<Row>]) -> String {
    let mut out = String::new();
    for pass in passes {
        for layer in 0..2 {
            for (pos, (req, _, sel)) in pass.iter().enumerate() {
                let [a, b] = sel[layer];
                out += &format!(
                    "{{\"req_id\":\"{req}\",\"token_idx\":{pos},\"layer\":{layer},\"topk_ids\":[{a},{b}]}}\n"
                );
            }
        }
    }
    out
}

/// Page-ins of an LRU cache of `capacity` experts (key: layer x EXPERTS + id) over the rows
/// of `phases`, one step per pass, each layer of a step accessing the union of its rows'
/// selections once (rows in order, router order inside a row); group semantics: the group's
/// units are admitted together, then the least recently used are evicted down to the
/// capacity (at least every union here, so none of the group's).
fn lru_page_ins(passes: &[Vec<Row>], phases: &[&str], capacity: usize) -> (u64, u64) {
    let mut cache: Vec<usize> = Vec::new(); // least recent first
    let (mut page_ins, mut rows) = (0, 0);
    for pass in passes {
        let kept: Vec<&Row> = pass.iter().filter(|r| phases.contains(&r.1)).collect();
        rows += kept.len() as u64;
        for layer in 0..2 {
            let mut group: Vec<usize> = Vec::new();
            for r in &kept {
                for e in r.2[layer] {
                    let key = layer * EXPERTS + e;
                    if !group.contains(&key) {
                        group.push(key);
                    }
                }
            }
            assert!(group.len() <= capacity);
            for key in group {
                match cache.iter().position(|&k| k == key) {
                    Some(i) => {
                        cache.remove(i);
                    }
                    None => page_ins += 1,
                }
                cache.push(key);
            }
            while cache.len() > capacity {
                cache.remove(0);
            }
        }
    }
    (page_ins, rows)
}

#[test]
fn a_hook_log_with_warm_up_passes_imports_and_replays_as_served() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    let (warmup, real) = passes();
    let input = p("hook.jsonl");
    std::fs::write(&input, log(&[warmup, real.clone()].concat())).unwrap();
    let mut a = vec!["trace", "import", "--format", "jsonl", &input, "--json"];
    let out = p("t");
    a.extend(["--out", &out, "--num-experts", "16", "--drop-warmup"]);
    a.extend(["--map", "sequence=req_id,token=token_idx,experts=topk_ids"]);
    a.extend(MODEL);
    let o = sim(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // by hand: 6 + 4 + 2 + 1 = 13 warm-up rows per layer in 4 passes; 6 real passes hold
    // prompts of 5 (r1), 3 (r2) and 2 (r3) rows and 2 + 3 + 3 decode rows
    assert_eq!(v[0]["forward_passes"], 6);
    assert_eq!(v[0]["format_version"], 3);
    assert_eq!(
        (
            v[0]["prefill_tokens"].as_u64(),
            v[0]["decode_tokens"].as_u64()
        ),
        (Some(10), Some(8))
    );
    let note = v[0]["warmup_dropped"].as_str().unwrap();
    assert!(
        note.contains("dropped 13 rows") && note.contains("in 4 forward passes"),
        "{note}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("dropped 13 rows"));
    let trace = p("t/hook.bin");
    let run = |extra: &[&str]| {
        let mut a = vec![
            "run",
            "--trace",
            &trace as &str,
            "--policy",
            "e1",
            "--evict",
            "lru",
        ];
        a.extend(["--budget", "10", "--json"]);
        a.extend(extra);
        ok(&a)
    };
    for (phase, phases) in [
        ("all", &["prefill", "decode"][..]),
        ("decode", &["decode"][..]),
    ] {
        let text = run(&["--phase", phase]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let (page_ins, rows) = lru_page_ins(&real, phases, 10);
        assert_eq!(
            v["cache"]["page_ins"].as_u64(),
            Some(page_ins),
            "--phase {phase}"
        );
        assert_eq!(v["cache"]["tokens"].as_u64(), Some(rows), "--phase {phase}");
        assert_eq!(v["retention"]["batching"], "recorded");
        // recorded is the default for a trace with passes
        assert_eq!(run(&["--phase", phase, "--batching", "recorded"]), text);
    }
    // fixed batching is today's round-robin: the same bytes as --batch 1, no batching key
    let fixed = run(&["--phase", "all", "--batching", "fixed"]);
    assert_eq!(
        run(&["--phase", "all", "--batching", "fixed", "--batch", "1"]),
        fixed
    );
    assert!(!fixed.contains("\"batching\""));
    // a timed run replays the passes too (the decode phase by default)
    let mut timed = vec!["run", "--trace", &trace as &str, "--policy", "e1"];
    timed.extend(["--evict", "lru", "--budget", "10", "--hw", "h200-linux"]);
    let o = sim(&[&timed[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["cache"]["page_ins"].as_u64(),
        Some(lru_page_ins(&real, &["decode"], 10).0)
    );
    // by hand: 4 of the 6 passes hold decode rows
    assert_eq!(v["timing_detail"]["steps"], 4);
    // --batch sizes round-robin batches: said, since they are not the passes as served
    let note = "replays its sequences round-robin (--batching fixed), not the passes as served";
    let o = sim(&[&timed[..], &["--batch", "2"]].concat());
    assert!(String::from_utf8_lossy(&o.stderr).contains(note));
    let o = sim(&[&timed[..], &["--batching", "fixed", "--batch", "2"]].concat());
    assert!(!String::from_utf8_lossy(&o.stderr).contains(note));
    // a curve, and LRU against MIN, step one token per sequence: never mixed with the passes
    let o = sim(&["curve", "--trace", &trace, "--policy", "e1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a curve steps one token per sequence"));
    let vs = [
        "--policy",
        "e1",
        "--evict",
        "lru",
        "--budget",
        "10",
        "--vs-belady",
    ];
    let e = sim(&[&["run", "--trace", &trace as &str][..], &vs[..]].concat());
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("give --batching fixed"));
    let fixed_vs = [
        &["run", "--trace", &trace as &str][..],
        &vs[..],
        &["--batching", "fixed"],
    ];
    assert!(sim(&fixed_vs.concat()).status.success());
    // round-robin steps of one token are not the passes as served
    let f: serde_json::Value = serde_json::from_str(&fixed).unwrap();
    assert_eq!(f["cache"]["tokens"], 18);
    assert_ne!(
        f["cache"]["page_ins"].as_u64(),
        Some(lru_page_ins(&real, &["prefill", "decode"], 10).0)
    );
    // a continuous-batching scheduler instead (2 running, 4 tokens a pass) on the same
    // requests (r1: 5 prompt + 2 decode, r2: 3 + 3, r3: 2 + 3). By hand: r1 4; r1 1 and r2 3;
    // r1, r2 decode; r1 (done), r2; r2 (done) and r3's prompt 2; r3 decode x 3
    let of = |req: &str| -> Vec<Row> { real.concat().into_iter().filter(|r| r.0 == req).collect() };
    let (r1, r2, r3) = (of("r1"), of("r2"), of("r3"));
    let scheduled: Vec<Vec<Row>> = vec![
        r1[0..4].to_vec(),
        [&r1[4..5], &r2[0..3]].concat(),
        vec![r1[5], r2[3]],
        vec![r1[6], r2[4]],
        [&r2[5..6], &r3[0..2]].concat(),
        vec![r3[2]],
        vec![r3[3]],
        vec![r3[4]],
    ];
    for (phase, phases) in [
        ("all", &["prefill", "decode"][..]),
        ("decode", &["decode"][..]),
    ] {
        let c = [
            "--batching",
            "continuous",
            "--max-seqs",
            "2",
            "--max-batched-tokens",
            "4",
        ];
        let v: serde_json::Value =
            serde_json::from_str(&run(&[&["--phase", phase][..], &c[..]].concat())).unwrap();
        let (page_ins, rows) = lru_page_ins(&scheduled, phases, 10);
        assert_eq!(
            v["cache"]["page_ins"].as_u64(),
            Some(page_ins),
            "--phase {phase}"
        );
        assert_eq!(v["cache"]["tokens"].as_u64(), Some(rows), "--phase {phase}");
        assert_eq!(v["retention"]["batching"], "continuous");
        assert_eq!(v["retention"]["max_seqs"], 2);
        assert_eq!(v["retention"]["max_batched_tokens"], 4);
    }
    let e = sim(&[
        "run",
        "--trace",
        &trace,
        "--evict",
        "lru",
        "--budget",
        "10",
        "--batching",
        "recorded",
        "--batch",
        "2",
    ]);
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("leave out --batch"));
}

#[test]
fn recorded_batching_needs_a_trace_with_passes() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    let (_, real) = passes();
    // without the position field the rows are numbered per sequence: no passes
    let input = p("rows.jsonl");
    std::fs::write(&input, log(&real)).unwrap();
    let out = p("t");
    let mut a = vec!["trace", "import", "--format", "jsonl", &input];
    a.extend(["--out", &out, "--map", "sequence=req_id,experts=topk_ids"]);
    a.extend(MODEL);
    ok(&a);
    let trace = p("t/rows.bin");
    let base = [
        "run",
        "--trace",
        &trace as &str,
        "--evict",
        "lru",
        "--budget",
        "10",
        "--json",
    ];
    let plain = ok(&base);
    assert_eq!(ok(&[&base[..], &["--batching", "fixed"]].concat()), plain);
    let e = sim(&[&base[..], &["--batching", "recorded"]].concat());
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("records no forward passes"));
    let e = sim(&[
        "sweep",
        "--trace",
        &trace,
        "--evict",
        "lru",
        "--budget",
        "10",
        "--batching",
        "recorded",
    ]);
    assert!(!e.status.success());
    // a grid replays passes too, but this trace has none
    assert!(String::from_utf8_lossy(&e.stderr).contains("records no forward passes"));
    // continuous batching needs both limits, each at least 1, and only with continuous
    let cases: [(&[&str], &str); 5] = [
        (
            &["--batching", "continuous", "--max-seqs", "2"],
            "needs --max-seqs N and --max-batched-tokens T",
        ),
        (
            &["--max-seqs", "2", "--max-batched-tokens", "8"],
            "the limits of --batching continuous",
        ),
        (
            &[
                "--batching",
                "continuous",
                "--max-seqs",
                "0",
                "--max-batched-tokens",
                "8",
            ],
            "--max-seqs",
        ),
        (
            &[
                "--batching",
                "continuous",
                "--max-seqs",
                "2",
                "--max-batched-tokens",
                "x",
            ],
            "--max-batched-tokens",
        ),
        (
            &[
                "--batching",
                "continuous",
                "--max-seqs",
                "2",
                "--max-batched-tokens",
                "8",
                "--queue",
                "2",
            ],
            "leave out --batch and --queue",
        ),
    ];
    for (extra, says) in cases {
        let e = sim(&[&base[..], extra].concat());
        assert!(!e.status.success(), "{extra:?}");
        let err = String::from_utf8_lossy(&e.stderr);
        assert!(
            err.contains(says) && !err.contains("panicked"),
            "{extra:?}: {err}"
        );
    }
    let e = sim(&["run", "--trace", &trace, "--batching", "fixed"]);
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("apply to the cache regime"));
}
