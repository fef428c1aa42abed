//! A model's Hugging Face `config.json` (`--model-config`): its geometry (layers, dense layers,
//! routed and shared experts, top-k, hidden size, expert FFN), its attention's KV cache and
//! every non-expert weight (embeddings, LM head, attention projections, norms, routers, dense
//! MLPs, shared experts), counted from the config's numbers as the family's Transformers
//! modelling code lays the weights out.
//!
//! Each family reads a typed struct (serde): a field the counts need and the config lacks is
//! an error naming it (never a default; the one exception is Qwen-MoE's `mlp_only_layers`,
//! absent in Qwen1.5-MoE's config.json, which Transformers itself reads as empty), and a
//! `model_type` this module does not know is an error listing the ones it does. Fields that do not change the weights (RoPE, dropout, token
//! ids) are not read. Multi-token-prediction layers (`num_nextn_predict_layers`) are not
//! counted: Transformers does not load them and the inference engines skip them in decode.

use crate::model::{LayerSpec, ModelSpec, GATED_EXPERT_MATRICES};
use crate::presets::{Attention, KV_BYTES_PER_ELEMENT};
use serde::Deserialize;

/// The families read, by `model_type`, for error messages.
pub const FAMILIES: &str = "qwen3_moe (Qwen3-MoE), qwen2_moe (Qwen1.5-MoE, Qwen2-MoE), mixtral, deepseek_v2, deepseek_v3, kimi_k2 (DeepSeek-V3's architecture), olmoe, gpt_oss (GPT-OSS), glm4_moe (GLM-4.5), llama4 / llama4_text (Llama-4, its text model)";

/// Non-expert weights by part, in parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NonExpertCounts {
    /// Attention projections of every layer, with their biases and q/k norms.
    pub attention: u64,
    /// Routers of the MoE layers (and their score-correction biases, shared-expert gates).
    pub routers: u64,
    /// Shared experts of the MoE layers.
    pub shared_experts: u64,
    /// MLPs of the dense layers.
    pub dense_mlps: u64,
    /// Layer norms of every layer and the final norm.
    pub norms: u64,
    /// Token embeddings.
    pub embeddings: u64,
    /// The LM head; 0 when tied to the embeddings.
    pub lm_head: u64,
}

impl NonExpertCounts {
    pub fn total(&self) -> u64 {
        self.attention
            + self.routers
            + self.shared_experts
            + self.dense_mlps
            + self.norms
            + self.embeddings
            + self.lm_head
    }
}

/// What a config.json says about the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// The config's `model_type`.
    pub model_type: String,
    /// Layers (dense ones with no experts), routed experts, top-k, shared experts, hidden
    /// size and routed-expert FFN; named `name`.
    pub spec: ModelSpec,
    /// The KV cache geometry of every layer.
    pub attention: Attention,
    /// Vocabulary (`vocab_size`).
    pub vocab_size: u64,
    /// `tie_word_embeddings`.
    pub tied_embeddings: bool,
    /// Every weight but the routed experts.
    pub nonexpert: NonExpertCounts,
    /// Parameters of one shared expert (`0` without).
    pub shared_expert_params: u64,
    /// Bias parameters of one routed expert beyond its three matrices (GPT-OSS's gate, up
    /// and down biases: 2 x expert FFN + hidden); `0` for the bias-free families. A trace's
    /// expert size (its header's geometry) leaves them out.
    pub expert_bias_params: u64,
}

impl ModelConfig {
    /// Parameters of one routed expert (gate, up and down: 3 x hidden x expert FFN, and
    /// their biases where the family has them).
    pub fn expert_params(&self) -> u64 {
        self.spec.expert_params().unwrap_or(0) + self.expert_bias_params
    }

    /// Routed experts over all MoE layers.
    pub fn routed_experts(&self) -> u64 {
        self.spec.layers.iter().map(|l| l.experts as u64).sum()
    }

    /// Every parameter of the model.
    pub fn total_params(&self) -> u64 {
        self.nonexpert.total() + self.routed_experts() * self.expert_params()
    }

    /// Parameters one token reads, as the models' own "activated parameters" figures count
    /// them (Qwen3-30B-A3B's 3.3 B, DeepSeek-V3's 37 B): every non-expert weight, embeddings
    /// included, and top-k routed experts per MoE layer.
    pub fn active_params(&self) -> u64 {
        let top_k: u64 = self.spec.layers.iter().map(|l| l.top_k as u64).sum();
        self.nonexpert.total() + top_k * self.expert_params()
    }

