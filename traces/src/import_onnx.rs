//! Importer for the onnx-genai router-trace JSON (`scripts/moe_expert_trace.json` of
//! github.com/justinchuby/onnx-genai), the layout of the bundled granite trace:
//!
//! ```text
//! { "model": str, "num_layers": L, "num_experts": E, "top_k": K,
//!   "prompts": { "<key>": { "prompt_len": P,
//!                           "prefill": [P][L][K] expert ids,
//!                           "decode":  [T][L][K] expert ids }, ... } }
//! ```
//!
//! Prompts keep their order in the file (serde_json's `preserve_order`). The JSON carries no
//! hidden or expert FFN size, revision, licence or date: [`ImportOptions`] supplies them.

use crate::error::TraceError;
use crate::model::{Header, ModelSpec, Provenance, SequenceInfo};
use crate::trace::{SequenceData, TokenBlock, Trace};
use serde::Deserialize;
use std::path::Path;

/// What the input file does not say, given by the user (`sim trace import` flags).
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Model name to record instead of the file's own `model` string.
    pub model_name: Option<String>,
    /// Model revision (commit or tag), when known.
    pub revision: Option<String>,
    /// Hidden size of the model (e.g. 1024 for granite-3.0-1b-a400m).
    pub hidden_size: Option<u32>,
    /// Intermediate size of one routed expert (e.g. 512 for granite-3.0-1b-a400m).
    pub expert_ffn: Option<u32>,
    /// Where the data came from; defaults to the input path.
    pub source: Option<String>,
    /// Licence / attribution notice to carry in the header.
    pub licence: Option<String>,
    /// Recording date (ISO 8601); defaults to "unknown" (the JSON has none, and using the
    /// conversion date would make imports non-reproducible).
    pub date: Option<String>,
    /// Shared (always-active) experts of every MoE layer (`--shared-experts`), counted in
    /// routed-expert sizes: 4 for Qwen1.5-MoE-A2.7B, whose one shared expert has
    /// `shared_expert_intermediate_size` 5632 = 4 x its routed 1408 in its config.json;
    /// absent leaves 0.
    pub shared_experts: Option<u16>,
    /// Weight matrices of one routed expert (`--expert-matrices`); absent means
    /// [`crate::GATED_EXPERT_MATRICES`] (gate, up, down).
    pub expert_matrices: Option<u8>,
    /// FFN size of one shared expert (`--shared-expert-ffn`), when not the routed size:
    /// 5632 for Qwen1.5-MoE-A2.7B (`shared_expert_intermediate_size`); makes the trace
    /// format version 3.
    pub shared_expert_ffn: Option<u32>,
    /// Model layers that are MoE but whose selections the input does not record
    /// (`--unrecorded-layers`), distinct from dense layers.
    pub unrecorded_layers: Vec<usize>,
}

impl ImportOptions {
    pub(crate) fn provenance(&self, file: &str, format: &str, labels: Vec<String>) -> Provenance {
        Provenance {
            source: self.source.clone().unwrap_or_else(|| file.to_string()),
            tool: format!(
                "moe-paging-sim traces {} ({format} importer)",
                env!("CARGO_PKG_VERSION")
            ),
            date: self.date.clone().unwrap_or_else(|| "unknown".to_string()),
            prompt_labels: labels,
            synthetic: false,
            generator: None,
            licence: self.licence.clone(),
        }
    }
}

