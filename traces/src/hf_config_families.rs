//! The config.json families whose layout differs most from the Llama shape of
//! [`crate::hf_config`]: GPT-OSS (biased projections, attention sinks, biased experts),
//! GLM-4.5 (DeepSeek-V3's routing over grouped-query attention) and Llama-4 (a shared
//! expert beside every routed layer, dense layers of their own FFN, and the multimodal
//! wrapper that nests the language model's fields under `text_config`).
//!
//! Each count follows the family's Transformers modelling code, named on the function.

use crate::hf_config::{
    build, gqa, gqa_attention, missing, Common, ConfigError, ModelConfig, Routing,
};
use serde::Deserialize;

/// GPT-OSS (`GptOssConfig`).
#[derive(Deserialize)]
struct GptOss {
    num_local_experts: u64,
    num_experts_per_tok: u64,
    intermediate_size: u64,
    attention_bias: bool,
    layer_types: Vec<String>,
}

/// GLM-4.5 MoE (`Glm4MoeConfig`).
#[derive(Deserialize)]
struct Glm4Moe {
    n_routed_experts: u64,
    num_experts_per_tok: u64,
    moe_intermediate_size: u64,
    n_shared_experts: u64,
    first_k_dense_replace: u64,
    intermediate_size: u64,
    attention_bias: bool,
    use_qk_norm: bool,
}

/// Llama-4's language model (`Llama4TextConfig`).
#[derive(Deserialize)]
struct Llama4Text {
    num_local_experts: u64,
    num_experts_per_tok: u64,
    /// The routed experts' and the shared expert's FFN.
    intermediate_size: u64,
    /// The dense layers' FFN.
    intermediate_size_mlp: u64,
    interleave_moe_layer_step: u64,
    #[serde(default)]
    moe_layers: Option<Vec<u64>>,
    attention_bias: bool,
}

/// GPT-OSS (`GptOssForCausalLM`): every layer MoE; q, k, v and o projections with biases
/// (`attention_bias`) and one attention-sink logit per head; a router with a bias per
/// expert; experts whose gate-up and down projections carry biases (2 x FFN + hidden per
/// expert). `layer_types` alternates sliding-window and full attention: the KV cache is
/// counted as if every layer held every token, an upper bound for contexts past the window.
pub(crate) fn gpt_oss(json: &str, c: &Common, name: &str) -> Result<ModelConfig, ConfigError> {
    let g: GptOss = serde_json::from_str(json)?;
    if g.layer_types.len() as u64 != c.num_hidden_layers {
        return Err(ConfigError::Unsupported {
            field: "layer_types",
            value: format!("{} entries", g.layer_types.len()),
            why: "needs one entry per layer (num_hidden_layers)",
        });
    }
    if let Some(t) = g
        .layer_types
        .iter()
        .find(|t| *t != "sliding_attention" && *t != "full_attention")
    {
        return Err(ConfigError::Unsupported {
            field: "layer_types",
            value: t.clone(),
            why: "only sliding_attention and full_attention are read",
        });
    }
    let h = c.hidden_size;
    let routing = Routing {
        moe: vec![true; c.num_hidden_layers as usize],
        experts: g.num_local_experts,
        top_k: g.num_experts_per_tok,
        shared_params: 0,
        shared_count: 0,
        // GptOssTopKRouter: a bias per expert
        router_extra: g.num_local_experts,
        dense_ffn: 0,
    };
    let (mut proj, norms) = gqa(json, c, g.attention_bias, false)?;
    if g.attention_bias {
        proj += h; // o_proj's bias
    }
    // GptOssAttention.sinks: one learned logit per query head
    proj += c.num_attention_heads;
    let mut out = build(
        c,
        "gpt_oss",
        name,
        routing,
        g.intermediate_size,
        (proj, norms),
    );
    out.attention = gqa_attention(json, c)?;
    // GptOssExperts: gate_up_proj_bias (2 x FFN) and down_proj_bias (hidden)
    out.expert_bias_params = 2 * g.intermediate_size + h;
    Ok(out)
}