    /// KV cache bytes one token adds over all layers, at [`KV_BYTES_PER_ELEMENT`].
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.attention.kv_elements_per_layer()
            * self.spec.layers.len() as u64
            * KV_BYTES_PER_ELEMENT
    }
}

/// An error reading a config.json.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("not a config.json this tool reads: {0}")]
    Json(#[from] serde_json::Error),
    #[error("model_type {0:?} is not one this tool reads; it reads {FAMILIES}")]
    UnknownFamily(String),
    #[error("{field} = {value}: {why}")]
    Unsupported {
        field: &'static str,
        value: String,
        why: &'static str,
    },
}

/// The only field read before the family is known.
#[derive(Deserialize)]
struct Family {
    model_type: String,
}

/// Fields every family shares.
#[derive(Deserialize)]
pub(crate) struct Common {
    pub(crate) hidden_size: u64,
    pub(crate) num_hidden_layers: u64,
    pub(crate) num_attention_heads: u64,
    pub(crate) vocab_size: u64,
    pub(crate) tie_word_embeddings: bool,
}

/// Grouped-query attention fields (`head_dim` absent: hidden size / heads, as Transformers
/// derives it).
#[derive(Deserialize)]
struct Gqa {
    num_key_value_heads: u64,
    #[serde(default)]
    head_dim: Option<u64>,
}

/// Qwen2-MoE / Qwen3-MoE routing (`Qwen2MoeConfig`, `Qwen3MoeConfig`).
#[derive(Deserialize)]
struct QwenMoe {
    num_experts: u64,
    num_experts_per_tok: u64,
    moe_intermediate_size: u64,
    intermediate_size: u64,
    decoder_sparse_step: u64,
    /// Absent: no layer is forced dense, as Transformers reads it (`Qwen2MoeConfig`,
    /// `Qwen3MoeConfig`: `mlp_only_layers = [] if mlp_only_layers is None`). Qwen1.5-MoE's
    /// config.json predates the field and has no `mlp_only_layers`.
    #[serde(default)]
    mlp_only_layers: Vec<u64>,
    /// Qwen2-MoE's one shared expert (absent in Qwen3-MoE).
    #[serde(default)]
    shared_expert_intermediate_size: Option<u64>,
    /// Qwen3-MoE's attention bias (Qwen2-MoE always has q, k, v biases).
    #[serde(default)]
    attention_bias: Option<bool>,
}

/// Mixtral routing (`MixtralConfig`).
#[derive(Deserialize)]
struct Mixtral {
    num_local_experts: u64,
    num_experts_per_tok: u64,
    intermediate_size: u64,
}

/// OLMoE routing (`OlmoeConfig`).
#[derive(Deserialize)]
struct Olmoe {
    num_experts: u64,
    num_experts_per_tok: u64,
    intermediate_size: u64,
}

/// DeepSeek-V2/V3 (and Kimi-K2) routing and multi-head latent attention.
#[derive(Deserialize)]
struct DeepSeek {
    n_routed_experts: u64,
    num_experts_per_tok: u64,
    moe_intermediate_size: u64,
    n_shared_experts: u64,
    first_k_dense_replace: u64,
    moe_layer_freq: u64,
    intermediate_size: u64,
    q_lora_rank: Option<u64>,
    kv_lora_rank: u64,
    qk_nope_head_dim: u64,
    qk_rope_head_dim: u64,
    v_head_dim: u64,
    /// `noaux_tc` adds a score-correction bias of one value per expert to each router.
    #[serde(default)]
    topk_method: Option<String>,
}