#[derive(Deserialize)]
struct OnnxGenaiFile {
    model: String,
    num_layers: usize,
    num_experts: u16,
    top_k: u16,
    prompts: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct OnnxGenaiPrompt {
    prompt_len: u64,
    prefill: Vec<Vec<Vec<u16>>>,
    decode: Vec<Vec<Vec<u16>>>,
}

/// The result of an onnx-genai import: one trace per prompt (file order) and one with all.
#[derive(Clone, Debug, PartialEq)]
pub struct OnnxGenaiImport {
    /// (prompt key, single-sequence trace), in the file's order.
    pub prompts: Vec<(String, Trace)>,
    /// Every prompt as its own sequence, in the file's order.
    pub all: Trace,
}

/// Read and convert an onnx-genai JSON file.
pub fn import_onnx_genai_json(
    path: impl AsRef<Path>,
    opts: &ImportOptions,
) -> Result<OnnxGenaiImport, TraceError> {
    let file = path.as_ref().display().to_string();
    let text =
        std::fs::read_to_string(path.as_ref()).map_err(|e| TraceError::io(&file, "reading", e))?;
    parse_onnx_genai_json(&text, &file, opts)
}

/// Convert onnx-genai JSON text; `file` names it in errors and is the default source.
pub fn parse_onnx_genai_json(
    text: &str,
    file: &str,
    opts: &ImportOptions,
) -> Result<OnnxGenaiImport, TraceError> {
    let err = |location: String, detail: String| TraceError::Import {
        file: file.to_string(),
        location,
        detail,
    };
    let doc: OnnxGenaiFile = serde_json::from_str(text).map_err(|e| {
        err(
            format!("line {} column {}", e.line(), e.column()),
            format!("not the onnx-genai trace layout: {e}"),
        )
    })?;
    if doc.prompts.is_empty() {
        return Err(err("prompts".into(), "no prompts".into()));
    }
    if doc.num_layers > crate::format::MAX_LAYERS {
        return Err(err(
            "num_layers".into(),
            format!(
                "{} layers exceed the {} a trace may have",
                doc.num_layers,
                crate::format::MAX_LAYERS
            ),
        ));
    }
    let uniform = ModelSpec::uniform(&doc.model, doc.num_layers, doc.num_experts, doc.top_k);
    let model = opts
        .model(&doc.model, uniform.layers)
        .map_err(|d| err("options".into(), d))?;
    crate::format::validate_geometry(&model, file)?;
    let (layers, k) = (doc.num_layers, doc.top_k as usize);

    let mut infos = Vec::new();
    let mut datas = Vec::new();
    for (key, value) in &doc.prompts {
        let prompt: OnnxGenaiPrompt = serde_json::from_value(value.clone())
            .map_err(|e| err(format!("prompt {key:?}"), e.to_string()))?;
        if prompt.prefill.len() as u64 != prompt.prompt_len {
            return Err(err(
                format!("prompt {key:?}"),
                format!(
                    "prompt_len is {} but prefill has {} positions",
                    prompt.prompt_len,
                    prompt.prefill.len()
                ),
            ));
        }
        let flatten = |phase: &str, steps: &[Vec<Vec<u16>>]| -> Result<Vec<u16>, TraceError> {
            let mut ids = Vec::with_capacity(steps.len() * layers * k);
            for (t, step) in steps.iter().enumerate() {
                if step.len() != layers {
                    return Err(err(
                        format!("prompt {key:?} {phase}[{t}]"),
                        format!("{} layers, expected num_layers = {layers}", step.len()),
                    ));
                }
                for (l, sel) in step.iter().enumerate() {
                    if sel.len() != k {
                        return Err(err(
                            format!("prompt {key:?} {phase}[{t}][{l}]"),
                            format!("{} expert ids, expected top_k = {k}", sel.len()),
                        ));
                    }
                    ids.extend_from_slice(sel);
                }
            }
            Ok(ids)
        };
        infos.push(SequenceInfo {
            name: key.clone(),
            prefill_tokens: prompt.prefill.len() as u64,
            decode_tokens: prompt.decode.len() as u64,
        });
        datas.push(SequenceData {
            prefill: TokenBlock {
                ids: flatten("prefill", &prompt.prefill)?,
                weights: None,
            },
            decode: TokenBlock {
                ids: flatten("decode", &prompt.decode)?,
                weights: None,
            },
        });
    }
    let keys: Vec<String> = infos.iter().map(|i| i.name.clone()).collect();
    let all = Trace {
        header: Header {
            model: model.clone(),
            provenance: opts.provenance(file, "onnx-genai-json", keys.clone()),
            sequences: infos.clone(),
            has_weights: false,
            passes: None,
        },
        sequences: datas.clone(),
    };
    all.check().map_err(|d| err("prompts".into(), d))?;
    let prompts = keys
        .iter()
        .zip(infos.into_iter().zip(datas))
        .map(|(key, (info, data))| {
            let trace = Trace {
                header: Header {
                    model: model.clone(),
                    provenance: opts.provenance(file, "onnx-genai-json", vec![key.clone()]),
                    sequences: vec![info],
                    has_weights: false,
                    passes: None,
                },
                sequences: vec![data],
            };
            (key.clone(), trace)
        })
        .collect();
    Ok(OnnxGenaiImport { prompts, all })
}