/// GLM-4.5 (`Glm4MoeForCausalLM`): the first `first_k_dense_replace` layers dense (MLP of
/// `intermediate_size`), the rest MoE with `n_shared_experts` shared experts of the routed
/// FFN and a router with a score-correction bias per expert (`Glm4MoeTopkRouter`);
/// grouped-query attention with q, k, v biases when `attention_bias` (o_proj has none) and
/// per-head q/k RMSNorms when `use_qk_norm`. The multi-token-prediction layer
/// (`num_nextn_predict_layers`) is not counted, as for DeepSeek-V3.
pub(crate) fn glm4_moe(json: &str, c: &Common, name: &str) -> Result<ModelConfig, ConfigError> {
    let g: Glm4Moe = serde_json::from_str(json)?;
    let h = c.hidden_size;
    let routing = Routing {
        moe: (0..c.num_hidden_layers)
            .map(|i| i >= g.first_k_dense_replace)
            .collect(),
        experts: g.n_routed_experts,
        top_k: g.num_experts_per_tok,
        shared_params: g.n_shared_experts * 3 * h * g.moe_intermediate_size,
        shared_count: g.n_shared_experts,
        router_extra: g.n_routed_experts,
        dense_ffn: g.intermediate_size,
    };
    let attn = gqa(json, c, g.attention_bias, g.use_qk_norm)?;
    let mut out = build(c, "glm4_moe", name, routing, g.moe_intermediate_size, attn);
    out.attention = gqa_attention(json, c)?;
    Ok(out)
}

/// Llama-4's language model (`Llama4ForCausalLM`): MoE layers at `moe_layers` (when absent,
/// every `interleave_moe_layer_step`-th layer, as `Llama4TextConfig` derives it), each with
/// one shared expert of the routed FFN (`intermediate_size`) beside the routed ones; the
/// other layers dense, of `intermediate_size_mlp`; grouped-query attention whose q/k norm
/// (`use_qk_norm`) is a weightless L2 norm. Chunked attention (`attention_chunk_size`) on
/// the RoPE layers is counted as if every layer held every token: an upper bound.
pub(crate) fn llama4_text(json: &str, c: &Common, name: &str) -> Result<ModelConfig, ConfigError> {
    let l: Llama4Text = serde_json::from_str(json)?;
    let layers = c.num_hidden_layers;
    let moe_layers = match l.moe_layers {
        Some(m) => m,
        None if l.interleave_moe_layer_step == 0 => {
            return Err(ConfigError::Unsupported {
                field: "interleave_moe_layer_step",
                value: "0".into(),
                why: "without moe_layers, a step of 1 or more places the MoE layers",
            })
        }
        None => (l.interleave_moe_layer_step - 1..layers)
            .step_by(l.interleave_moe_layer_step as usize)
            .collect(),
    };
    if let Some(bad) = moe_layers.iter().find(|&&i| i >= layers) {
        return Err(ConfigError::Unsupported {
            field: "moe_layers",
            value: bad.to_string(),
            why: "names a layer past num_hidden_layers",
        });
    }
    let h = c.hidden_size;
    let routing = Routing {
        moe: (0..layers).map(|i| moe_layers.contains(&i)).collect(),
        experts: l.num_local_experts,
        top_k: l.num_experts_per_tok,
        shared_params: 3 * h * l.intermediate_size,
        shared_count: 1,
        router_extra: 0,
        dense_ffn: l.intermediate_size_mlp,
    };
    let (mut proj, norms) = gqa(json, c, l.attention_bias, false)?;
    if l.attention_bias {
        proj += h; // o_proj's bias
    }
    let mut out = build(
        c,
        "llama4",
        name,
        routing,
        l.intermediate_size,
        (proj, norms),
    );
    out.attention = gqa_attention(json, c)?;
    Ok(out)
}

/// The multimodal wrapper (`model_type` "llama4"): its `text_config` is the language model;
/// `tie_word_embeddings` is read there or, absent, from the wrapper. The vision encoder
/// (`vision_config`) is not counted: llama.cpp loads it from a separate projector file.
pub(crate) fn llama4_wrapper(json: &str, name: &str) -> Result<ModelConfig, ConfigError> {
    #[derive(Deserialize)]
    struct Wrapper {
        text_config: serde_json::Map<String, serde_json::Value>,
        #[serde(default)]
        tie_word_embeddings: Option<bool>,
    }
    let w: Wrapper = serde_json::from_str(json)?;
    let mut text = w.text_config;
    let kind = text
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if kind != "llama4_text" {
        return Err(ConfigError::Unsupported {
            field: "text_config.model_type",
            value: format!("{kind:?}"),
            why: "a llama4 config's text_config is read as llama4_text",
        });
    }
    if !text.contains_key("tie_word_embeddings") {
        let tied = w
            .tie_word_embeddings
            .ok_or_else(|| missing("tie_word_embeddings"))?;
        text.insert("tie_word_embeddings".into(), tied.into());
    }
    let text = serde_json::Value::Object(text).to_string();
    let c: Common = serde_json::from_str(&text)?;
    llama4_text(&text, &c, name)
}

