//! Model compute profile: how long the non-expert part of a layer and one expert take on the
//! GPU during decode, and how much VRAM non-expert weights and the KV cache hold.
//!
//! Decode is memory-bound: a decode-time FFN reads its weights once per step whatever the
//! batch, so time = bytes read / the profile's `device_read_bandwidth`. From the geometry
//! (assumptions, each overridable by a flag):
//! - non-expert weights ([`NonExpertParams`]) per layer = 4 x hidden^2 parameters (q, k, v, o
//!   projections of full multi-head attention; grouped-query models hold fewer k/v
//!   parameters, so this is an upper bound) + hidden x experts (router) + shared experts x
//!   expert parameters; for a trace whose model is a preset's, also the token embeddings and
//!   the LM head (vocabulary x hidden each; one matrix when tied), the dense layers' MLPs and
//!   the norms, from its config.json; at the experts' bytes per parameter. A trace of another
//!   model does not record its vocabulary: its embeddings and LM head are unknown and left
//!   out (`sim plan` says so; `--nonexpert-mib` gives the whole figure);
//! - every decode step reads all non-expert weights but the input embeddings (a lookup of one
//!   row per token); a tied LM head is the embedding matrix, read in full;
//! - KV cache per token per sequence: for a trace whose model is a preset's
//!   (`traces::presets::preset_of_model`), the preset's attention geometry from its
//!   config.json (grouped-query: 2 x KV heads x head size; latent attention: KV rank + RoPE
//!   size; x layers x 2 bytes, bf16); otherwise 2 (K and V) x hidden x 2 bytes x layers (full
//!   multi-head: an upper bound for grouped-query and latent attention);
//! - per MoE layer and step: non-expert compute = (non-expert bytes of all layers / MoE
//!   layers + the batch's KV bytes / MoE layers) / read bandwidth; expert compute = expert
//!   bytes / read bandwidth per distinct selected expert.
//! - where the profile holds the expert kernels' own fit (`expert_kernel_fixed` +
//!   `expert_kernel_bandwidth`, from `sim calibrate`'s kernel arms), a group's expert compute
//!   is `expert_kernel_fixed` + distinct experts x expert bytes / `expert_kernel_bandwidth`:
//!   small batch-1 layers are dominated by the launches' fixed part (36 µs for 20 MB on the
//!   H200, where bytes / read bandwidth gives 18 µs).
//! - a group whose tokens share experts (a verify chunk, a prompt chunk, a batch) has more
//!   routed slots than distinct experts; where the profile holds the repeat rate
//!   (`expert_kernel_repeat_bandwidth`) each repeated slot adds expert bytes / that rate: the
//!   kernel time surface of `crate::kernel_surface`. One token per step has no repeat.

use crate::kernel_surface::KernelSurface;
use profile::{ConstantName as C, Profile};
use traces::ModelSpec;

/// How compute is modelled (`--compute`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeMode {
    /// From the model geometry and the profile's device read bandwidth.
    #[default]
    Geometry,
    /// No compute at all: only paging (to compare with paging-only measurements).
    None,
}

impl ComputeMode {
    /// Every mode with its name (as serialized) and a one-line summary, for help texts.
    pub const ALL: [(ComputeMode, &'static str, &'static str); 2] = [
        (
            ComputeMode::Geometry,
            "geometry",
            "From the model geometry and the profile's device read bandwidth",
        ),
        (
            ComputeMode::None,
            "none",
            "No compute at all: only paging (to compare with paging-only measurements)",
        ),
    ];
}

/// Non-expert weights of a model by part, in parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct NonExpertParams {
    /// Attention projections of every layer (with their biases and norms where known).
    pub attention: f64,
    /// Routers (gates) of the MoE layers.
    pub routers: f64,
    /// Shared experts of the MoE layers, at their own FFN size.
    pub shared_experts: f64,
    /// MLPs of the dense layers.
    pub dense_mlps: f64,
    /// Layer norms and the final norm.
    pub norms: f64,
    /// Token embeddings; `None`: the vocabulary is unknown.
    pub embeddings: Option<f64>,
    /// The LM head (0 when tied to the embeddings); `None`: unknown.
    pub lm_head: Option<f64>,
}

impl NonExpertParams {
    /// Every part that is known.
    pub fn total(&self) -> f64 {
        self.attention
            + self.routers
            + self.shared_experts
            + self.dense_mlps
            + self.norms
            + self.embeddings.unwrap_or(0.0)
            + self.lm_head.unwrap_or(0.0)
    }

