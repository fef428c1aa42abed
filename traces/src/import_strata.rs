//! Importer for StrataMoE RouterTrace v2 JSON (`--format stratamoe-router-trace`): the router
//! traces of StrataMoE Lab (github.com/Labeeb2339/stratamoe-lab, `docs/ROUTER_TRACE_SCHEMA.md`;
//! a captured sample is `evidence/switch-base-8/router-trace.v2.json`).
//!
//! One JSON object: `version` (2), `tokens`, `layers`, `expertsPerLayer`, `topK`,
//! `selections[token][layer][rank]` (the selected expert ids), `scenario`, `seed` and
//! `source`, the provenance: `kind` `captured` (with `model.id`, `model.revision`,
//! `tokenizer.revision`, `software`, `workload`, `capture`) or `synthetic` (with
//! `generator`). The tokens are one stream with no prompt boundary: they become one
//! sequence named after the scenario, all decode tokens unless `--prompt-tokens` says how
//! many lead as prompt. The provenance is kept: the model's id and revision (unless
//! `--model-name`/`--revision` are given), the source object as JSON text in
//! `provenance.source` (unless `--source`), and a synthetic trace stays synthetic with its
//! generator and seed.

use crate::error::TraceError;
use crate::import_arrays::{build_from_requests, RequestRouting};
use crate::import_rows::RowImportOptions;
use crate::trace::Trace;
use serde::Deserialize;
use std::path::Path;

/// The file's fields this importer reads (others are ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RouterTrace {
    version: u64,
    tokens: u64,
    layers: u64,
    experts_per_layer: u64,
    top_k: u64,
    scenario: Option<String>,
    seed: Option<serde_json::Value>,
    selections: Vec<Vec<Vec<i64>>>,
    source: serde_json::Value,
}

/// Import a RouterTrace v2 file.
pub fn import_strata_router_trace(
    path: &Path,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let text = crate::utf8_text::read(path, "RouterTrace v2 JSON")
        .map_err(|e| TraceError::io(&file, "reading", e))?;
    parse_strata_router_trace(&text, &file, opts)
}

/// Import RouterTrace v2 JSON text; `file` names it in errors.
pub fn parse_strata_router_trace(
    text: &str,
    file: &str,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    let err = |detail: String| TraceError::Import {
        file: file.to_string(),
        location: "RouterTrace".into(),
        detail,
    };
    let rt: RouterTrace = serde_json::from_str(text).map_err(|e| {
        err(format!("{e} (expected a StrataMoE RouterTrace v2 object: version, tokens, layers, expertsPerLayer, topK, selections, source)"))
    })?;
    if rt.version != 2 {
        return Err(err(format!(
            "version {}: this importer reads RouterTrace version 2",
            rt.version
        )));
    }
    let (layers, top_k) = (rt.layers as usize, rt.top_k as usize);
    if rt.selections.len() as u64 != rt.tokens {
        return Err(err(format!(
            "`tokens` says {} but `selections` holds {} tokens",
            rt.tokens,
            rt.selections.len()
        )));
    }
    let mut ids = Vec::with_capacity(rt.selections.len() * layers * top_k);
    for (t, token) in rt.selections.iter().enumerate() {
        if token.len() != layers {
            return Err(err(format!(
                "selections[{t}] holds {} layers, not the {layers} of `layers`",
                token.len()
            )));
        }
        for (l, sel) in token.iter().enumerate() {
            if sel.len() != top_k {
                return Err(err(format!(
                    "selections[{t}][{l}] holds {} experts, not the {top_k} of `topK`",
                    sel.len()
                )));
            }
            if let Some(&e) = sel
                .iter()
                .find(|&&e| e < 0 || e as u64 >= rt.experts_per_layer)
            {
                return Err(err(format!(
                    "selections[{t}][{l}] holds expert {e}, outside 0..{} (`expertsPerLayer`)",
                    rt.experts_per_layer
                )));
            }
            ids.extend_from_slice(sel);
        }
    }
    let experts = u16::try_from(rt.experts_per_layer).map_err(|_| {
        err(format!(
            "expertsPerLayer {} above 65535",
            rt.experts_per_layer
        ))
    })?;
    let prompt = opts.prompt_tokens.unwrap_or(0);
    if prompt > rt.tokens {
        return Err(err(format!(
            "--prompt-tokens {prompt} is more than the trace's {} tokens",
            rt.tokens
        )));
    }
    let name = rt.scenario.clone().unwrap_or_else(|| "router-trace".into());
    let requests = vec![RequestRouting {
        name: name.clone(),
        location: "selections".into(),
        prompt_tokens: prompt,
        shape: [rt.tokens as usize, layers, top_k],
        ids,
    }];
    let opts = RowImportOptions {
        num_experts: Some(opts.num_experts.unwrap_or(experts)),
        ..opts.clone()
    };
    let mut trace = build_from_requests(requests, file, "stratamoe-router-trace", None, &opts)?;
    keep_provenance(&mut trace, &rt, &opts);
    Ok(trace)
}

