//! Recorded forward passes honoured by timed runs and by the grids (`sim sweep`,
//! `sim compare`) and kept by the CSV export, on a hook log of three passes small enough to
//! replay by hand; and a StrataMoE RouterTrace through the binary.

use super::{ok, sim, MODEL};

/// One row of a pass: its request, layer 0's top-2 and layer 1's top-2.
type Row = (&'static str, [u32; 2], [u32; 2]);

/// The log: pass 0 holds two prompt rows of r1; pass 1 one row each of r1 and r2; pass 2
/// one row each of r1 and r2. Per row: (request, layer 0's top-2, layer 1's top-2). r1 has
/// a pass of two rows, so its rows through pass 0 are prompt rows and its later rows decode
/// rows; r2 never has two rows in one pass, so both its rows are decode rows.
const PASSES: [&[Row]; 3] = [
    &[("r1", [0, 1], [2, 3]), ("r1", [1, 2], [3, 4])],
    &[("r1", [0, 3], [2, 5]), ("r2", [4, 5], [6, 7])],
    &[("r1", [0, 1], [2, 3]), ("r2", [6, 7], [0, 1])],
];

/// Import the log into `dir`; returns the trace's path.
fn trace(dir: &std::path::Path) -> String {
    let mut log = String::new();
    for pass in PASSES {
        for layer in 0..2 {
            for (pos, (req, l0, l1)) in pass.iter().enumerate() {
                let [a, b] = if layer == 0 { l0 } else { l1 };
                log += &format!(
                    "{{\"req_id\":\"{req}\",\"token_idx\":{pos},\"layer\":{layer},\"topk_ids\":[{a},{b}]}}\n"
                );
            }
        }
    }
    let input = dir.join("three.jsonl");
    std::fs::write(&input, log).unwrap();
    let out = dir.join("t");
    let mut a = vec![
        "trace",
        "import",
        "--format",
        "jsonl",
        input.to_str().unwrap(),
    ];
    a.extend(["--out", out.to_str().unwrap(), "--num-experts", "8"]);
    a.extend(["--map", "sequence=req_id,token=token_idx,experts=topk_ids"]);
    a.extend(MODEL);
    ok(&a);
    out.join("three.bin").to_str().unwrap().to_string()
}

// By hand, an LRU of 4 units (e1: one expert per unit) with group semantics, one step per
// pass, each layer's group the union of its rows' selections (L0:x is layer 0's expert x):
//   --phase all: pass 0: L0 {0,1,2} 3 in; L1 {2,3,4} 3 in, evicting L0:0, L0:1.
//     pass 1: L0 {0,3,4,5} 4 in (L0:2 was not asked), evicting L0:2, L1:2, L1:3, L1:4;
//     L1 {2,5,6,7} 4 in, evicting the four of layer 0. pass 2: L0 {0,1,6,7} 4 in, evicting
//     layer 1's four; L1 {0,1,2,3} 4 in. 22 page-ins, 3 steps, 6 tokens.
//   Belady/MIN keeps, of the units outside the group, those used soonest: pass 0's layer 1
//     evicts L0:2 (never again) and L0:1 (pass 2) and keeps L0:0, a hit in pass 1: 21.
//   --phase decode: passes 1 and 2, 4 page-ins in each of their 4 groups: 16, 2 steps, 4
//     tokens.
const LRU_ALL: u64 = 22;
const MIN_ALL: u64 = 21;
const LRU_DECODE: u64 = 16;

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).unwrap()
}

#[test]
fn a_timed_run_steps_the_recorded_passes() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let run = ["run", "--trace", &t, "--policy", "e1", "--evict", "lru"];
    let timed = [&run[..], &["--budget", "4", "--hw", "h200-linux", "--json"]].concat();
    for (phase, page_ins, steps, tokens) in [("all", LRU_ALL, 3, 6), ("decode", LRU_DECODE, 2, 4)] {
        let v = json(&[&timed[..], &["--phase", phase]].concat());
        assert_eq!(v["retention"]["batching"], "recorded", "--phase {phase}");
        assert_eq!(v["cache"]["page_ins"], page_ins, "--phase {phase}");
        assert_eq!(v["cache"]["tokens"], tokens, "--phase {phase}");
        assert_eq!(v["timing_detail"]["steps"], steps, "--phase {phase}");
        assert_eq!(v["timing_detail"]["page_ins"], page_ins, "--phase {phase}");
    }
    // round-robin instead: one token per step, 6 steps
    let v = json(&[&timed[..], &["--phase", "all", "--batching", "fixed"]].concat());
    assert_eq!(v["timing_detail"]["steps"], 6);
    assert!(v["retention"].get("batching").is_none());
    // the streaming regime's timed run steps round-robin, and says so
    let o = sim(&["run", "--trace", &t, "--policy", "e1", "--hw", "h200-linux"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("in the streaming regime (no --evict)"));
    // the streaming block is per token on any trace: said on one with passes
    let o = sim(&["run", "--trace", &t, "--policy", "e1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the streaming block counts per token"),
        "{err}"
    );
    // the passes fix each step's tokens: no verified drafts or prompt chunks on top
    let e = sim(&[
        &timed[..],
        &["--batching", "recorded", "--verify", "2", "--accepted", "1"],
    ]
    .concat());
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("leave out the step flags"));
}

