//! An imported trace's geometry from the model's config.json (`sim trace import
//! --model-config`): the config gives what a router log cannot (hidden size, expert FFN,
//! shared experts and their FFN, dense layers, the layer count) and must agree with what the
//! log does record (its MoE layers' experts and top-k).

use crate::hf_config::ModelConfig;
use crate::model::{LayerSpec, ModelSpec};

/// A config.json that disagrees with the log; the message names the config field.
#[derive(Debug, thiserror::Error)]
#[error("the config.json disagrees with the log: {0}")]
pub struct Mismatch(String);

/// The config field that gives the routed experts per layer, by family.
fn experts_field(model_type: &str) -> &'static str {
    match model_type {
        "mixtral" => "num_local_experts",
        "deepseek_v2" | "deepseek_v3" | "kimi_k2" => "n_routed_experts",
        _ => "num_experts",
    }
}

/// The config fields that make a layer dense, by family.
fn dense_field(model_type: &str) -> &'static str {
    match model_type {
        "deepseek_v2" | "deepseek_v3" | "kimi_k2" => "first_k_dense_replace",
        "qwen3_moe" | "qwen2_moe" => "mlp_only_layers / decoder_sparse_step",
        _ => "num_hidden_layers (every layer MoE)",
    }
}

/// Replace `model`'s geometry by `config`'s, keeping the log's name and revision. The log's
/// layer count must equal `num_hidden_layers` (an importer that would infer it is given the
/// config's); each layer with selections must be MoE in the config with its experts and
/// top-k; a layer without selections that the config makes MoE becomes an unrecorded MoE
/// layer.
pub fn apply(model: &mut ModelSpec, config: &ModelConfig) -> Result<(), Mismatch> {
    let want = &config.spec.layers;
    let have = model.layers.len();
    if have != want.len() {
        return Err(Mismatch(format!(
            "num_hidden_layers is {} but the log has {have} layers",
            want.len()
        )));
    }
    let mt = config.model_type.as_str();
    let mut layers = Vec::with_capacity(want.len());
    for (i, w) in want.iter().enumerate() {
        layers.push(match model.layers.get(i) {
            Some(h) if h.is_moe() || h.is_unrecorded_moe() => layer_of(i, h, w, mt)?,
            // no selections here: the config says whether the layer is dense or MoE
            _ if w.experts > 0 => LayerSpec {
                top_k: 0,
                ..w.clone()
            },
            _ => w.clone(),
        });
    }
    model.layers = layers;
    model.hidden_size = config.spec.hidden_size;
    model.expert_ffn = config.spec.expert_ffn;
    model.expert_matrices = config.spec.expert_matrices;
    model.shared_expert_ffn = config.spec.shared_expert_ffn;
    Ok(())
}

/// Layer `i`, MoE in the log (`h`), checked against the config's `w`.
fn layer_of(i: usize, h: &LayerSpec, w: &LayerSpec, mt: &str) -> Result<LayerSpec, Mismatch> {
    if w.experts == 0 {
        return Err(Mismatch(format!(
            "{} makes layer {i} dense but the log has experts there",
            dense_field(mt)
        )));
    }
    if h.experts != w.experts {
        return Err(Mismatch(format!(
            "{} is {} but the log's layer {i} has {} experts",
            experts_field(mt),
            w.experts,
            h.experts
        )));
    }
    if h.is_moe() && h.top_k != w.top_k {
        return Err(Mismatch(format!(
            "num_experts_per_tok is {} but the log's layer {i} selects {} experts per token",
            w.top_k, h.top_k
        )));
    }
    Ok(LayerSpec {
        top_k: h.top_k,
        ..w.clone()
    })
}
