//! The bundled granite-3.0-1b-a400m trace: the facts its source README states, and that the
//! bundled .bin files hold exactly what the source JSON says (checked against a naive,
//! independent walk of the JSON).

use std::path::PathBuf;
use traces::{Phase, PhaseSel};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data/granite")
        .join(name)
}

fn source_json() -> serde_json::Value {
    let text = std::fs::read_to_string(data("source/moe_expert_trace.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn per_prompt_files_hold_the_readme_facts() {
    // (file, prompt key, prompt_len from the README)
    for (file, key, prompt_len) in [
        ("english_prose.bin", "english_prose", 39u64),
        ("code.bin", "code", 44),
        ("math.bin", "math", 29),
        ("prose.bin", "english_prose", 39),
    ] {
        let t = traces::read_file(data(file)).unwrap();
        let h = &t.header;
        assert_eq!(h.sequences.len(), 1, "{file}");
        assert_eq!(h.sequences[0].name, key);
        assert_eq!(h.sequences[0].prefill_tokens, prompt_len, "{file}");
        assert_eq!(h.sequences[0].decode_tokens, 64, "{file}");
        assert_eq!(t.total_tokens(PhaseSel::Decode), 64);
        // 12,288 decode accesses per prompt = 64 steps x 24 layers x top-8.
        let accesses: usize = (0..64)
            .map(|tok| t.token(&t.keyspace(), 0, Phase::Decode, tok).len())
            .sum();
        assert_eq!(accesses, 12_288, "{file}");
        assert_eq!(h.model.layers.len(), 24);
        assert!(h
            .model
            .layers
            .iter()
            .all(|l| l.experts == 32 && l.top_k == 8 && l.shared_experts == 0));
        assert_eq!(h.model.hidden_size, Some(1024));
        assert_eq!(h.model.expert_ffn, Some(512));
        assert_eq!(h.model.name, "granite-3.0-1b-a400m-instruct");
        assert!(!h.provenance.synthetic);
        assert!(h.provenance.source.contains("justinchuby/onnx-genai"));
        assert!(h.provenance.licence.as_deref().unwrap().contains("MIT"));
        assert_eq!(h.provenance.prompt_labels, vec![key.to_string()]);
        assert!(!h.has_weights);
    }
}

#[test]
fn bundled_files_match_the_source_json_selection_by_selection() {
    let json = source_json();
    let prompts = json["prompts"].as_object().unwrap();
    let all = traces::read_file(data("all.bin")).unwrap();
    let ks = all.keyspace();
    let names: Vec<&str> = all
        .header
        .sequences
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["english_prose", "code", "math"], "file order kept");
    assert_eq!(all.total_tokens(PhaseSel::Decode), 192);
    for (s, (key, prompt)) in prompts.iter().enumerate() {
        let single = traces::read_file(data(&format!("{key}.bin"))).unwrap();
        for (phase, field) in [(Phase::Prefill, "prefill"), (Phase::Decode, "decode")] {
            let steps = prompt[field].as_array().unwrap();
            assert_eq!(all.tokens(s, phase), steps.len());
            for (t, step) in steps.iter().enumerate() {
                for (m, sel) in step.as_array().unwrap().iter().enumerate() {
                    let want: Vec<u16> = sel
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_u64().unwrap() as u16)
                        .collect();
                    assert_eq!(all.selection(&ks, s, phase, t, m), want.as_slice());
                    assert_eq!(single.selection(&ks, 0, phase, t, m), want.as_slice());
                }
            }
        }
    }
}

#[test]
fn importing_the_source_json_reproduces_the_bundled_files() {
    let opts = traces::ImportOptions {
        model_name: Some("granite-3.0-1b-a400m-instruct".into()),
        hidden_size: Some(1024),
        expert_ffn: Some(512),
        ..Default::default()
    };
    let imported =
        traces::import_onnx_genai_json(data("source/moe_expert_trace.json"), &opts).unwrap();
    let bundled_all = traces::read_file(data("all.bin")).unwrap();
    // Provenance differs (source and licence text were given on the command line); the
    // geometry, sequences and every selection must not.
    assert_eq!(imported.all.header.model, bundled_all.header.model);
    assert_eq!(imported.all.header.sequences, bundled_all.header.sequences);
    assert_eq!(imported.all.sequences, bundled_all.sequences);
    let keys: Vec<&str> = imported.prompts.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["english_prose", "code", "math"]);
    for (key, trace) in &imported.prompts {
        let bundled = traces::read_file(data(&format!("{key}.bin"))).unwrap();
        assert_eq!(trace.sequences, bundled.sequences, "{key}");
    }
}

#[test]
fn embedded_bytes_read_like_the_file() {
    let bytes = std::fs::read(data("prose.bin")).unwrap();
    let from_bytes = traces::read_bytes(&bytes, "embedded prose.bin").unwrap();
    assert_eq!(from_bytes, traces::read_file(data("prose.bin")).unwrap());
}
