//! `sim trace import` of the serving-engine formats through the binary: vLLM `.npy`
//! directories, SGLang responses and llama.cpp rows made here, written as traces and
//! compared in one report; flags a format does not read are refused by name.

#[path = "import_engines_cli/passes.rs"]
mod passes;
#[path = "import_engines_cli/passes_grid.rs"]
mod passes_grid;

use base64::Engine;
use npyz::WriterBuilder;
use std::path::Path;
use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = sim(args);
    assert!(
        o.status.success(),
        "sim {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Tokens x 4 MoE layers x top-2 of 8 experts, a deterministic pattern with reuse.
const LAYERS: usize = 4;
const TOP_K: usize = 2;

fn selection(request: usize, t: usize, l: usize) -> [i32; 2] {
    let a = ((t / 3 + l * 3 + request) % 8) as i32;
    [a, (a + 1 + (l as i32 % 2)) % 8]
}

fn ids(request: usize, tokens: usize) -> Vec<i32> {
    (0..tokens)
        .flat_map(|t| (0..LAYERS).flat_map(move |l| selection(request, t, l)))
        .collect()
}

fn write_npy(path: &Path, tokens: usize, request: usize) {
    let mut out = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[tokens as u64, LAYERS as u64, TOP_K as u64])
        .writer(&mut out)
        .begin_nd()
        .unwrap();
    w.extend(ids(request, tokens)).unwrap();
    w.finish().unwrap();
    std::fs::write(path, out).unwrap();
}

fn sglang_jsonl(tokens: usize) -> String {
    (0..2)
        .map(|r| {
            let bytes: Vec<u8> = ids(r, tokens).iter().flat_map(|x| x.to_le_bytes()).collect();
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            format!(
                "{{\"text\":\"\",\"meta_info\":{{\"id\":\"req{r}\",\"prompt_tokens\":8,\"routed_experts\":\"{b64}\"}}}}\n"
            )
        })
        .collect()
}

/// llama.cpp rows: a prompt pass of 8 tokens then one pass per generated token.
fn llama_rows(tokens: usize) -> String {
    let mut s = String::from("layer,expert\n");
    let pass = |s: &mut String, range: std::ops::Range<usize>| {
        for l in 0..LAYERS {
            for t in range.clone() {
                for e in selection(0, t, l) {
                    s.push_str(&format!("{l},{e}\n"));
                }
            }
        }
    };
    pass(&mut s, 0..8);
    for t in 8..tokens {
        pass(&mut s, t..t + 1);
    }
    s
}

const MODEL: [&str; 6] = [
    "--model-name",
    "tiny-moe",
    "--hidden-size",
    "256",
    "--expert-ffn",
    "128",
];

#[test]
fn engine_traces_import_and_compare_in_one_report() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    std::fs::create_dir(d.path().join("vllm")).unwrap();
    for r in 0..2 {
        write_npy(&d.path().join(format!("vllm/req{r}.npy")), 40, r);
    }
    std::fs::write(p("sglang.jsonl"), sglang_jsonl(40)).unwrap();
    std::fs::write(p("llama.csv"), llama_rows(40)).unwrap();
    let import = |format: &str, input: &str, extra: &[&str]| {
        let mut a = vec!["trace", "import", "--format", format, input];
        let out = p("traces");
        a.extend(["--out", &out, "--json"]);
        a.extend(MODEL);
        a.extend(extra);
        let text = ok(&a);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v[0].clone()
    };
    let v = import("vllm-routed-experts", &p("vllm"), &["--prompt-tokens", "8"]);
    assert_eq!(v["sequences"], 2);
    assert_eq!(v["prefill_tokens"], 16);
    assert_eq!(v["decode_tokens"], 64);
    assert_eq!(v["format_version"], 1);
    let s = import(
        "sglang-routed-experts",
        &p("sglang.jsonl"),
        &["--moe-layers", "4", "--top-k", "2"],
    );
    assert_eq!(
        (s["sequences"].as_u64(), s["decode_tokens"].as_u64()),
        (Some(2), Some(64))
    );
    let l = import("llama-moe-trace", &p("llama.csv"), &["--top-k", "2"]);
    assert_eq!(
        (l["sequences"].as_u64(), l["prefill_tokens"].as_u64()),
        (Some(1), Some(8))
    );
    // the vLLM and SGLang imports of the same selections hold the same payload
    let tv = traces::read_file(p("traces/vllm.bin")).unwrap();
    let ts = traces::read_file(p("traces/sglang.bin")).unwrap();
    assert_eq!(tv.sequences, ts.sequences);
    let report = p("report");
    ok(&[
        "compare",
        "--trace",
        &p("traces/vllm.bin"),
        "--trace",
        &p("traces/sglang.bin"),
        "--trace",
        &p("traces/llama.bin"),
        "--policies",
        "e1,e2",
        "--evict",
        "lru",
        "--budgets",
        "50%",
        "--quiet",
        "--out",
        &report,
    ]);
    let md = std::fs::read_to_string(d.path().join("report/report.md")).unwrap();
    for name in ["vllm", "sglang", "llama"] {
        assert!(md.contains(name), "the report names {name}");
    }
}

#[test]
fn flags_a_format_does_not_read_are_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("rows.csv");
    std::fs::write(&f, "sequence,layer,experts\na,0,1 2\n").unwrap();
    let out = d.path().join("out");
    let o = sim(&[
        "trace",
        "import",
        "--format",
        "csv",
        f.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--top-k",
        "2",
    ]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--format csv does not read --top-k"), "{e}");
    assert!(
        e.contains("sglang-routed-experts and llama-moe-trace"),
        "{e}"
    );
    assert!(!out.exists(), "nothing is written");
    let o = sim(&[
        "trace",
        "import",
        "--format",
        "jsonl",
        f.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--map",
        "seq=req",
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("--map") && e.contains("not a row field"),
        "{e}"
    );
}

#[test]
fn the_field_map_and_filters_work_through_the_cli() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("log.jsonl");
    std::fs::write(
        &f,
        "\u{feff}{\"type\":\"route\",\"req_id\":\"r\",\"layer\":0,\"topk_ids\":[1,2],\"ts\":1}\n\
         {\"type\":\"mem\",\"gpu\":3}\n\
         {\"type\":\"route\",\"req_id\":\"r\",\"layer\":0,\"topk_ids\":[2,3],\"ts\":2}\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let text = ok(&[
        "trace",
        "import",
        "--format",
        "jsonl",
        f.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--map",
        "sequence=req_id,experts=topk_ids",
        "--where",
        "type=route",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v[0]["decode_tokens"], 2);
    let t = traces::read_file(out.join("log.bin")).unwrap();
    assert_eq!(t.sequences[0].decode.ids, [1, 2, 2, 3]);
}