/// The file's provenance in the header, where the flags do not give it.
fn keep_provenance(trace: &mut Trace, rt: &RouterTrace, opts: &RowImportOptions) {
    let src = &rt.source;
    let model = &mut trace.header.model;
    if opts.common.model_name.is_none() {
        if let Some(id) = src.pointer("/model/id").and_then(|v| v.as_str()) {
            model.name = id.to_string();
        }
    }
    if opts.common.revision.is_none() {
        model.revision = src
            .pointer("/model/revision")
            .and_then(|v| v.as_str())
            .map(str::to_string);
    }
    let p = &mut trace.header.provenance;
    if opts.common.source.is_none() {
        p.source = format!("StrataMoE RouterTrace v2 source: {src}");
    }
    if src.get("kind").and_then(|v| v.as_str()) == Some("synthetic") {
        p.synthetic = true;
        let generator = serde_json::json!({ "generator": src.get("generator"), "seed": rt.seed });
        p.generator = Some(generator.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A captured trace of 3 tokens, 2 layers of 4 experts, top-1, with the sample's source
    /// fields.
    const CAPTURED: &str = r#"{
      "version": 2, "tokens": 3, "layers": 2, "expertsPerLayer": 4, "topK": 1,
      "scenario": "domain-shift", "seed": 2339,
      "selections": [[[3], [0]], [[1], [2]], [[3], [3]]],
      "source": {
        "kind": "captured",
        "model": {"id": "google/switch-base-8", "revision": "92fe2d22b024d9937146fe097ba3d3a7ba146e1b"},
        "tokenizer": {"revision": "92fe2d22b024d9937146fe097ba3d3a7ba146e1b"},
        "software": {"pytorchVersion": "2.7.1+cpu", "transformersVersion": "4.57.1"},
        "workload": {"kind": "prompt-manifest", "sha256": "ac50"},
        "capture": {"device": "cpu", "dtype": "torch.float32", "seed": 2339}
      }
    }"#;

    fn parse(text: &str, opts: &RowImportOptions) -> Result<Trace, TraceError> {
        parse_strata_router_trace(text, "rt.json", opts)
    }

    #[test]
    fn a_captured_trace_keeps_its_selections_and_provenance() {
        let t = parse(CAPTURED, &RowImportOptions::default()).unwrap();
        let h = &t.header;
        assert_eq!(h.model.name, "google/switch-base-8");
        assert_eq!(
            h.model.revision.as_deref(),
            Some("92fe2d22b024d9937146fe097ba3d3a7ba146e1b")
        );
        assert_eq!(h.model.layers.len(), 2);
        assert!(h
            .model
            .layers
            .iter()
            .all(|l| l.experts == 4 && l.top_k == 1));
        assert_eq!(h.sequences.len(), 1);
        let s = &h.sequences[0];
        assert_eq!(
            (s.name.as_str(), s.prefill_tokens, s.decode_tokens),
            ("domain-shift", 0, 3)
        );
        // token after token, layer after layer
        assert_eq!(t.sequences[0].decode.ids, [3, 0, 1, 2, 3, 3]);
        let source: serde_json::Value = serde_json::from_str(
            h.provenance
                .source
                .strip_prefix("StrataMoE RouterTrace v2 source: ")
                .unwrap(),
        )
        .unwrap();
        assert_eq!(source["workload"]["sha256"], "ac50");
        assert_eq!(source["capture"]["dtype"], "torch.float32");
        assert_eq!(source["software"]["transformersVersion"], "4.57.1");
        assert!(!h.provenance.synthetic);
        // the flags win over the file's names; --prompt-tokens leads with prompt tokens
        let mut o = RowImportOptions {
            prompt_tokens: Some(1),
            ..Default::default()
        };
        o.common.model_name = Some("switch".into());
        o.common.source = Some("here".into());
        let t = parse(CAPTURED, &o).unwrap();
        assert_eq!(t.header.model.name, "switch");
        assert_eq!(t.header.provenance.source, "here");
        assert_eq!(t.sequences[0].prefill.ids, [3, 0]);
        assert_eq!(t.sequences[0].decode.ids, [1, 2, 3, 3]);
    }

    #[test]
    fn a_synthetic_trace_stays_synthetic_with_its_generator() {
        let text = CAPTURED.replace(
            r#""kind": "captured","#,
            r#""kind": "synthetic", "generator": "stratamoe-lab/router-trace-v2","#,
        );
        let t = parse(&text, &RowImportOptions::default()).unwrap();
        assert!(t.header.provenance.synthetic);
        let g: serde_json::Value =
            serde_json::from_str(t.header.provenance.generator.as_deref().unwrap()).unwrap();
        assert_eq!(g["generator"], "stratamoe-lab/router-trace-v2");
        assert_eq!(g["seed"], 2339);
    }

    #[test]
    fn counts_that_disagree_with_the_selections_are_refused_by_place() {
        let o = RowImportOptions::default();
        let cases = [
            (
                CAPTURED.replace(r#""tokens": 3"#, r#""tokens": 4"#),
                "`tokens` says 4 but `selections` holds 3 tokens",
            ),
            (
                CAPTURED.replace("[[1], [2]]", "[[1]]"),
                "selections[1] holds 1 layers, not the 2",
            ),
            (
                CAPTURED.replace("[[1], [2]]", "[[1, 0], [2]]"),
                "selections[1][0] holds 2 experts, not the 1",
            ),
            (
                CAPTURED.replace("[[1], [2]]", "[[1], [4]]"),
                "selections[1][1] holds expert 4, outside 0..4",
            ),
            (
                CAPTURED.replace(r#""version": 2"#, r#""version": 1"#),
                "reads RouterTrace version 2",
            ),
        ];
        for (text, want) in cases {
            let e = parse(&text, &o).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
