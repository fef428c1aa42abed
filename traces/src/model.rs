//! The trace header: model geometry, provenance and the list of sequences.

use serde::{Deserialize, Serialize};

/// One transformer layer of the model as seen by the router.
///
/// A dense layer (no routed experts, such as DeepSeek-V3's first three) has `experts == 0`
/// and `top_k == 0`; it appears in the geometry but holds no selections in the payload.
/// A MoE layer whose selections were not recorded (format version 2 on) has `experts > 0`
/// and `top_k == 0`: its experts exist and take memory, but the trace has no accesses to them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerSpec {
    /// Routed experts in this layer (0 for a dense layer). At most 65,535 (ids are u16).
    pub experts: u16,
    /// Experts the router selects per token in this layer (0 for a dense layer).
    pub top_k: u16,
    /// Shared (always-active) experts of this layer; they are not part of the selections.
    pub shared_experts: u16,
}

impl LayerSpec {
    /// True when the layer has routed experts and therefore selections in the payload.
    pub fn is_moe(&self) -> bool {
        self.experts > 0 && self.top_k > 0
    }

    /// True for a MoE layer whose selections were not recorded (`experts > 0`, `top_k == 0`),
    /// which is distinct from a dense layer.
    pub fn is_unrecorded_moe(&self) -> bool {
        self.experts > 0 && self.top_k == 0
    }
}

/// Weight matrices of a gated (SwiGLU) expert: gate, up and down projections, each
/// hidden x expert FFN, as in Mixtral, Qwen-MoE, DeepSeek-MoE and granite-MoE (their
/// `modeling_*.py` expert modules). The default of [`ModelSpec::expert_matrices`].
pub const GATED_EXPERT_MATRICES: u8 = 3;

fn gated_expert_matrices() -> u8 {
    GATED_EXPERT_MATRICES
}

fn is_gated_expert(m: &u8) -> bool {
    *m == GATED_EXPERT_MATRICES
}

/// Model geometry recorded in the trace header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Model name, e.g. `granite-3.0-1b-a400m-instruct`.
    pub name: String,
    /// Model revision (commit or tag) when known.
    pub revision: Option<String>,
    /// Every transformer layer in order, dense layers included.
    pub layers: Vec<LayerSpec>,
    /// Hidden (model) dimension, when known; with `expert_ffn` it gives the expert size.
    pub hidden_size: Option<u32>,
    /// Intermediate (FFN) dimension of one routed expert, when known.
    pub expert_ffn: Option<u32>,
    /// Weight matrices of one routed expert, each hidden x expert FFN:
    /// [`GATED_EXPERT_MATRICES`] (3: gate, up, down) unless the model says otherwise, e.g. 2
    /// (up, down) for Switch Transformer's ReLU experts (`SwitchTransformersDenseActDense`:
    /// `wi` and `wo`). Stored from format version 2 on; version-1 files read as 3. In JSON
    /// it is left out when 3, so results written before it existed read the same.
    #[serde(
        default = "gated_expert_matrices",
        skip_serializing_if = "is_gated_expert"
    )]
    pub expert_matrices: u8,
    /// Intermediate (FFN) dimension of one shared expert, when it differs from the routed
    /// one's (Qwen1.5-MoE-A2.7B: `shared_expert_intermediate_size` 5632 against
    /// `moe_intermediate_size` 1408); absent, a shared expert has the routed size. Stored from
    /// format version 3 on; older files read as absent. Left out of JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_expert_ffn: Option<u32>,
}

impl ModelSpec {
    /// A model whose `layers` MoE layers all have `experts` experts and `top_k` selections.
    pub fn uniform(name: &str, layers: usize, experts: u16, top_k: u16) -> Self {
        ModelSpec {
            name: name.to_string(),
            revision: None,
            layers: vec![
                LayerSpec {
                    experts,
                    top_k,
                    shared_experts: 0
                };
                layers
            ],
            hidden_size: None,
            expert_ffn: None,
            expert_matrices: GATED_EXPERT_MATRICES,
            shared_expert_ffn: None,
        }
    }