    /// What a decode step reads: everything but untied input embeddings, which are looked up
    /// one row per token (a tied LM head is the embedding matrix, read in full).
    pub fn read_per_step(&self) -> f64 {
        match self.lm_head {
            Some(head) if head > 0.0 => self.total() - self.embeddings.unwrap_or(0.0),
            _ => self.total(),
        }
    }

    /// From the trace header's geometry (hidden size and expert FFN), completed from the
    /// preset's config.json when the model is a preset's; `None` without the geometry.
    pub fn of_geometry(model: &ModelSpec) -> Option<NonExpertParams> {
        let h = model.hidden_size? as f64;
        let expert = model.expert_params()? as f64;
        let layers = model.layers.len() as f64;
        let shared: f64 = model.layers.iter().map(|l| l.shared_experts as f64).sum();
        let mut p = NonExpertParams {
            attention: layers * 4.0 * h * h,
            routers: model.layers.iter().map(|l| h * l.experts as f64).sum(),
            shared_experts: shared * model.shared_expert_params().map_or(expert, |p| p as f64),
            ..NonExpertParams::default()
        };
        if let Some(preset) = traces::presets::preset_of_model(model) {
            let (embeddings, lm_head) = preset.embedding_params();
            p.embeddings = Some(embeddings as f64);
            p.lm_head = Some(lm_head as f64);
            p.dense_mlps = preset.dense_mlp_params() as f64;
            // two RMSNorm weight vectors per layer and the final one
            p.norms = (2.0 * layers + 1.0) * h;
        }
        Some(p)
    }
}

impl NonExpertParams {
    /// The parts a config.json counts (`--model-config`), every one known.
    pub fn of_config(c: &traces::hf_config::ModelConfig) -> NonExpertParams {
        let n = &c.nonexpert;
        NonExpertParams {
            attention: n.attention as f64,
            routers: n.routers as f64,
            shared_experts: n.shared_experts as f64,
            dense_mlps: n.dense_mlps as f64,
            norms: n.norms as f64,
            embeddings: Some(n.embeddings as f64),
            lm_head: Some(n.lm_head as f64),
        }
    }
}

/// Check that the model of `config` is the trace's: the same layers, experts and top-k per
/// layer, and (where the header records them) the same hidden size and expert FFN.
pub fn check_config(
    config: &traces::hf_config::ModelConfig,
    model: &ModelSpec,
) -> anyhow::Result<()> {
    let c = &config.spec;
    let routed = |m: &ModelSpec| -> Vec<(u16, u16)> {
        m.layers.iter().map(|l| (l.experts, l.top_k)).collect()
    };
    let mismatch = |what: String| {
        anyhow::anyhow!(
            "--model-config ({}, model_type {}) is not the model of the trace '{}': {what}; give the config.json of the model the trace was recorded from",
            c.name,
            config.model_type,
            model.name
        )
    };
    if c.layers.len() != model.layers.len() {
        return Err(mismatch(format!(
            "{} layers in the config, {} in the trace",
            c.layers.len(),
            model.layers.len()
        )));
    }
    if routed(c) != routed(model) {
        return Err(mismatch(
            "the experts or top-k per layer differ".to_string(),
        ));
    }
    for (what, a, b) in [
        ("hidden size", c.hidden_size, model.hidden_size),
        ("expert FFN", c.expert_ffn, model.expert_ffn),
    ] {
        if let (Some(a), Some(b)) = (a, b) {
            if a != b {
                return Err(mismatch(format!(
                    "{what} {a} in the config, {b} in the trace"
                )));
            }
        }
    }
    Ok(())
}

/// User overrides of the geometry-derived figures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComputeOverrides {
    /// Non-expert compute per MoE layer per step, µs (KV read excluded).
    pub nonexpert_us: Option<f64>,
    /// Compute of one selected expert, µs.
    pub expert_us: Option<f64>,
    /// Non-expert weights resident for the whole model, MiB.
    pub nonexpert_mib: Option<f64>,
    /// KV cache bytes per token per sequence (all layers).
    pub kv_bytes_per_token: Option<u64>,
    /// The model's config.json (`--model-config`): its non-expert weights by part and its
    /// KV cache, in place of the geometry's estimates.
    pub model_config: Option<std::sync::Arc<traces::hf_config::ModelConfig>>,
    /// The dtype of the non-expert weights (`--nonexpert-dtype`); `None`: the experts'.
    pub nonexpert_dtype: Option<traces::DType>,
}

