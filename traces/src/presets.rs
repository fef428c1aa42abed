//! Model geometry presets for `sim trace gen`: the public geometry of well-known MoE models.
//!
//! Every number comes from the model's public `config.json` on the Hugging Face Hub (the file
//! named in [`Preset::source`]); the config key each field was read from is given on the field.
//! Dense layers are the leading layers without routed experts (`first_k_dense_replace` in the
//! DeepSeek-V3 family); all other layers are MoE layers with identical geometry.
//!
//! A preset also carries its attention geometry ([`Attention`]), which the trace header does
//! not record: the KV cache a token adds follows from it ([`Preset::kv_bytes_per_token`]), and
//! the timing model uses it for traces whose model is a preset's ([`preset_of_model`]).

use crate::model::{LayerSpec, ModelSpec};

/// How a model's attention layers cache keys and values, from its config.json.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// Multi-head or grouped-query attention: every layer caches a key and a value of
    /// `head_dim` elements for each of its `kv_heads` key-value heads.
    Grouped {
        /// Key-value heads (`num_key_value_heads`).
        kv_heads: u32,
        /// Elements per head (`head_dim`, or `hidden_size / num_attention_heads` for configs
        /// without it).
        head_dim: u32,
    },
    /// Multi-head latent attention (DeepSeek-V2/V3): every layer caches one compressed
    /// key-value latent of `kv_lora_rank` elements and the decoupled RoPE key of `rope_dim`
    /// elements shared by all heads (DeepSeek-V2 paper, section 2.1.3; the latent cache of
    /// DeepSeek's inference code).
    Latent {
        /// Rank of the key-value compression (`kv_lora_rank`).
        kv_lora_rank: u32,
        /// Elements of the decoupled RoPE key (`qk_rope_head_dim`).
        rope_dim: u32,
    },
}

impl Attention {
    /// Elements one token adds to one layer's KV cache.
    pub fn kv_elements_per_layer(&self) -> u64 {
        match *self {
            Attention::Grouped { kv_heads, head_dim } => 2 * kv_heads as u64 * head_dim as u64,
            Attention::Latent {
                kv_lora_rank,
                rope_dim,
            } => kv_lora_rank as u64 + rope_dim as u64,
        }
    }
}

/// Bytes of one cached key or value element at bf16, the dtype of these models' released
/// weights and of the KV cache of vLLM's and SGLang's default (`auto`) cache dtype.
pub const KV_BYTES_PER_ELEMENT: u64 = 2;

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
    /// The attention layers' KV cache geometry (the config keys are named on each variant).
    pub attention: Attention,
    /// Vocabulary (`vocab_size`): the token embeddings and the LM head are vocabulary x
    /// hidden size each.
    pub vocab_size: u32,
    /// Whether the LM head is the embedding matrix (`tie_word_embeddings`).
    pub tied_embeddings: bool,
    /// Intermediate size of the dense layers' MLP (`intermediate_size`; 0 without dense
    /// layers).
    pub dense_ffn: u32,
    /// A config.json shipped in `traces/data/configs/` whose derivation
    /// ([`crate::hf_config::parse`]) gives this geometry, checked by test; `None` where no
    /// public copy of the model's config.json was found.
    pub config: Option<&'static str>,
}

impl Preset {
    /// KV cache bytes one token adds to a sequence, over all layers, at
    /// [`KV_BYTES_PER_ELEMENT`]: elements per layer x layers x 2 bytes.
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.attention.kv_elements_per_layer() * self.layers as u64 * KV_BYTES_PER_ELEMENT
    }

    /// Parameters of the token embeddings and of the LM head (0 when tied).
    pub fn embedding_params(&self) -> (u64, u64) {
        let matrix = self.vocab_size as u64 * self.hidden_size as u64;
        (matrix, if self.tied_embeddings { 0 } else { matrix })
    }

    /// Parameters of the dense layers' gated MLPs (gate, up, down: 3 x hidden x FFN each).
    pub fn dense_mlp_params(&self) -> u64 {
        self.dense_layers as u64 * 3 * self.hidden_size as u64 * self.dense_ffn as u64
    }

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
            shared_expert_ffn: None,
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
        // num_key_value_heads 8; no head_dim key: hidden_size 1024 / num_attention_heads 16
        attention: Attention::Grouped {
            kv_heads: 8,
            head_dim: 64,
        },
        // vocab_size 49155, tie_word_embeddings true
        vocab_size: 49155,
        tied_embeddings: true,
        dense_ffn: 0,
        config: None,
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
        // num_key_value_heads 16 (full multi-head); hidden_size 2048 / num_attention_heads 16
        attention: Attention::Grouped {
            kv_heads: 16,
            head_dim: 128,
        },
        // vocab_size 50304, tie_word_embeddings false
        vocab_size: 50304,
        tied_embeddings: false,
        dense_ffn: 0,
        config: Some("olmoe-1b-7b-0924.json"),
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
        // num_key_value_heads 8, head_dim 64; half the layers are sliding-window (128 tokens)
        // and hold less for long sequences, so this is an upper bound
        attention: Attention::Grouped {
            kv_heads: 8,
            head_dim: 64,
        },
        // vocab_size 201088, tie_word_embeddings false
        vocab_size: 201088,
        tied_embeddings: false,
        dense_ffn: 0,
        config: Some("gpt-oss-20b.json"),
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
        // num_key_value_heads 4, head_dim 128
        attention: Attention::Grouped {
            kv_heads: 4,
            head_dim: 128,
        },
        // vocab_size 151936, tie_word_embeddings false
        vocab_size: 151936,
        tied_embeddings: false,
        dense_ffn: 0,
        config: Some("qwen3-30b-a3b.json"),
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
        // num_key_value_heads 8; no head_dim key: hidden_size 4096 / num_attention_heads 32
        attention: Attention::Grouped {
            kv_heads: 8,
            head_dim: 128,
        },
        // vocab_size 32000, tie_word_embeddings false
        vocab_size: 32000,
        tied_embeddings: false,
        dense_ffn: 0,
        config: Some("mixtral-8x7b-v0.1.json"),
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
        // kv_lora_rank 512, qk_rope_head_dim 64: (512 + 64) x 61 layers x 2 B = 70,272 B a token
        attention: Attention::Latent {
            kv_lora_rank: 512,
            rope_dim: 64,
        },
        // vocab_size 129280, tie_word_embeddings false, intermediate_size 18432
        vocab_size: 129280,
        tied_embeddings: false,
        dense_ffn: 18432,
        // DeepSeek-R1 is the DeepSeek-V3 architecture: the same geometry
        config: Some("deepseek-r1.json"),
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
        // kv_lora_rank 512, qk_rope_head_dim 64 (the DeepSeek-V3 architecture)
        attention: Attention::Latent {
            kv_lora_rank: 512,
            rope_dim: 64,
        },
        // vocab_size 163840, tie_word_embeddings false, intermediate_size 18432
        vocab_size: 163840,
        tied_embeddings: false,
        dense_ffn: 18432,
        config: None,
    },
];