    /// Indices (into `layers`) of the layers that have routed experts, in order.
    pub fn moe_layers(&self) -> Vec<usize> {
        self.layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_moe())
            .map(|(i, _)| i)
            .collect()
    }

    /// Parameters of one routed expert (`expert_matrices` x hidden x ffn; 3 x hidden x ffn
    /// for gate, up and down projections), when both sizes are known.
    pub fn expert_params(&self) -> Option<u64> {
        Some(u64::from(self.expert_matrices) * self.hidden_size? as u64 * self.expert_ffn? as u64)
    }

    /// Parameters of one shared expert: `expert_matrices` x hidden x the shared FFN, or the
    /// routed expert's when the shared FFN is not recorded; when the sizes are known.
    pub fn shared_expert_params(&self) -> Option<u64> {
        match self.shared_expert_ffn {
            Some(f) => Some(u64::from(self.expert_matrices) * self.hidden_size? as u64 * f as u64),
            None => self.expert_params(),
        }
    }
}

/// Weight data types an expert may be stored in, for deriving expert bytes from geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// bfloat16: 2 bytes per parameter.
    Bf16,
    /// IEEE half: 2 bytes per parameter.
    Fp16,
    /// 8-bit float (E4M3/E5M2): 1 byte per parameter.
    Fp8,
    /// 4-bit integers with one fp16 scale per group of 128 parameters (GPTQ/AWQ-style):
    /// 0.5 + 2/128 bytes per parameter.
    Int4,
    /// 4-bit integers without group scales: 0.5 bytes per parameter.
    Int4NoScale,
    /// NVIDIA NVFP4: 4-bit values with one FP8 scale per 16 values: 0.5 + 1/16 bytes per parameter.
    Nvfp4,
    /// OCP MXFP4: 4-bit values with one 8-bit shared exponent per 32 values: 0.5 + 1/32 bytes.
    Mxfp4,
}

impl DType {
    /// Bytes of `params` parameters stored in this dtype, scales included, rounded up to a byte.
    ///
    /// Sources: bf16/fp16/fp8 by definition; int4 group size 128 with fp16 scales as in
    /// GPTQ/AWQ defaults; NVFP4 block of 16 with an E4M3 scale (NVIDIA Blackwell docs);
    /// MXFP4 block of 32 with an E8M0 scale (OCP Microscaling Formats spec v1.0).
    pub fn bytes_for(self, params: u64) -> u64 {
        // bytes = params * num / den, exactly, rounded up
        let (num, den) = match self {
            DType::Bf16 | DType::Fp16 => (2, 1),
            DType::Fp8 => (1, 1),
            DType::Int4 => (64 + 2, 128), // 0.5 B + 2 B / 128
            DType::Int4NoScale => (1, 2),
            DType::Nvfp4 => (8 + 1, 16),  // 0.5 B + 1 B / 16
            DType::Mxfp4 => (16 + 1, 32), // 0.5 B + 1 B / 32
        };
        (params * num).div_ceil(den)
    }

    /// The `--dtype` name of this dtype, which [`DType::parse`] reads back.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::Fp16 => "fp16",
            DType::Fp8 => "fp8",
            DType::Int4 => "int4",
            DType::Int4NoScale => "int4-noscale",
            DType::Nvfp4 => "nvfp4",
            DType::Mxfp4 => "mxfp4",
        }
    }

    /// Parse the names accepted by `--dtype`: bf16, fp16, fp8, int4, int4-noscale, nvfp4, mxfp4.
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "bf16" => DType::Bf16,
            "fp16" | "f16" => DType::Fp16,
            "fp8" => DType::Fp8,
            "int4" => DType::Int4,
            "int4-noscale" => DType::Int4NoScale,
            "nvfp4" => DType::Nvfp4,
            "mxfp4" => DType::Mxfp4,
            _ => return None,
        })
    }
}