#[cfg(test)]
mod tests {
    use crate::hf_config::parse;
    use crate::hf_config::tests::shipped;

    /// Mixtral-8x7B: 32 layers, hidden 4,096, 32 query and 8 KV heads of 128, 8 experts of
    /// FFN 14,336, top-2, vocabulary 32,000 untied. Mistral's announcement: 46.7 B parameters,
    /// 12.9 B used per token (https://mistral.ai/news/mixtral-of-experts/).
    #[test]
    fn mixtral_8x7b_counts_by_hand() {
        let m = shipped("mixtral-8x7b-v0.1.json");
        let h = 4096u64;
        let attention = 32 * (2 * h * h + 2 * h * 8 * 128);
        let expert = 3 * h * 14_336;
        let nonexpert = attention + 32 * h * 8 + (2 * 32 + 1) * h + 2 * 32_000 * h;
        assert_eq!(m.nonexpert.total(), nonexpert);
        assert_eq!(m.total_params(), nonexpert + 32 * 8 * expert);
        assert_eq!(m.total_params(), 46_702_792_704);
        assert_eq!(m.active_params(), nonexpert + 32 * 2 * expert);
        assert_eq!(m.active_params() / 100_000_000, 128, "12.9 B per token");
        assert_eq!(m.kv_bytes_per_token(), 2 * 8 * 128 * 32 * 2);
    }

    /// GPT-OSS-20B: 24 layers, hidden 2,880, 64 query and 8 KV heads of 64 with biases and a
    /// sink per head, 32 biased experts of FFN 2,880, top-4, routers with biases, vocabulary
    /// 201,088 untied. OpenAI's model card (table 1): 20.91 B total, 3.61 B active, 1.16 B
    /// of embedding and unembedding, 0.64 B attention; its "active" leaves out the
    /// embedding lookup but keeps the unembedding.
    #[test]
    fn gpt_oss_20b_counts_by_hand() {
        let m = shipped("gpt-oss-20b.json");
        let h = 2880u64;
        let (q, kv) = (64 * 64u64, 8 * 64u64);
        let attention = 24 * (h * q + q + 2 * (h * kv + kv) + q * h + h + 64);
        let expert = 3 * h * 2880 + 2 * 2880 + h;
        let routers = 24 * (h * 32 + 32);
        let embeddings = 201_088 * h;
        assert_eq!(m.nonexpert.attention, attention);
        assert_eq!(m.nonexpert.routers, routers);
        assert_eq!(m.expert_params(), expert);
        let nonexpert = attention + routers + 49 * h + 2 * embeddings;
        assert_eq!(m.nonexpert.total(), nonexpert);
        assert_eq!(m.total_params(), nonexpert + 24 * 32 * expert);
        assert_eq!(m.total_params() / 10_000_000, 2091, "20.91 B");
        assert_eq!(attention / 10_000_000, 63, "0.64 B attention");
        assert_eq!(2 * embeddings / 10_000_000, 115, "1.16 B embedding");
        let active = m.active_params() - embeddings;
        assert_eq!(active, nonexpert - embeddings + 24 * 4 * expert);
        assert_eq!(active / 10_000_000, 360, "3.61 B active");
        assert_eq!(m.kv_bytes_per_token(), 2 * 8 * 64 * 24 * 2);
        assert!(m
            .spec
            .layers
            .iter()
            .all(|l| l.experts == 32 && l.top_k == 4));
    }