/// The preset whose model is `model`: its Hugging Face repository (the name `sim trace gen
/// --preset` writes into a trace header), case-insensitive, with the same layer count and
/// hidden size. Traces recorded under another name (without the organisation, say) do not
/// match and keep the geometry's upper bound.
pub fn preset_of_model(model: &ModelSpec) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| {
        p.model.eq_ignore_ascii_case(&model.name)
            && p.layers == model.layers.len()
            && model.hidden_size == Some(p.hidden_size)
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_bytes_per_token_by_hand() {
        let kv = |name| preset(name).unwrap().kv_bytes_per_token();
        // grouped-query: 2 (K, V) x KV heads x head size x layers x 2 bytes
        assert_eq!(kv("granite-3.0-1b-a400m"), 2 * 8 * 64 * 24 * 2);
        assert_eq!(kv("olmoe-1b-7b"), 2 * 16 * 128 * 16 * 2);
        assert_eq!(kv("gpt-oss-20b"), 2 * 8 * 64 * 24 * 2);
        assert_eq!(kv("qwen3-30b-a3b"), 2 * 4 * 128 * 48 * 2);
        assert_eq!(kv("mixtral-8x7b"), 2 * 8 * 128 * 32 * 2);
        // latent: (KV rank + RoPE key) x layers x 2 bytes; about 70 KB, not 1.75 MB
        assert_eq!(kv("deepseek-v3"), 70_272);
        assert_eq!(kv("kimi-k2"), (512 + 64) * 61 * 2);
    }

    /// A preset backed by a shipped config.json is that config's derivation: layers, dense
    /// layers, experts, top-k, shared experts, hidden size, expert FFN, KV geometry,
    /// vocabulary, tied LM head and dense FFN all agree, so the two cannot drift.
    #[test]
    fn presets_equal_their_configs() {
        let mut backed = 0;
        for p in PRESETS {
            let Some(file) = p.config else { continue };
            backed += 1;
            let path = format!("{}/data/configs/{file}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(path).unwrap();
            let c = crate::hf_config::parse(&text, p.model).unwrap();
            let mut spec = p.model_spec();
            spec.shared_expert_ffn = c.spec.shared_expert_ffn;
            assert_eq!(c.spec, spec, "{}", p.name);
            assert_eq!(c.attention, p.attention, "{}", p.name);
            assert_eq!(c.vocab_size, p.vocab_size as u64, "{}", p.name);
            assert_eq!(c.tied_embeddings, p.tied_embeddings, "{}", p.name);
            assert_eq!(c.nonexpert.dense_mlps, p.dense_mlp_params(), "{}", p.name);
            assert_eq!(c.kv_bytes_per_token(), p.kv_bytes_per_token(), "{}", p.name);
        }
        assert_eq!(backed, 5);
    }

    #[test]
    fn a_generated_trace_names_its_preset_and_others_do_not() {
        for p in PRESETS {
            assert_eq!(preset_of_model(&p.model_spec()), Some(p));
        }
        let mut m = preset("granite-3.0-1b-a400m").unwrap().model_spec();
        m.name = "granite-3.0-1b-a400m-instruct".into();
        assert_eq!(preset_of_model(&m), None, "the bundled traces' name");
        let mut m = preset("qwen3-30b-a3b").unwrap().model_spec();
        m.layers.pop();
        assert_eq!(preset_of_model(&m), None, "another geometry under the name");
    }
}