/// The resolved compute and memory figures for one run.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeModel {
    /// Non-expert compute per MoE layer per step, µs (weights only).
    pub nonexpert_us: f64,
    /// Compute per distinct selected expert, µs.
    pub expert_us: f64,
    /// Fixed part of a group's expert launches, µs (0 when the profile has no kernel fit or
    /// `--expert-us` overrides the per-expert figure).
    pub expert_group_fixed_us: f64,
    /// Compute per routed slot beyond the distinct experts (a slot repeating an expert the
    /// group already reads), µs: expert bytes / `expert_kernel_repeat_bandwidth`; 0 when the
    /// profile has no repeat fit, no kernel fit, or `--expert-us` overrides the figures.
    pub expert_repeat_us: f64,
    /// KV read time per token of KV per MoE layer, µs (0 with `--compute none`).
    pub kv_us_per_token: f64,
    /// Non-expert weights held in VRAM for the whole model, bytes.
    pub nonexpert_bytes: f64,
    /// Those weights by part (parameters), and their bytes per parameter; `None` when
    /// `--nonexpert-mib` gave the total.
    pub nonexpert_parts: Option<(NonExpertParams, f64)>,
    /// KV cache per token per sequence, bytes.
    pub kv_bytes_per_token: f64,
}

/// Bytes per parameter of `dtype`, its scales included (exact: every dtype's group of
/// parameters divides 2^20).
pub fn bytes_per_param(dtype: traces::DType) -> f64 {
    const N: u64 = 1 << 20;
    dtype.bytes_for(N) as f64 / N as f64
}

impl ComputeModel {
    /// Resolve from the geometry, the profile and the overrides. `expert_bytes` is the bytes
    /// of one expert as the mechanism sized it. Errors name what is missing and the flag
    /// that supplies it.
    pub fn new(
        mode: ComputeMode,
        model: &ModelSpec,
        expert_bytes: u64,
        profile: &Profile,
        o: &ComputeOverrides,
    ) -> anyhow::Result<ComputeModel> {
        let moe_layers = model.moe_layers().len().max(1) as f64;
        let layers = model.layers.len() as f64;
        let geometry = model
            .hidden_size
            .zip(model.expert_params())
            .map(|(h, params)| (h as f64, expert_bytes as f64 / params as f64));
        let need_geometry = |what: &str, flag: &str| {
            anyhow::anyhow!(
                "{what} needs the model's hidden size and expert FFN size, which the trace header of '{}' does not record; pass {flag}",
                model.name
            )
        };
        if let Some(c) = &o.model_config {
            check_config(c, model)?;
        }
        let (nonexpert_bytes, nonexpert_read, nonexpert_parts) = match o.nonexpert_mib {
            Some(mib) => (mib * crate::MIB, mib * crate::MIB, None),
            None => {
                let missing = || need_geometry("non-expert weight memory", "--nonexpert-mib");
                let bpp = match o.nonexpert_dtype {
                    Some(d) => bytes_per_param(d),
                    None => geometry.ok_or_else(missing)?.1,
                };
                let p = match &o.model_config {
                    Some(c) => NonExpertParams::of_config(c),
                    None => NonExpertParams::of_geometry(model).ok_or_else(missing)?,
                };
                (p.total() * bpp, p.read_per_step() * bpp, Some((p, bpp)))
            }
        };
        let config_kv = o.model_config.as_ref().map(|c| c.kv_bytes_per_token());
        let kv_bytes_per_token = match o.kv_bytes_per_token.or(config_kv) {
            Some(b) => b as f64,
            None => match traces::presets::preset_of_model(model) {
                Some(p) => p.kv_bytes_per_token() as f64,
                None => {
                    let (h, _) = geometry.ok_or_else(|| {
                        need_geometry("the KV cache size", "--kv-bytes-per-token")
                    })?;
                    2.0 * h * 2.0 * layers
                }
            },
        };
        if mode == ComputeMode::None {
            return Ok(ComputeModel {
                nonexpert_us: 0.0,
                expert_us: 0.0,
                expert_group_fixed_us: 0.0,
                expert_repeat_us: 0.0,
                kv_us_per_token: 0.0,
                nonexpert_bytes,
                nonexpert_parts,
                kv_bytes_per_token,
            });
        }
        let read = profile.require(
            C::DeviceReadBandwidth,
            "the compute model (--compute geometry); or give --compute none",
        )?;
        let nonexpert_us = o.nonexpert_us.unwrap_or(nonexpert_read / moe_layers / read);
        let surface = KernelSurface::per_slot(profile);
        let (expert_us, expert_group_fixed_us, expert_repeat_us) = match (o.expert_us, surface) {
            (Some(us), _) => (us, 0.0, 0.0),
            (None, Some(k)) => (
                k.distinct_us(expert_bytes),
                k.fixed_us,
                k.repeat_us(expert_bytes),
            ),
            (None, None) => (expert_bytes as f64 / read, 0.0, 0.0),
        };
        Ok(ComputeModel {
            nonexpert_us,
            expert_us,
            expert_group_fixed_us,
            expert_repeat_us,
            kv_us_per_token: kv_bytes_per_token / moe_layers / read,
            nonexpert_bytes,
            nonexpert_parts,
            kv_bytes_per_token,
        })
    }