/// Read a config.json's text; `name` becomes the model's name.
pub fn parse(json: &str, name: &str) -> Result<ModelConfig, ConfigError> {
    let family: Family = serde_json::from_str(json)?;
    if family.model_type == "llama4" {
        // the multimodal wrapper: the language model's fields are in text_config
        return crate::hf_config_families::llama4_wrapper(json, name);
    }
    let c: Common = serde_json::from_str(json)?;
    match family.model_type.as_str() {
        "qwen3_moe" | "qwen2_moe" => qwen(json, &c, &family.model_type, name),
        "mixtral" => {
            let m: Mixtral = serde_json::from_str(json)?;
            let routing = Routing::uniform(&c, m.num_local_experts, m.num_experts_per_tok);
            let attn = gqa(json, &c, false, false)?;
            let mut out = build(&c, "mixtral", name, routing, m.intermediate_size, attn);
            out.attention = gqa_attention(json, &c)?;
            Ok(out)
        }
        "olmoe" => {
            let m: Olmoe = serde_json::from_str(json)?;
            let routing = Routing::uniform(&c, m.num_experts, m.num_experts_per_tok);
            // OLMoE normalises q over all heads and k over the KV heads (q_norm, k_norm)
            let mut attn = gqa(json, &c, false, false)?;
            attn.1 += c.hidden_size + kv_width(json, &c)?;
            let mut out = build(&c, "olmoe", name, routing, m.intermediate_size, attn);
            out.attention = gqa_attention(json, &c)?;
            Ok(out)
        }
        "deepseek_v2" | "deepseek_v3" | "kimi_k2" => deepseek(json, &c, &family.model_type, name),
        "gpt_oss" => crate::hf_config_families::gpt_oss(json, &c, name),
        "glm4_moe" => crate::hf_config_families::glm4_moe(json, &c, name),
        "llama4_text" => crate::hf_config_families::llama4_text(json, &c, name),
        other => Err(ConfigError::UnknownFamily(other.to_string())),
    }
}

/// Per layer: routed experts, top-k and shared-expert parameters (0: a dense layer), the
/// dense MLP's intermediate size, and the router's extra parameters per expert.
pub(crate) struct Routing {
    pub(crate) moe: Vec<bool>,
    pub(crate) experts: u64,
    pub(crate) top_k: u64,
    pub(crate) shared_params: u64,
    pub(crate) shared_count: u64,
    /// Parameters of a shared-expert gate or router bias per MoE layer beyond hidden x experts.
    pub(crate) router_extra: u64,
    pub(crate) dense_ffn: u64,
}

impl Routing {
    fn uniform(c: &Common, experts: u64, top_k: u64) -> Routing {
        Routing {
            moe: vec![true; c.num_hidden_layers as usize],
            experts,
            top_k,
            shared_params: 0,
            shared_count: 0,
            router_extra: 0,
            dense_ffn: 0,
        }
    }
}

/// Grouped-query attention parameters of one layer: (projections with `bias` on q, k, v,
/// q/k norms of `head_dim` when `qk_norm`).
pub(crate) fn gqa(
    json: &str,
    c: &Common,
    bias: bool,
    qk_norm: bool,
) -> Result<(u64, u64), ConfigError> {
    let g: Gqa = serde_json::from_str(json)?;
    let hd = g.head_dim.unwrap_or(c.hidden_size / c.num_attention_heads);
    let q = c.num_attention_heads * hd;
    let kv = g.num_key_value_heads * hd;
    let h = c.hidden_size;
    let mut proj = h * q + 2 * h * kv + q * h;
    if bias {
        proj += q + 2 * kv;
    }
    let norms = if qk_norm { 2 * hd } else { 0 };
    Ok((proj, norms))
}

/// Width of the K (or V) projection: KV heads x head size.
fn kv_width(json: &str, c: &Common) -> Result<u64, ConfigError> {
    let g: Gqa = serde_json::from_str(json)?;
    Ok(g.num_key_value_heads * g.head_dim.unwrap_or(c.hidden_size / c.num_attention_heads))
}

pub(crate) fn gqa_attention(json: &str, c: &Common) -> Result<Attention, ConfigError> {
    let g: Gqa = serde_json::from_str(json)?;
    Ok(Attention::Grouped {
        kv_heads: g.num_key_value_heads as u32,
        head_dim: g.head_dim.unwrap_or(c.hidden_size / c.num_attention_heads) as u32,
    })
}

