//! Model geometry presets for `sim trace gen`: the public geometry of well-known MoE models.
//!
//! Every number comes from the model's public `config.json` on the Hugging Face Hub (the file
//! named in [`Preset::source`]); the config key each field was read from is given on the field.
//! Dense layers are the leading layers without routed experts (`first_k_dense_replace` in the
//! DeepSeek-V3 family); all other layers are MoE layers with identical geometry.

use crate::model::{LayerSpec, ModelSpec};

/// The public geometry of one MoE model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// Name accepted by `--preset` (lowercase).
    pub name: &'static str,
    /// Model name written into the trace header (the Hugging Face repository).
    pub model: &'static str,
    /// The config.json the numbers come from.
    pub source: &'static str,
    /// Transformer layers (`num_hidden_layers`).
    pub layers: usize,
    /// Leading dense layers without routed experts (`first_k_dense_replace`; 0 when absent).
    pub dense_layers: usize,
    /// Routed experts per MoE layer (`num_local_experts` / `num_experts` / `n_routed_experts`).
    pub experts: u16,
    /// Routed experts selected per token (`num_experts_per_tok` / `experts_per_token`).
    pub top_k: u16,
    /// Shared, always-active experts per MoE layer (`n_shared_experts`; 0 when absent).
    pub shared_experts: u16,
    /// Hidden size (`hidden_size`).
    pub hidden_size: u32,
    /// Intermediate size of one routed expert (`moe_intermediate_size`, or
    /// `intermediate_size` for models whose experts use it).
    pub expert_ffn: u32,
}

impl Preset {
    /// The geometry as a [`ModelSpec`]: `dense_layers` dense layers, then MoE layers.
    pub fn model_spec(&self) -> ModelSpec {
        let layers = (0..self.layers)
            .map(|i| {
                if i < self.dense_layers {
                    LayerSpec {
                        experts: 0,
                        top_k: 0,
                        shared_experts: 0,
                    }
                } else {
                    LayerSpec {
                        experts: self.experts,
                        top_k: self.top_k,
                        shared_experts: self.shared_experts,
                    }
                }
            })
            .collect();
        ModelSpec {
            name: self.model.to_string(),
            revision: None,
            layers,
            hidden_size: Some(self.hidden_size),
            expert_ffn: Some(self.expert_ffn),
            expert_matrices: crate::model::GATED_EXPERT_MATRICES,
        }
    }
}

/// The presets, smallest first.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "granite-3.0-1b-a400m",
        model: "ibm-granite/granite-3.0-1b-a400m-instruct",
        source:
            "https://huggingface.co/ibm-granite/granite-3.0-1b-a400m-instruct/blob/main/config.json",
        layers: 24,
        dense_layers: 0,
        experts: 32,
        top_k: 8,
        shared_experts: 0,
        hidden_size: 1024,
        expert_ffn: 512,
    },
    Preset {
        name: "olmoe-1b-7b",
        model: "allenai/OLMoE-1B-7B-0924",
        source: "https://huggingface.co/allenai/OLMoE-1B-7B-0924/blob/main/config.json",
        layers: 16,
        dense_layers: 0,
        experts: 64,
        top_k: 8,
        shared_experts: 0,
        hidden_size: 2048,
        expert_ffn: 1024,
    },
    Preset {
        name: "gpt-oss-20b",
        model: "openai/gpt-oss-20b",
        source: "https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json",
        layers: 24,
        dense_layers: 0,
        experts: 32,
        top_k: 4,
        shared_experts: 0,
        hidden_size: 2880,
        expert_ffn: 2880,
    },
    Preset {
        name: "qwen3-30b-a3b",
        model: "Qwen/Qwen3-30B-A3B",
        source: "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
        layers: 48,
        dense_layers: 0,
        experts: 128,
        top_k: 8,
        shared_experts: 0,
        hidden_size: 2048,
        expert_ffn: 768,
    },
    Preset {
        name: "mixtral-8x7b",
        model: "mistralai/Mixtral-8x7B-v0.1",
        source: "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
        layers: 32,
        dense_layers: 0,
        experts: 8,
        top_k: 2,
        shared_experts: 0,
        hidden_size: 4096,
        expert_ffn: 14336,
    },
    Preset {
        name: "deepseek-v3",
        model: "deepseek-ai/DeepSeek-V3",
        source: "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
        layers: 61,
        dense_layers: 3,
        experts: 256,
        top_k: 8,
        shared_experts: 1,
        hidden_size: 7168,
        expert_ffn: 2048,
    },
    Preset {
        name: "kimi-k2",
        model: "moonshotai/Kimi-K2-Instruct",
        source: "https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json",
        layers: 61,
        dense_layers: 1,
        experts: 384,
        top_k: 8,
        shared_experts: 1,
        hidden_size: 7168,
        expert_ffn: 2048,
    },
];

/// The preset called `name` (case-insensitive), if any.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name))
}

/// The preset names, comma-separated, for error messages and `--help`.
pub fn preset_names() -> String {
    PRESETS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}