/// Where a trace came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Origin of the data, e.g. the source repository and file.
    pub source: String,
    /// Tool (and version) that recorded or converted it.
    pub tool: String,
    /// Date of recording or conversion, ISO 8601.
    pub date: String,
    /// Labels of the prompts, in sequence order where there is one per sequence.
    pub prompt_labels: Vec<String>,
    /// True for generated traces.
    pub synthetic: bool,
    /// Generator parameters (JSON text) and seed, for synthetic traces.
    pub generator: Option<String>,
    /// Licence / attribution notice that must travel with the data.
    pub licence: Option<String>,
}

/// One recorded sequence (one prompt and its continuation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceInfo {
    /// Name, e.g. the prompt key `english_prose`.
    pub name: String,
    /// Prompt tokens whose selections were recorded (prefill phase).
    pub prefill_tokens: u64,
    /// Generated tokens whose selections were recorded (decode phase).
    pub decode_tokens: u64,
}

/// The trace header: everything but the payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub model: ModelSpec,
    pub provenance: Provenance,
    pub sequences: Vec<SequenceInfo>,
    /// True when every selection is followed by its router weights (f32) in the payload.
    pub has_weights: bool,
    /// The engine's forward passes, when the source recorded them (format version 3): which
    /// rows each pass held, in order. `None` for a trace of sequences only. In JSON it is
    /// left out when `None`, so results written before it existed read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passes: Option<Vec<Pass>>,
}

/// One run of a forward pass: the next `tokens` tokens of sequence `sequence` (header
/// index), taken in payload order (prefill before decode). Across the passes, a sequence's
/// tokens are taken in order, each by exactly one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassRun {
    pub sequence: u32,
    pub tokens: u32,
}

/// One engine forward pass: the rows it computed (prompt-chunk rows and decode rows of any
/// number of requests), as runs of consecutive tokens of one sequence in the order the pass
/// held them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pass {
    pub runs: Vec<PassRun>,
}

impl Pass {
    /// Rows (tokens) the pass held.
    pub fn rows(&self) -> u64 {
        self.runs.iter().map(|r| u64::from(r.tokens)).sum()
    }
}

/// Check `passes` against `sequences`: every pass holds at least one row, every run names a
/// sequence and at least one token, and the passes take every sequence's tokens exactly
/// (their runs of a sequence sum to its prefill + decode tokens). The message names the
/// first pass or sequence that breaks it.
pub fn check_passes(passes: &[Pass], sequences: &[SequenceInfo]) -> Result<(), String> {
    if passes.is_empty() {
        return Err("the trace lists forward passes but none is given".into());
    }
    let mut taken = vec![0u64; sequences.len()];
    for (p, pass) in passes.iter().enumerate() {
        if pass.runs.is_empty() {
            return Err(format!("pass {p} holds no rows"));
        }
        for run in &pass.runs {
            let s = run.sequence as usize;
            let Some(t) = taken.get_mut(s) else {
                return Err(format!(
                    "pass {p} names sequence {s}, but the trace has {} sequences",
                    sequences.len()
                ));
            };
            if run.tokens == 0 {
                return Err(format!("pass {p} holds a run of 0 tokens of sequence {s}"));
            }
            *t = t.saturating_add(u64::from(run.tokens));
        }
    }
    for (s, (info, &t)) in sequences.iter().zip(&taken).enumerate() {
        let n = info.prefill_tokens.saturating_add(info.decode_tokens);
        if t != n {
            return Err(format!(
                "the passes hold {t} tokens of sequence {s} ({:?}), which has {n}",
                info.name
            ));
        }
    }
    Ok(())
}

impl Header {
    /// Tokens of the selected phases over all sequences, as the header declares them
    /// (saturating: a corrupt header cannot overflow it).
    pub fn tokens(&self, phases: crate::PhaseSel) -> u64 {
        let of = |s: &SequenceInfo| {
            let p = u64::from(phases.includes(crate::Phase::Prefill)) * s.prefill_tokens;
            let d = u64::from(phases.includes(crate::Phase::Decode)) * s.decode_tokens;
            p.saturating_add(d)
        };
        self.sequences.iter().map(of).fold(0, u64::saturating_add)
    }
}
