//! `sim trace import --model-config`: the header's geometry from the model's config.json,
//! checked against the log's layers, experts and top-k.

use super::{repo, sim};
use std::path::Path;

/// A tiny Qwen2-MoE config written by hand: 4 layers, layer 0 dense (`mlp_only_layers`),
/// 8 routed experts of FFN 16 with top-2, one shared expert of FFN 64, hidden 32.
const TINY_QWEN2: &str = r#"{"model_type": "qwen2_moe", "hidden_size": 32,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "vocab_size": 100, "tie_word_embeddings": false, "num_experts": 8,
  "num_experts_per_tok": 2, "moe_intermediate_size": 16, "intermediate_size": 48,
  "decoder_sparse_step": 1, "mlp_only_layers": [0],
  "shared_expert_intermediate_size": 64}"#;

/// Import `csv` (a `sequence,layer,experts` log) with `extra` flags; the output and, on
/// success, the written header and the `--json` format version.
fn import(
    dir: &Path,
    csv: &str,
    extra: &[&str],
) -> (std::process::Output, Option<(traces::ModelSpec, u64)>) {
    let log = dir.join("log.csv");
    std::fs::write(&log, csv).unwrap();
    let out = dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    let (log, outs) = (log.to_str().unwrap(), out.to_str().unwrap());
    let base = [
        "trace", "import", "--format", "csv", log, "--out", outs, "--json",
    ];
    let o = sim(&[&base[..], extra].concat());
    let got = o.status.success().then(|| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let h = traces::read_header(out.join("log.bin")).unwrap();
        (h.model, v[0]["format_version"].as_u64().unwrap())
    });
    (o, got)
}

/// Qwen3-30B-A3B's shipped config.json (48 layers, 128 experts, top-8, hidden 2048,
/// `moe_intermediate_size` 768, no shared expert): a log of layers 0 and 47 with ids up to 7
/// becomes 48 MoE layers of 128 experts, the 46 in between unrecorded (version 2).
#[test]
fn qwen3_config_gives_the_header_geometry() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = repo("traces/data/configs/qwen3-30b-a3b.json");
    let csv = "sequence,layer,experts\na,0,0 1 2 3 4 5 6 7\na,47,7 6 5 4 3 2 1 0\n";
    let (o, got) = import(dir.path(), csv, &["--model-config", cfg.to_str().unwrap()]);
    let (m, version) = got.unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("inferred"));
    assert_eq!(
        (m.hidden_size, m.expert_ffn, m.shared_expert_ffn),
        (Some(2048), Some(768), None)
    );
    assert_eq!((m.layers.len(), m.expert_matrices, version), (48, 3, 2));
    let l = |i: usize| {
        (
            m.layers[i].experts,
            m.layers[i].top_k,
            m.layers[i].shared_experts,
        )
    };
    assert_eq!((l(0), l(47)), ((128, 8, 0), (128, 8, 0)));
    assert!((1..47).all(|i| l(i) == (128, 0, 0)));
}

/// The tiny hand-made config: layer 0 dense, layers 1-3 with 8 experts, top-2 and one shared
/// expert of FFN 64 (which makes the trace version 3).
#[test]
fn a_qwen2_config_gives_dense_layers_and_shared_experts() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, TINY_QWEN2).unwrap();
    let csv = "sequence,layer,experts\na,1,0 1\na,2,2 3\na,3,1 4\n";
    let (o, got) = import(dir.path(), csv, &["--model-config", cfg.to_str().unwrap()]);
    let (m, version) = got.unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(
        (m.hidden_size, m.expert_ffn, m.shared_expert_ffn),
        (Some(32), Some(16), Some(64))
    );
    assert_eq!(version, 3);
    let l: Vec<_> = m
        .layers
        .iter()
        .map(|l| (l.experts, l.top_k, l.shared_experts))
        .collect();
    assert_eq!(l, [(0, 0, 0), (8, 2, 1), (8, 2, 1), (8, 2, 1)]);
}

/// Each disagreement is refused, naming the config field, and writes nothing; a geometry
/// flag with --model-config is a usage error.
#[test]
fn a_config_that_disagrees_is_an_error_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, TINY_QWEN2).unwrap();
    let flag = ["--model-config", cfg.to_str().unwrap()];
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "a,1,0 1 2\n",
            &[],
            "num_experts_per_tok is 2 but the log's layer 1 selects 3",
        ),
        (
            "a,1,0 1\n",
            &["--num-experts", "16"],
            "num_experts is 8 but the log's layer 1 has 16",
        ),
        (
            "a,0,0 1\n",
            &[],
            "mlp_only_layers / decoder_sparse_step makes layer 0 dense",
        ),
        (
            "a,5,0 1\n",
            &["--num-layers", "6"],
            "num_hidden_layers is 4 but the log has 6 layers",
        ),
        (
            "a,5,0 1\n",
            &[],
            "--model-config's 4 layers (num_hidden_layers)",
        ),
    ];
    for (rows, extra, want) in cases {
        let csv = format!("sequence,layer,experts\n{rows}");
        let (o, got) = import(dir.path(), &csv, &[&flag[..], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(got.is_none() && o.status.code() == Some(1), "{want}: {err}");
        assert!(err.contains(want), "{want}: {err}");
        assert!(!dir.path().join("out").exists(), "{want}: wrote output");
    }
    let (o, _) = import(
        dir.path(),
        "sequence,layer,experts\na,1,0 1\n",
        &[&flag[..], &["--hidden-size", "32"]].concat(),
    );
    assert_eq!(o.status.code(), Some(2));
}