fn qwen(json: &str, c: &Common, model_type: &str, name: &str) -> Result<ModelConfig, ConfigError> {
    let q: QwenMoe = serde_json::from_str(json)?;
    if q.decoder_sparse_step == 0 {
        return Err(ConfigError::Unsupported {
            field: "decoder_sparse_step",
            value: "0".into(),
            why: "every layer would be dense; a MoE config has a step of 1 or more",
        });
    }
    // Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: sparse where the layer is not in
    // mlp_only_layers and (index + 1) is a multiple of decoder_sparse_step
    let moe = (0..c.num_hidden_layers)
        .map(|i| !q.mlp_only_layers.contains(&i) && (i + 1) % q.decoder_sparse_step == 0)
        .collect();
    let h = c.hidden_size;
    let qwen2 = model_type == "qwen2_moe";
    let shared_ffn = if qwen2 {
        q.shared_expert_intermediate_size
            .ok_or_else(|| missing("shared_expert_intermediate_size"))?
    } else {
        0
    };
    let routing = Routing {
        moe,
        experts: q.num_experts,
        top_k: q.num_experts_per_tok,
        shared_params: 3 * h * shared_ffn,
        shared_count: u64::from(qwen2),
        // Qwen2-MoE's shared_expert_gate: hidden x 1
        router_extra: if qwen2 { h } else { 0 },
        dense_ffn: q.intermediate_size,
    };
    // Qwen2-MoE's q, k, v projections carry biases; Qwen3-MoE's follow attention_bias and
    // it normalises q and k per head (q_norm, k_norm of head_dim)
    let (bias, qk_norm) = if qwen2 {
        (true, false)
    } else {
        (
            q.attention_bias.ok_or_else(|| missing("attention_bias"))?,
            true,
        )
    };
    let attn = gqa(json, c, bias, qk_norm)?;
    let mut out = build(c, model_type, name, routing, q.moe_intermediate_size, attn);
    out.attention = gqa_attention(json, c)?;
    Ok(out)
}

fn deepseek(
    json: &str,
    c: &Common,
    model_type: &str,
    name: &str,
) -> Result<ModelConfig, ConfigError> {
    let d: DeepSeek = serde_json::from_str(json)?;
    if d.moe_layer_freq != 1 {
        return Err(ConfigError::Unsupported {
            field: "moe_layer_freq",
            value: d.moe_layer_freq.to_string(),
            why: "only 1 (every layer past first_k_dense_replace is MoE) is read",
        });
    }
    let h = c.hidden_size;
    let heads = c.num_attention_heads;
    let qk = d.qk_nope_head_dim + d.qk_rope_head_dim;
    // DeepseekV3Attention: q_a_proj, q_a_layernorm, q_b_proj (or q_proj without a q rank),
    // kv_a_proj_with_mqa (latent + RoPE key), kv_a_layernorm, kv_b_proj, o_proj
    let q = match d.q_lora_rank {
        Some(r) => h * r + r + r * heads * qk,
        None => h * heads * qk,
    };
    let kv = h * (d.kv_lora_rank + d.qk_rope_head_dim)
        + d.kv_lora_rank
        + d.kv_lora_rank * heads * (d.qk_nope_head_dim + d.v_head_dim);
    let o = heads * d.v_head_dim * h;
    let bias = u64::from(d.topk_method.as_deref() == Some("noaux_tc"));
    let routing = Routing {
        moe: (0..c.num_hidden_layers)
            .map(|i| i >= d.first_k_dense_replace)
            .collect(),
        experts: d.n_routed_experts,
        top_k: d.num_experts_per_tok,
        shared_params: d.n_shared_experts * 3 * h * d.moe_intermediate_size,
        shared_count: d.n_shared_experts,
        router_extra: bias * d.n_routed_experts,
        dense_ffn: d.intermediate_size,
    };
    let mut out = build(
        c,
        model_type,
        name,
        routing,
        d.moe_intermediate_size,
        (q + kv + o, 0),
    );
    out.attention = Attention::Latent {
        kv_lora_rank: d.kv_lora_rank as u32,
        rope_dim: d.qk_rope_head_dim as u32,
    };
    Ok(out)
}

/// One shared expert's FFN size when it differs from a routed expert's (Qwen2-MoE's one
/// shared expert of `shared_expert_intermediate_size`); `None` when they agree or there are
/// no shared experts, so the trace header keeps the routed size.
fn shared_ffn(r: &Routing, h: u64, expert_ffn: u64) -> Option<u32> {
    let per_expert = r.shared_params.checked_div(r.shared_count)?;
    let ffn = per_expert / (u64::from(GATED_EXPERT_MATRICES) * h);
    (ffn != expert_ffn).then_some(ffn as u32)
}