#[test]
fn sweep_and_compare_replay_the_recorded_passes() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let grid = [
        "--evict", "lru", "--budget", "4", "--split", "global", "--phase", "all",
    ];
    let sweep = [
        &["sweep", "--trace", &t as &str][..],
        &grid[..],
        &["--json"],
    ]
    .concat();
    for extra in [&[][..], &["--hw", "h200-linux"][..]] {
        let v = json(&[&sweep[..], extra].concat());
        let rows = v.as_array().unwrap();
        // Belady, the bound sweep adds, then LRU
        let got: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r["retention"]["evict"].clone(),
                    r["cache"]["page_ins"].clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (serde_json::json!("belady"), serde_json::json!(MIN_ALL)),
                (serde_json::json!("lru"), serde_json::json!(LRU_ALL)),
            ],
            "{extra:?}"
        );
        for r in rows {
            assert_eq!(r["retention"]["batching"], "recorded");
            if !extra.is_empty() {
                assert_eq!(r["timing_detail"]["steps"], 3);
            }
        }
    }
    // --batch sizes round-robin batches, and says so; with --batching recorded it is refused
    let o = sim(&[&sweep[..], &["--batch", "2"]].concat());
    assert!(o.status.success());
    let note = "replays its sequences round-robin (--batching fixed), not the passes as served";
    assert!(String::from_utf8_lossy(&o.stderr).contains(note));
    let o = sim(&[&sweep[..], &["--batch", "2", "--batching", "recorded"]].concat());
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("leave out --batch and --queue"));
    // compare: the same page-ins per run
    let out = d.path().join("report");
    let mut c = vec!["compare", "--trace", &t, "--policies", "e1"];
    c.extend(["--evict", "lru", "--budget", "4", "--phase", "all"]);
    c.extend(["--out", out.to_str().unwrap()]);
    ok(&c);
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    let got: Vec<_> = r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run.get("cache").is_some())
        .map(|run| {
            assert_eq!(run["retention"]["batching"], "recorded");
            run["cache"]["page_ins"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(got, [MIN_ALL, LRU_ALL]);
}

#[test]
fn the_csv_export_of_a_trace_with_passes_imports_back_to_the_same_trace() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let csv = d.path().join("three.csv");
    let csv = csv.to_str().unwrap();
    ok(&[
        "trace", "export", "--format", "csv", &t, "--out", csv, "--phase", "all",
    ]);
    let text = std::fs::read_to_string(csv).unwrap();
    // pass by pass, layer by layer, `token` the row's position in its pass, then the pass
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "sequence,phase,token,layer,experts,pass");
    assert_eq!(lines[1], "r1,prefill,0,0,0 1,0");
    assert_eq!(lines[4], "r1,prefill,1,1,3 4,0");
    assert_eq!(lines[6], "r2,decode,1,0,4 5,1");
    assert_eq!(lines.len(), 1 + 12); // 6 rows x 2 layers
    let out = d.path().join("back");
    let mut a = vec!["trace", "import", "--format", "csv", csv];
    a.extend(["--out", out.to_str().unwrap(), "--num-experts", "8"]);
    a.extend(MODEL);
    ok(&a);
    let before = traces::read_file(std::path::Path::new(&t)).unwrap();
    let after = traces::read_file(out.join("three.bin")).unwrap();
    assert_eq!(after.header.sequences, before.header.sequences);
    assert_eq!(after.header.passes, before.header.passes);
    assert!(after.header.passes.as_ref().is_some_and(|p| p.len() == 3));
    assert_eq!(after.sequences, before.sequences);
}

#[test]
fn a_stratamoe_router_trace_imports_and_runs_through_the_binary() {
    let d = tempfile::tempdir().unwrap();
    // 4 tokens, 2 layers of 4 experts, top-1; layer 0 selects 0, 1, 0, 2 and layer 1 3 always
    let text = r#"{"version": 2, "tokens": 4, "layers": 2, "expertsPerLayer": 4, "topK": 1,
      "scenario": "s", "seed": 1, "selections": [[[0],[3]],[[1],[3]],[[0],[3]],[[2],[3]]],
      "source": {"kind": "captured", "model": {"id": "m/x", "revision": "abc"}}}"#;
    let input = d.path().join("rt.json");
    std::fs::write(&input, text).unwrap();
    let out = d.path().join("t");
    ok(&[
        "trace",
        "import",
        "--format",
        "stratamoe-router-trace",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = out.join("rt.bin");
    let h = traces::read_header(&t).unwrap();
    assert_eq!(
        (h.model.name.as_str(), h.model.revision.as_deref()),
        ("m/x", Some("abc"))
    );
    // by hand, LRU of 2 units, one token a step: L0:0 in, L1:3 in; L0:1 in (evicts L0:0),
    // L1:3 hit; L0:0 in (evicts L0:1), hit; L0:2 in, hit: 5 page-ins
    let v = json(&[
        "run",
        "--trace",
        t.to_str().unwrap(),
        "--policy",
        "e1",
        "--evict",
        "lru",
        "--budget",
        "2",
        "--expert-mib",
        "1",
        "--json",
    ]);
    assert_eq!(v["cache"]["page_ins"], 5);
    assert_eq!(v["cache"]["tokens"], 4);
}