    /// Everything zero: no compute and no non-expert memory (tests, paging-only harnesses).
    pub fn zero() -> ComputeModel {
        ComputeModel {
            nonexpert_us: 0.0,
            expert_us: 0.0,
            expert_group_fixed_us: 0.0,
            expert_repeat_us: 0.0,
            kv_us_per_token: 0.0,
            nonexpert_bytes: 0.0,
            nonexpert_parts: None,
            kv_bytes_per_token: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granite_geometry_by_hand() {
        // granite-3.0-1b-a400m: 24 layers, 32 experts, top-8, hidden 1024, expert FFN 512.
        let mut m = ModelSpec::uniform("granite", 24, 32, 8);
        m.hidden_size = Some(1024);
        m.expert_ffn = Some(512);
        let expert_bytes = 3 * 1024 * 512 * 2; // bf16: 3 MiB
        let p = profile::load("rtx4060-laptop-wddm").unwrap();
        let c = ComputeModel::new(
            ComputeMode::Geometry,
            &m,
            expert_bytes,
            &p,
            &ComputeOverrides::default(),
        )
        .unwrap();
        // 178 GB/s = 178000 B/µs; 3 MiB / 178000 = 17.67 µs
        assert!((c.expert_us - 3145728.0 / 178000.0).abs() < 1e-9);
        // per layer: 4 x 1024^2 + 1024 x 32 params x 2 B = 8454144 B
        assert!((c.nonexpert_bytes - 24.0 * 8454144.0).abs() < 1e-6);
        assert!((c.nonexpert_us - 8454144.0 / 178000.0).abs() < 1e-9);
        // KV: 2 x 1024 x 2 B x 24 layers = 98304 B per token
        assert_eq!(c.kv_bytes_per_token, 98304.0);
        let none = ComputeModel::new(
            ComputeMode::None,
            &m,
            expert_bytes,
            &p,
            &ComputeOverrides::default(),
        )
        .unwrap();
        assert_eq!((none.expert_us, none.nonexpert_us), (0.0, 0.0));
        assert_eq!(none.nonexpert_bytes, c.nonexpert_bytes);
    }

    #[test]
    fn shared_experts_are_sized_by_their_own_ffn_when_recorded() {
        // Qwen1.5-MoE-A2.7B's geometry (config.json): hidden 2048, 60 routed experts of FFN
        // 1408, one shared expert of FFN 5632; one layer here, bf16.
        let mut m = ModelSpec::uniform("qwen1.5-moe", 1, 60, 4);
        m.hidden_size = Some(2048);
        m.expert_ffn = Some(1408);
        m.layers[0].shared_experts = 1;
        let expert_bytes = 3 * 2048 * 1408 * 2;
        let p = profile::load("h200-linux").unwrap();
        let bytes = |m: &ModelSpec| {
            ComputeModel::new(ComputeMode::None, m, expert_bytes, &p, &Default::default())
                .unwrap()
                .nonexpert_bytes
        };
        // attention 4 x 2048^2 + router 2048 x 60, then the shared expert, all x 2 B
        let base = (4.0 * 2048.0 * 2048.0 + 2048.0 * 60.0) * 2.0;
        assert_eq!(bytes(&m), base + (3 * 2048 * 1408 * 2) as f64);
        m.shared_expert_ffn = Some(5632);
        // 3 x 2048 x 5632 x 2 B = 69,206,016 B: four routed experts' worth, not one
        assert_eq!(bytes(&m), base + 69_206_016.0);
    }

    #[test]
    fn a_preset_model_takes_its_kv_cache_from_its_attention_geometry() {
        let p = profile::load("h200-linux").unwrap();
        let kv = |model: &ModelSpec| {
            ComputeModel::new(ComputeMode::None, model, 1 << 20, &p, &Default::default())
                .unwrap()
                .kv_bytes_per_token
        };
        let ds = traces::presets::preset("deepseek-v3").unwrap().model_spec();
        // multi-head latent attention: (512 + 64) x 61 layers x 2 bytes
        assert_eq!(kv(&ds), 70_272.0);
        // renamed, the same geometry falls back to 2 x hidden x 2 bytes x layers
        let mut other = ds.clone();
        other.name = "DeepSeek-V3".into();
        assert_eq!(kv(&other), 2.0 * 7168.0 * 2.0 * 61.0);
    }

    /// Issue 42's second defect: the non-expert weights left out the token embeddings and the
    /// LM head. Qwen3-30B-A3B (config.json: hidden 2,048, 48 layers, 128 experts, vocabulary
    /// 151,936, untied) at bf16: attention 48 x 4 x 2,048^2 = 805,306,368 (the full multi-head
    /// upper bound), routers 48 x 2,048 x 128 = 12,582,912, embeddings and LM head 151,936 x
    /// 2,048 = 311,164,928 each, norms (2 x 48 + 1) x 2,048 = 198,656: 1,440,417,792
    /// parameters, 2,880,835,584 bytes. A step reads all of it but the input embeddings.
    #[test]
    fn a_preset_model_counts_its_embeddings_and_lm_head() {
        let p = profile::load("rtx4060-laptop-wddm").unwrap();
        let m = traces::presets::preset("qwen3-30b-a3b")
            .unwrap()
            .model_spec();
        let expert_bytes = 3 * 2048 * 768 * 2;
        let c = ComputeModel::new(
            ComputeMode::Geometry,
            &m,
            expert_bytes,
            &p,
            &Default::default(),
        )
        .unwrap();
        assert_eq!(c.nonexpert_bytes, 2_880_835_584.0);
        let read = 2_880_835_584.0 - 2.0 * 311_164_928.0;
        assert!((c.nonexpert_us - read / 48.0 / 178_000.0).abs() < 1e-9);
        let (parts, bpp) = c.nonexpert_parts.unwrap();
        assert_eq!(
            (parts.embeddings, parts.lm_head),
            (Some(311_164_928.0), Some(311_164_928.0))
        );
        assert_eq!(bpp, 2.0);
        // granite ties its LM head to the embeddings: one matrix of 49,155 x 1,024, read in full
        let g = traces::presets::preset("granite-3.0-1b-a400m")
            .unwrap()
            .model_spec();
        let c =
            ComputeModel::new(ComputeMode::Geometry, &g, 3 << 20, &p, &Default::default()).unwrap();
        let (parts, _) = c.nonexpert_parts.unwrap();
        assert_eq!(
            (parts.embeddings, parts.lm_head),
            (Some(50_334_720.0), Some(0.0))
        );
        assert_eq!(parts.read_per_step(), parts.total());
        // DeepSeek-V3's three dense layers hold 3 x 3 x 7,168 x 18,432 MLP parameters
        let d = traces::presets::preset("deepseek-v3").unwrap().model_spec();
        let parts = NonExpertParams::of_geometry(&d).unwrap();
        assert_eq!(parts.dense_mlps, 1_189_085_184.0);
        // a model the presets do not know: its vocabulary is unknown, not 0
        let mut other = m.clone();
        other.name = "my-qwen".into();
        let parts = NonExpertParams::of_geometry(&other).unwrap();
        assert_eq!((parts.embeddings, parts.lm_head), (None, None));
    }

    #[test]
    fn missing_geometry_names_the_flag() {
        let m = ModelSpec::uniform("synthetic", 2, 8, 2);
        let p = profile::load("rtx4060-laptop-wddm").unwrap();
        let e = ComputeModel::new(
            ComputeMode::None,
            &m,
            1 << 20,
            &p,
            &ComputeOverrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--nonexpert-mib"), "{e}");
    }
}