pub(crate) fn missing(field: &'static str) -> ConfigError {
    ConfigError::Json(serde::de::Error::missing_field(field))
}

/// The model from its common fields, routing, routed-expert FFN and per-layer attention
/// (projections, norms). Every layer has two RMSNorms (before attention, before the MLP),
/// plus the final norm. The KV geometry defaults to full multi-head attention over the
/// hidden size; families replace it with theirs.
pub(crate) fn build(
    c: &Common,
    model_type: &str,
    name: &str,
    r: Routing,
    expert_ffn: u64,
    (attn_proj, attn_norms): (u64, u64),
) -> ModelConfig {
    let h = c.hidden_size;
    let layers = c.num_hidden_layers;
    let moe_layers = r.moe.iter().filter(|&&m| m).count() as u64;
    let dense_layers = layers - moe_layers;
    let spec = ModelSpec {
        name: name.to_string(),
        revision: None,
        layers: r
            .moe
            .iter()
            .map(|&moe| LayerSpec {
                experts: if moe { r.experts as u16 } else { 0 },
                top_k: if moe { r.top_k as u16 } else { 0 },
                shared_experts: if moe { r.shared_count as u16 } else { 0 },
            })
            .collect(),
        hidden_size: Some(h as u32),
        expert_ffn: Some(expert_ffn as u32),
        expert_matrices: GATED_EXPERT_MATRICES,
        shared_expert_ffn: shared_ffn(&r, h, expert_ffn),
    };
    let embeddings = c.vocab_size * h;
    let nonexpert = NonExpertCounts {
        attention: layers * (attn_proj + attn_norms),
        routers: moe_layers * (h * r.experts + r.router_extra),
        shared_experts: moe_layers * r.shared_params,
        dense_mlps: dense_layers * 3 * h * r.dense_ffn,
        norms: (2 * layers + 1) * h,
        embeddings,
        lm_head: if c.tie_word_embeddings { 0 } else { embeddings },
    };
    ModelConfig {
        model_type: model_type.to_string(),
        spec,
        attention: Attention::Grouped {
            kv_heads: c.num_attention_heads as u32,
            head_dim: (h / c.num_attention_heads) as u32,
        },
        vocab_size: c.vocab_size,
        tied_embeddings: c.tie_word_embeddings,
        nonexpert,
        shared_expert_params: r.shared_params.checked_div(r.shared_count).unwrap_or(0),
        expert_bias_params: 0,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The shipped config `file` of `data/configs/`, parsed.
    pub(crate) fn shipped(file: &str) -> ModelConfig {
        let path = format!("{}/data/configs/{file}", env!("CARGO_MANIFEST_DIR"));
        parse(&std::fs::read_to_string(path).unwrap(), file).unwrap()
    }

    /// Qwen3-30B-A3B from its config.json: hidden 2,048, 48 layers, 32 query and 4 KV heads
    /// of 128, 128 experts of FFN 768, top-8, vocabulary 151,936 untied. About 30.5 B
    /// parameters, 3.3 B activated (the model card's figures).
    #[test]
    fn qwen3_30b_a3b_counts_by_hand() {
        let m = shipped("qwen3-30b-a3b.json");
        let h = 2048u64;
        let expert = 3 * h * 768;
        let attention = 48 * (h * 32 * 128 + 2 * h * 4 * 128 + 32 * 128 * h + 2 * 128);
        let embeddings = 151_936 * h;
        let nonexpert = attention + 48 * h * 128 + (2 * 48 + 1) * h + 2 * embeddings;
        assert_eq!(m.nonexpert.attention, attention);
        assert_eq!(m.nonexpert.embeddings, embeddings);
        assert_eq!(m.nonexpert.lm_head, embeddings);
        assert_eq!(m.nonexpert.total(), nonexpert);
        assert_eq!(m.expert_params(), expert);
        assert_eq!(m.total_params(), nonexpert + 48 * 128 * expert);
        assert_eq!(m.total_params(), 30_532_122_624);
        assert_eq!(m.active_params(), nonexpert + 48 * 8 * expert);
        assert_eq!(m.active_params() / 100_000_000, 33, "3.3 B activated");
        // KV: 2 x 4 heads x 128 x 48 layers x 2 bytes, as the preset's
        assert_eq!(m.kv_bytes_per_token(), 98_304);
        assert_eq!(
            m.kv_bytes_per_token(),
            crate::presets::preset("qwen3-30b-a3b")
                .unwrap()
                .kv_bytes_per_token()
        );
        assert_eq!(m.spec.layers.len(), 48);
        assert!(m
            .spec
            .layers
            .iter()
            .all(|l| l.experts == 128 && l.top_k == 8));
    }

    /// DeepSeek-R1 (the DeepSeek-V3 architecture) from its config.json: 61 layers, the first
    /// 3 dense (MLP 18,432), 256 routed experts of 2,048 and 1 shared, top-8, hidden 7,168,
    /// 128 heads of multi-head latent attention (q rank 1,536, KV rank 512, RoPE 64, no-RoPE
    /// 128, value 128), vocabulary 129,280 untied, noaux_tc routers with a bias per expert.
    /// About 671 B parameters and 37 B activated (the DeepSeek-V3 report's figures).
    #[test]
    fn deepseek_v3_architecture_counts_by_hand() {
        let m = shipped("deepseek-r1.json");
        let h = 7168u64;
        let q = h * 1536 + 1536 + 1536 * 128 * (128 + 64);
        let kv = h * (512 + 64) + 512 + 512 * 128 * (128 + 128);
        let o = 128 * 128 * h;
        let expert = 3 * h * 2048;
        let nonexpert = 61 * (q + kv + o)
            + 58 * (h * 256 + 256)
            + 58 * expert
            + 3 * 3 * h * 18_432
            + (2 * 61 + 1) * h
            + 2 * 129_280 * h;
        assert_eq!(m.nonexpert.total(), nonexpert);
        assert_eq!(m.nonexpert.shared_experts, 58 * expert);
        assert_eq!(m.nonexpert.dense_mlps, 3 * 3 * h * 18_432);
        assert_eq!(m.total_params(), nonexpert + 58 * 256 * expert);
        assert_eq!(m.total_params() / 1_000_000_000, 671);
        assert_eq!(m.active_params() / 1_000_000_000, 37);
        // the latent cache: (512 + 64) x 61 layers x 2 bytes, as the preset's
        assert_eq!(m.kv_bytes_per_token(), 70_272);
        let dense = m.spec.layers.iter().take_while(|l| l.experts == 0).count();
        assert_eq!(dense, 3);
        assert!(m.spec.layers[3..]
            .iter()
            .all(|l| l.experts == 256 && l.top_k == 8 && l.shared_experts == 1));
    }

    /// OLMoE-1B-7B-0924 from its config.json: 16 layers, hidden 2,048, 16 query and 16 KV
    /// heads of 128 with q and k norms over the whole projection (`q_norm` of the hidden
    /// size, `k_norm` of KV heads x head size), 64 experts of FFN 1,024, top-8, vocabulary
    /// 50,304 untied. The OLMoE paper (arXiv 2409.02060): 6.9 B total, 1.3 B active, both
    /// with the embeddings. The Hub's model.safetensors.index.json (copied with the config,
    /// see data/configs/README.md) holds 13,838,323,712 bytes of bf16 weights: 6,919,161,856
    /// parameters, this count exactly.
    #[test]
    fn olmoe_1b_7b_counts_by_hand() {
        let m = shipped("olmoe-1b-7b-0924.json");
        let h = 2048u64;
        let attention = 16 * (4 * h * h + h + 16 * 128);
        let expert = 3 * h * 1024;
        let embeddings = 50_304 * h;
        let nonexpert = attention + 16 * h * 64 + (2 * 16 + 1) * h + 2 * embeddings;
        assert_eq!(m.nonexpert.attention, attention);
        assert_eq!(m.nonexpert.lm_head, embeddings);
        assert_eq!(m.nonexpert.total(), nonexpert);
        assert_eq!(m.expert_params(), expert);
        assert_eq!(m.total_params(), nonexpert + 16 * 64 * expert);
        assert_eq!(m.total_params(), 13_838_323_712 / 2);
        assert_eq!((m.total_params() + 50_000_000) / 100_000_000, 69, "6.9 B");
        assert_eq!(m.active_params(), nonexpert + 16 * 8 * expert);
        assert_eq!((m.active_params() + 50_000_000) / 100_000_000, 13, "1.3 B");
        assert_eq!(m.kv_bytes_per_token(), 2 * 16 * 128 * 16 * 2);
        assert_eq!(m.spec.layers.len(), 16);
        assert!(m
            .spec
            .layers
            .iter()
            .all(|l| l.experts == 64 && l.top_k == 8));
    }

    /// Qwen1.5-MoE-A2.7B from its config.json: 24 layers, hidden 2,048, 16 query and 16 KV
    /// heads of 128 with q, k, v biases, 60 routed experts of FFN 1,408, top-4, one shared
    /// expert of FFN 5,632 with its gate (hidden x 1), vocabulary 151,936 untied. The model
    /// card (https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B): 14.3 B total, 2.7 B activated,
    /// both with the embeddings (without them, 2.07 B activated). The Hub's
    /// model.safetensors.index.json holds 28,631,568,384 bytes of bf16 weights: this count
    /// exactly. The config has no `mlp_only_layers` (Transformers reads it as empty): every
    /// layer is MoE; given `[0]`, layer 0 becomes a dense MLP of `intermediate_size`.
    #[test]
    fn qwen1_5_moe_a2_7b_counts_by_hand() {
        let m = shipped("qwen1.5-moe-a2.7b.json");
        let h = 2048u64;
        let attention = 24 * (4 * h * h + 3 * h);
        let expert = 3 * h * 1408;
        let shared = 3 * h * 5632;
        let embeddings = 151_936 * h;
        let nonexpert =
            attention + 24 * (h * 60 + h) + 24 * shared + (2 * 24 + 1) * h + 2 * embeddings;
        assert_eq!(m.nonexpert.attention, attention);
        assert_eq!(m.nonexpert.shared_experts, 24 * shared);
        assert_eq!(m.nonexpert.dense_mlps, 0);
        assert_eq!(m.nonexpert.total(), nonexpert);
        assert_eq!(m.expert_params(), expert);
        assert_eq!(m.total_params(), nonexpert + 24 * 60 * expert);
        assert_eq!(m.total_params(), 28_631_568_384 / 2);
        assert_eq!((m.total_params() + 50_000_000) / 100_000_000, 143, "14.3 B");
        assert_eq!(m.active_params(), nonexpert + 24 * 4 * expert);
        assert_eq!((m.active_params() + 50_000_000) / 100_000_000, 27, "2.7 B");
        let without = m.active_params() - 2 * embeddings;
        assert_eq!(without / 10_000_000, 206, "2.07 B");
        assert_eq!(m.kv_bytes_per_token(), 2 * 16 * 128 * 24 * 2);
        assert_eq!(m.spec.shared_expert_ffn, Some(5632));
        assert!(m
            .spec
            .layers
            .iter()
            .all(|l| l.experts == 60 && l.top_k == 4 && l.shared_experts == 1));
        let path = format!(
            "{}/data/configs/qwen1.5-moe-a2.7b.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).unwrap();
        let first_dense = text.replace(
            "\"decoder_sparse_step\": 1,",
            "\"decoder_sparse_step\": 1, \"mlp_only_layers\": [0],",
        );
        let d = parse(&first_dense, "x").unwrap();
        assert_eq!(d.spec.layers[0].experts, 0);
        assert_eq!(d.nonexpert.dense_mlps, 3 * h * 5632);
        // layer 0 loses its 60 experts, router and shared-expert gate; its dense MLP has
        // the shared expert's size
        assert_eq!(d.total_params(), m.total_params() - 60 * expert - 61 * h);
    }

    #[test]
    fn a_missing_field_or_unknown_family_is_named() {
        let text = std::fs::read_to_string(format!(
            "{}/data/configs/qwen3-30b-a3b.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let without = text.replace("\"tie_word_embeddings\": false,", "");
        let e = parse(&without, "x").unwrap_err().to_string();
        assert!(e.contains("tie_word_embeddings"), "{e}");
        let without = text.replace("\"moe_intermediate_size\": 768,", "");
        let e = parse(&without, "x").unwrap_err().to_string();
        assert!(e.contains("moe_intermediate_size"), "{e}");
        let other = text.replace("qwen3_moe", "jamba");
        let e = parse(&other, "x").unwrap_err().to_string();
        assert!(e.contains("\"jamba\"") && e.contains("qwen3_moe"), "{e}");
    }
}