    /// GLM-4.5-Air: 46 layers, the first dense (MLP 10,944), 128 routed experts of 1,408 and
    /// 1 shared, top-8, hidden 4,096, 96 query and 8 KV heads of 128 with q, k, v biases, no
    /// q/k norm, vocabulary 151,552 untied. The model card: 106 B total, 12 B active (the
    /// embedding and the LM head left out of the active figure).
    #[test]
    fn glm_4_5_air_counts_by_hand() {
        let m = shipped("glm-4.5-air.json");
        let h = 4096u64;
        let (q, kv) = (96 * 128u64, 8 * 128u64);
        let attention = 46 * (h * q + q + 2 * (h * kv + kv) + q * h);
        let expert = 3 * h * 1408;
        let embeddings = 151_552 * h;
        let nonexpert = attention
            + 45 * (h * 128 + 128)
            + 45 * expert
            + 3 * h * 10_944
            + (2 * 46 + 1) * h
            + 2 * embeddings;
        assert_eq!(m.nonexpert.total(), nonexpert);
        assert_eq!(m.nonexpert.shared_experts, 45 * expert);
        assert_eq!(m.total_params(), nonexpert + 45 * 128 * expert);
        assert_eq!(m.total_params() / 1_000_000_000, 106);
        let active = m.active_params() - 2 * embeddings;
        assert_eq!(active / 1_000_000_000, 12);
        assert_eq!(m.kv_bytes_per_token(), 2 * 8 * 128 * 46 * 2);
        assert_eq!(m.spec.layers[0].experts, 0);
        assert!(m.spec.layers[1..]
            .iter()
            .all(|l| l.experts == 128 && l.top_k == 8 && l.shared_experts == 1));
    }

    /// Llama-4-Scout's language model: 48 MoE layers, each with 16 routed experts and 1
    /// shared expert of FFN 8,192, top-1, hidden 5,120, 40 query and 8 KV heads of 128,
    /// vocabulary 202,048 untied. Meta's model card: 17 B active, 109 B total with the vision
    /// encoder, which is not counted here (the language model is 107.8 B).
    #[test]
    fn llama_4_scout_counts_by_hand() {
        let m = shipped("llama-4-scout-17b-16e.json");
        let h = 5120u64;
        let attention = 48 * (2 * h * 40 * 128 + 2 * h * 8 * 128);
        let expert = 3 * h * 8192;
        let embeddings = 202_048 * h;
        let nonexpert = attention + 48 * h * 16 + 48 * expert + (2 * 48 + 1) * h + 2 * embeddings;
        assert_eq!(m.nonexpert.total(), nonexpert);
        assert_eq!(m.total_params(), nonexpert + 48 * 16 * expert);
        assert_eq!(m.total_params() / 100_000_000, 1077);
        assert_eq!(m.active_params(), nonexpert + 48 * expert);
        assert_eq!(m.active_params() / 1_000_000_000, 17);
        assert_eq!(m.kv_bytes_per_token(), 2 * 8 * 128 * 48 * 2);
        assert!(m
            .spec
            .layers
            .iter()
            .all(|l| l.experts == 16 && l.top_k == 1 && l.shared_experts == 1));
    }

    /// Without `moe_layers`, Llama-4 places MoE layers every `interleave_moe_layer_step`
    /// (step 2: layers 1, 3, ...), the others dense of `intermediate_size_mlp`; a wrapper
    /// whose text_config is another model, or a missing field, is an error naming it.
    #[test]
    fn llama4_interleave_and_errors() {
        let path = format!(
            "{}/data/configs/llama-4-scout-17b-16e.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let t = v["text_config"].as_object_mut().unwrap();
        t.remove("moe_layers");
        t.insert("interleave_moe_layer_step".into(), 2.into());
        let m = parse(&v.to_string(), "x").unwrap();
        let moe: Vec<bool> = m.spec.layers.iter().map(|l| l.experts > 0).collect();
        assert_eq!(moe[..4], [false, true, false, true]);
        let h = 5120u64;
        assert_eq!(m.nonexpert.dense_mlps, 24 * 3 * h * 16_384);
        v["text_config"]["model_type"] = "mistral".into();
        let e = parse(&v.to_string(), "x").unwrap_err().to_string();
        assert!(e.contains("text_config.model_type"), "{e}");
        let without = text.replace("\"intermediate_size_mlp\": 16384,", "");
        let e = parse(&without, "x").unwrap_err().to_string();
        assert!(e.contains("intermediate_size_mlp"), "{e}");
        let gpt = std::fs::read_to_string(format!(
            "{}/data/configs/gpt-oss-20b.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
        .replacen("\"full_attention\"", "\"linear_attention\"", 1);
        let e = parse(&gpt, "x").unwrap_err().to_string();
        assert!(
            e.contains("layer_types") && e.contains("linear_attention"),
            "{e}"
        );
    }
}
