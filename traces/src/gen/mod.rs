//! Synthetic router traces (`sim trace gen`): labelled traces for models nobody has recorded.
//!
//! # The model of a router
//! Each MoE layer L has a fixed popularity ranking of its experts: a random permutation
//! (drawn from the seed) maps popularity rank r (0 = hottest) to an expert id, and a fresh
//! draw picks rank r with probability proportional to `1 / (r+1)^skew_L` (a Zipf law with
//! exponent `skew_L`; 0 = uniform). For every token, layer L's selection of `k_L` distinct
//! experts is built slot by slot:
//! 0. **always-on experts**: the `always_on_L` most popular experts of layer L (none unless
//!    given) take the first slots of every selection;
//! 1. **temporal locality**: each other expert of the previous token's selection in layer L
//!    (same sequence) is kept, independently, with probability `locality_L`;
//! 2. **cross-layer correlation**: each remaining slot i (0-based, `i < k_{L-1}`) is, with
//!    probability `cross_layer`, the *successor* of slot i of layer L-1's selection for this
//!    token: the expert of layer L whose popularity rank equals that expert's rank in layer L-1
//!    (scaled by `E_L / E_{L-1}` when the expert counts differ). Mapping rank to rank keeps each
//!    layer's popularity law intact while making consecutive layers co-select;
//! 3. **token archetypes** (none unless given, see [`Archetypes`]): before step 2, each free
//!    slot copies, with probability `share`, the next expert of the token's archetype in
//!    layer L that is not yet in the selection. An archetype is a template token with one
//!    selection per MoE layer, drawn once from each layer's Zipf law (spread so that a
//!    layer's first `E_L / k_L` archetypes hold disjoint experts); every token picks one
//!    uniformly, and that choice is shared by all its layers. Tokens of one archetype
//!    co-select the same experts from layer to layer, so the next layer becomes predictable
//!    from the current one (`next_layer_predictability`), which the slot-wise successor of
//!    step 2 cannot raise far (it competes with the locality's reused experts);
//! 4. every slot still empty (or whose successor was already chosen) is a fresh Zipf draw
//!    **without replacement**: ranks are drawn from an alias table and redrawn while they hit
//!    an expert already in the selection; after 64 misses in one selection (very high skew, or
//!    top-k near the expert count) the rest of that selection is drawn exactly from the
//!    remaining weights (a Fenwick tree, O(log E) per draw), so the law is exact either way.
//!
//! All randomness comes from one `rand_pcg::Pcg64` seeded with `seed`, consumed in a fixed
//! order (the archetypes are drawn after every layer's tables, and a token's archetype before
//! its first layer, so a generator without archetypes draws exactly what it drew before they
//! existed), so the same model, parameters and seed give a bit-identical trace. Large traces
//! are written token by token through [`TraceWriter`]; nothing proportional to the token count
//! is held in memory.
//!
//! The fitting of skew and locality to a real trace lives in [`fit`]; that of the always-on
//! counts, the cross-layer probability and the archetypes in [`fit_cross`].

pub mod fit;
pub mod fit_cross;
mod remaining;

use crate::error::TraceError;
use crate::model::{Header, ModelSpec, Provenance, SequenceInfo};
use crate::trace::{KeySpace, SequenceData, TokenBlock, Trace};
use crate::writer::TraceWriter;
use rand::distributions::Distribution;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::WeightedAliasIndex;
use rand_pcg::Pcg64;
use remaining::RemainingWeights;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Fresh draws that may hit an already-chosen expert before the exact fallback is used.
const MAX_REJECTIONS: usize = 64;

/// Largest accepted Zipf exponent: beyond it the hottest expert takes all but ~1e-19 of the
/// draws at 32 experts, so larger values only cost time in the fallback path.
pub const MAX_SKEW: f64 = 64.0;

/// Errors of the generator's parameters.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// A parameter out of its range; the message names it and the range.
    #[error("{0}")]
    Param(String),
    /// Writing the trace failed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The tables the geometry needs do not fit in the memory available.
    #[error(transparent)]
    Memory(#[from] crate::resources::ResourceError),
}

/// Bytes the generator holds per expert of each MoE layer: the popularity permutation and its
/// inverse (u16 each, 2 + 2), the Zipf weights (f64, 8), `rand_distr`'s alias table (an f64
/// odds and a u32 alias per entry, 8 + 4) and the chosen flags (bool, 1). The element sizes of
/// those tables' types.
const TABLE_BYTES_PER_EXPERT: u128 = 25;
/// Bytes per expert of the exact fallback's tables (a Fenwick tree and the weights, f64 each),
/// held for one layer at a time.
const FALLBACK_BYTES_PER_EXPERT: u128 = 16;
/// Bytes per expert of the writer's selection checker (a u32 stamp per id of the largest layer).
const CHECKER_BYTES_PER_EXPERT: u128 = 4;
/// Bytes per id of one token record: the generator's record and each layer's previous
/// selection (u16, 2 + 2) and the writer's scratch, reserved for ids and weights (2 + 4).
const RECORD_BYTES_PER_ID: u128 = 10;
/// Bytes per sequence, an upper bound: its header entry (`SequenceInfo`, 40 bytes, and its
/// name `synthetic-N`, at most 30 bytes of heap) and that entry encoded twice by the writer (the
/// encoded header and the preamble copy, under 30 bytes each).
const BYTES_PER_SEQUENCE: u128 = 128;
/// Fixed bytes: the rest of the header (provenance with the parameters as JSON) encoded and
/// copied, paths and the output file's handles; an upper bound for parameters of a few hundred
/// values.
const FIXED_BYTES: u128 = 64 << 10;
/// Fixed bytes per MoE layer, an upper bound: the generator's per-layer state (eight vectors'
/// headers, the alias table's, three scalars: under 256 bytes on 64-bit targets) with the key
/// space's and the header's entries for the layer.
const BYTES_PER_MOE_LAYER: u128 = 384;

/// Memory the generator needs for `model` before it draws a token, bytes: its tables, the
/// fallback's, one token record, the archetypes' records (when given), and the writer's
/// checker and 4 MiB output buffer. With `in_memory`, also the ids of every token of
/// `params` (what [`generate_trace`] holds).
/// Computed in u128, so no geometry or token count overflows it.
pub fn memory_bytes(model: &ModelSpec, params: &GenParams, in_memory: bool) -> u128 {
    let ks = KeySpace::new(model);
    let experts: u128 = ks.experts.iter().map(|&e| e as u128).sum();
    let widest = ks.experts.iter().copied().max().unwrap_or(0) as u128;
    let ids = ks.ids_per_token() as u128;
    let mut need = experts * TABLE_BYTES_PER_EXPERT
        + widest * (FALLBACK_BYTES_PER_EXPERT + CHECKER_BYTES_PER_EXPERT)
        + ids * RECORD_BYTES_PER_ID
        + ks.num_moe_layers() as u128 * BYTES_PER_MOE_LAYER
        + params.sequences as u128 * BYTES_PER_SEQUENCE
        + FIXED_BYTES
        + crate::writer::WRITE_BUFFER_BYTES as u128;
    if let Some(a) = &params.archetypes {
        // the records, and the spreading's flags while they are drawn (a bool per expert)
        need += a.count as u128 * ids * crate::format::ID_BYTES as u128 + experts;
    }
    if in_memory {
        let tokens = params.sequences as u128 * params.tokens as u128;
        need += tokens * ids * crate::format::ID_BYTES as u128;
    }
    need
}

/// Refuse a geometry (and, `in_memory`, a token count) whose tables would not fit in the
/// memory available now, before anything is allocated.
fn check_memory(model: &ModelSpec, params: &GenParams, in_memory: bool) -> Result<(), GenError> {
    let ks = KeySpace::new(model);
    let what = format!(
        "the generator's tables for {} MoE layers of up to {} experts{}",
        ks.num_moe_layers(),
        ks.experts.iter().max().unwrap_or(&0),
        if in_memory {
            " and the whole trace"
        } else {
            ""
        }
    );
    crate::resources::check_memory(
        &what,
        memory_bytes(model, params, in_memory),
        "ask for fewer MoE layers or experts per layer",
    )?;
    Ok(())
}

/// Generator parameters; serialized as JSON into the trace's provenance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenParams {
    /// The geometry preset used, if any (the geometry itself is in the header).
    pub preset: Option<String>,
    /// Zipf exponent of each MoE layer's popularity law (>= 0; 0 = uniform). One value applies
    /// to every MoE layer; otherwise one value per MoE layer, in order.
    pub skew: Vec<f64>,
    /// Probability in [0, 1] that each of the previous token's experts is selected again, per
    /// MoE layer (one value for all, or one per MoE layer).
    pub locality: Vec<f64>,
    /// Probability in [0, 1] that a free slot takes the successor of the previous layer's
    /// expert in the same slot (see the module doc). 0 = layers independent.
    pub cross_layer: f64,
    /// Number of sequences.
    pub sequences: u64,
    /// Decode tokens per sequence (generated traces have no prefill tokens).
    pub tokens: u64,
    /// Seed of the `Pcg64` generator.
    pub seed: u64,
    /// The trace the skew and locality were fitted to (`--fit-to`), if any.
    pub fitted_to: Option<String>,
    /// Always-on experts per MoE layer: the `always_on[L]` most popular experts of layer L are
    /// selected by every token, before any other slot is filled (a real router's shared-like
    /// experts, which `sim trace stats` lists as `always_on_keys`). Empty: none in any layer;
    /// otherwise one count per MoE layer, each at most the layer's top-k. Left out of the
    /// JSON when empty, so traces generated without it keep their bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub always_on: Vec<u16>,
    /// Token archetypes, a token-level state shared by every layer (see the module doc, step 3).
    /// `None`: no archetype, and left out of the JSON, so traces generated without them keep
    /// their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archetypes: Option<Archetypes>,
}

/// Token archetypes: `count` template tokens, each with one selection per MoE layer drawn
/// from the layer's own Zipf law when the generator starts. Every token picks one archetype
/// (uniformly) and each of its free slots copies, with probability `share`, the archetype's
/// next expert in that layer that is not yet chosen. Tokens of one archetype co-select the
/// same experts in every layer, which is what makes a real router's next layer predictable
/// from the current one; `share` 0 draws every slot as without archetypes (but still
/// consumes the random numbers of the archetype draws).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Archetypes {
    /// Template tokens, 1 to [`MAX_ARCHETYPES`].
    pub count: u32,
    /// Probability in [0, 1] that a free slot copies the token's archetype.
    pub share: f64,
}

/// Most archetypes a generator holds: each costs one token record (2 bytes per selected id),
/// so 4,096 of them on the widest preset geometry (Kimi K2: 60 layers x top-8, 960 bytes a
/// record) stay under 4 MiB. A design bound on memory, not a measurement.
pub const MAX_ARCHETYPES: u32 = 4096;

impl GenParams {
    /// `values` expanded to one per MoE layer, or an error naming `what`.
    fn per_layer(values: &[f64], layers: usize, what: &str) -> Result<Vec<f64>, GenError> {
        match values.len() {
            1 => Ok(vec![values[0]; layers]),
            n if n == layers => Ok(values.to_vec()),
            n => Err(GenError::Param(format!(
                "--{what} has {n} values; give one value for all MoE layers or one per MoE layer ({layers})"
            ))),
        }
    }

    /// Check every parameter against `model`; the error names the parameter and its range.
    pub fn validate(&self, model: &ModelSpec) -> Result<(), GenError> {
        let m = model.moe_layers().len();
        if m == 0 {
            return Err(GenError::Param(
                "the model has no MoE layer (every layer has 0 experts or top-k 0)".into(),
            ));
        }
        for &l in &model.moe_layers() {
            let ls = &model.layers[l];
            if ls.top_k > ls.experts {
                return Err(GenError::Param(format!(
                    "layer {l}: top-k {} exceeds its {} experts",
                    ls.top_k, ls.experts
                )));
            }
        }
        for s in Self::per_layer(&self.skew, m, "skew")? {
            if !(0.0..=MAX_SKEW).contains(&s) {
                return Err(GenError::Param(format!(
                    "--skew {s} is out of range: the Zipf exponent must be in [0, {MAX_SKEW}]"
                )));
            }
        }
        for l in Self::per_layer(&self.locality, m, "locality")? {
            if !(0.0..=1.0).contains(&l) {
                return Err(GenError::Param(format!(
                    "--locality {l} is out of range: it is a probability in [0, 1]"
                )));
            }
        }
        if !self.always_on.is_empty() {
            if self.always_on.len() != m {
                return Err(GenError::Param(format!(
                    "always-on counts: {} values for {m} MoE layers; give one per MoE layer",
                    self.always_on.len()
                )));
            }
            for (i, (&a, &l)) in self.always_on.iter().zip(&model.moe_layers()).enumerate() {
                if a > model.layers[l].top_k {
                    return Err(GenError::Param(format!(
                        "MoE layer {i}: {a} always-on experts exceed its top-k {}",
                        model.layers[l].top_k
                    )));
                }
            }
        }
        self.validate_archetypes()?;
        if !(0.0..=1.0).contains(&self.cross_layer) {
            return Err(GenError::Param(format!(
                "--cross-layer {} is out of range: it is a probability in [0, 1]",
                self.cross_layer
            )));
        }
        if self.sequences == 0 || self.tokens == 0 {
            return Err(GenError::Param(
                "--sequences and --tokens must both be at least 1".into(),
            ));
        }
        // The header lists every sequence with its name, `synthetic-{i}` (at least 11 bytes),
        // so more sequences than this can never fit the format's header cap.
        let most = crate::format::MAX_HEADER_BYTES / 11;
        if self.sequences > most {
            return Err(GenError::Param(format!(
                "--sequences {} cannot fit the trace header ({} bytes at most, at least 11 per \
                 sequence): give at most {most}, or longer sequences (--tokens)",
                self.sequences,
                crate::format::MAX_HEADER_BYTES
            )));
        }
        // The model's geometry as a trace file must hold it (layer count, u32 key numbering).
        crate::format::validate_geometry(model, "the generated trace")
            .map_err(|e| GenError::Param(e.to_string()))?;
        Ok(())
    }

    /// Check the archetype count and share; the error names the flag and its range.
    fn validate_archetypes(&self) -> Result<(), GenError> {
        let Some(a) = &self.archetypes else {
            return Ok(());
        };
        if !(1..=MAX_ARCHETYPES).contains(&a.count) {
            return Err(GenError::Param(format!(
                "--archetypes {} is out of range: give 1 to {MAX_ARCHETYPES} archetypes",
                a.count
            )));
        }
        if !(0.0..=1.0).contains(&a.share) {
            return Err(GenError::Param(format!(
                "--archetype-share {} is out of range: it is a probability in [0, 1]",
                a.share
            )));
        }
        Ok(())
    }

    /// The trace header: `model`, one decode-only sequence entry per sequence, and provenance
    /// marking the trace synthetic with these parameters (JSON, seed included). The date is
    /// left empty so that identical inputs give identical files.
    pub fn header(&self, model: &ModelSpec) -> Header {
        Header {
            model: model.clone(),
            provenance: Provenance {
                source: "synthetic (sim trace gen)".into(),
                tool: format!("traces {} generator", env!("CARGO_PKG_VERSION")),
                date: String::new(),
                prompt_labels: Vec::new(),
                synthetic: true,
                generator: Some(serde_json::to_string(self).expect("parameters serialize")),
                licence: None,
            },
            sequences: (0..self.sequences)
                .map(|i| SequenceInfo {
                    name: format!("synthetic-{i}"),
                    prefill_tokens: 0,
                    decode_tokens: self.tokens,
                })
                .collect(),
            has_weights: false,
            passes: None,
        }
    }
}

/// Per-MoE-layer generator state.
struct LayerGen {
    k: usize,
    /// Popularity rank -> expert id.
    perm: Vec<u16>,
    /// Expert id -> popularity rank.
    rank_of: Vec<u16>,
    /// Zipf weights by rank, for the exact fallback.
    weights: Vec<f64>,
    alias: WeightedAliasIndex<f64>,
    locality: f64,
    /// Always-on experts: popularity ranks 0..always_on, in every selection.
    always_on: usize,
    /// The previous token's selection in this layer (empty at a sequence start).
    prev: Vec<u16>,
    /// Experts in the selection being built (cleared after each selection).
    chosen: Vec<bool>,
    /// The exact fallback's weights still in play for the selection being built, once
    /// rejection sampling has missed MAX_REJECTIONS times in it (dropped after the selection).
    exact: Option<RemainingWeights>,
}

impl LayerGen {
    /// Build this layer's selection into `out` (length k). `upstream` is the previous MoE
    /// layer's selection for this token with that layer's rank table and expert count.
    fn select(
        &mut self,
        rng: &mut Pcg64,
        out: &mut [u16],
        upstream: Option<(&[u16], &[u16])>,
        cross: f64,
        up_always_on: usize,
        archetype: Option<(&[u16], f64)>,
    ) {
        let mut n = 0;
        // always-on experts first; they draw no random number, so a layer without them
        // consumes the stream exactly as before they existed
        for r in 0..self.always_on {
            let e = self.perm[r];
            out[n] = e;
            self.chosen[e as usize] = true;
            n += 1;
        }
        if self.locality > 0.0 {
            for &e in &self.prev {
                if n == self.k {
                    break;
                }
                if self.chosen[e as usize] {
                    continue;
                }
                if rng.gen::<f64>() < self.locality {
                    out[n] = e;
                    self.chosen[e as usize] = true;
                    n += 1;
                }
            }
        }
        let experts = self.perm.len();
        let mut copy = archetype.map(|(picks, share)| (picks.iter(), share));
        while n < self.k {
            if let Some((picks, share)) = &mut copy {
                if rng.gen::<f64>() < *share {
                    if let Some(&e) = picks.find(|&&e| !self.chosen[e as usize]) {
                        out[n] = e;
                        self.choose(e);
                        n += 1;
                        continue;
                    }
                }
            }
            if let Some((up, up_rank)) = upstream {
                // the upstream layer's always-on experts (its first slots) pass on no
                // successor, or every later layer would have always-on experts too
                if cross > 0.0 && n < up.len() && n >= up_always_on && rng.gen::<f64>() < cross {
                    let r = up_rank[up[n] as usize] as usize * experts / up_rank.len();
                    let e = self.perm[r];
                    if !self.chosen[e as usize] {
                        out[n] = e;
                        self.choose(e);
                        n += 1;
                        continue;
                    }
                }
            }
            let e = self.fresh(rng);
            out[n] = e;
            self.choose(e);
            n += 1;
        }
        for &e in &out[..self.k] {
            self.chosen[e as usize] = false;
        }
        self.exact = None;
        self.prev.clear();
        self.prev.extend_from_slice(&out[..self.k]);
    }

    /// An archetype's selection of this layer into `out` (length k): k Zipf draws without
    /// replacement among the experts no earlier archetype of this layer holds (`used`, with
    /// `used_count` of them set), all experts being free again once fewer than k are left.
    /// Spreading the archetypes over the experts keeps an expert in every archetype (hence
    /// in nearly every token, a spurious always-on key) to layers with fewer than
    /// `count * k` experts.
    fn draw_archetype(
        &mut self,
        rng: &mut Pcg64,
        out: &mut [u16],
        used: &mut [bool],
        used_count: &mut usize,
    ) {
        if used.len() - *used_count < self.k {
            used.fill(false);
            *used_count = 0;
        }
        self.chosen.copy_from_slice(used);
        for slot in out.iter_mut() {
            let e = self.fresh(rng);
            *slot = e;
            self.choose(e);
            used[e as usize] = true;
            *used_count += 1;
        }
        self.chosen.fill(false);
        self.exact = None;
    }

    /// Marks `e` chosen in the selection being built (and out of the exact fallback's play).
    fn choose(&mut self, e: u16) {
        self.chosen[e as usize] = true;
        if let Some(x) = &mut self.exact {
            x.remove(self.rank_of[e as usize] as usize);
        }
    }

    /// One Zipf draw among the experts not yet chosen: rejection sampling from the alias table,
    /// and once that has missed MAX_REJECTIONS times in this selection, exact draws from the
    /// remaining weights for the rest of it (O(log E) each, so top-k near E stays fast).
    fn fresh(&mut self, rng: &mut Pcg64) -> u16 {
        if self.exact.is_none() {
            for _ in 0..MAX_REJECTIONS {
                let e = self.perm[self.alias.sample(rng)];
                if !self.chosen[e as usize] {
                    return e;
                }
            }
        }
        let (perm, chosen, weights) = (&self.perm, &self.chosen, &self.weights);
        let exact = self
            .exact
            .get_or_insert_with(|| RemainingWeights::new(weights, |r| chosen[perm[r] as usize]));
        match exact.sample(rng) {
            Some(r) => self.perm[r],
            // Weights underflowed to 0 (skew <= MAX_SKEW keeps them positive, so this is a
            // guard): the most popular expert not yet chosen.
            None => *self
                .perm
                .iter()
                .find(|&&e| !self.chosen[e as usize])
                .expect("fewer than k <= E experts are chosen"),
        }
    }
}

/// `count` archetype records (token records back to back, `ks`'s layout), each layer's
/// selections spread over its experts (see [`LayerGen::draw_archetype`]).
fn draw_archetypes(
    ks: &KeySpace,
    layers: &mut [LayerGen],
    count: u32,
    rng: &mut Pcg64,
) -> Vec<u16> {
    let so = &ks.sel_offsets;
    let stride = ks.ids_per_token();
    let mut records = vec![0u16; count as usize * stride];
    let mut used: Vec<Vec<bool>> = layers.iter().map(|l| vec![false; l.perm.len()]).collect();
    let mut used_count = vec![0usize; layers.len()];
    for rec in records.chunks_exact_mut(stride) {
        for (m, l) in layers.iter_mut().enumerate() {
            let out = &mut rec[so[m]..so[m + 1]];
            l.draw_archetype(rng, out, &mut used[m], &mut used_count[m]);
        }
    }
    records
}

/// Draws token records one at a time; see the module documentation for the model.
pub struct Generator {
    ks: KeySpace,
    layers: Vec<LayerGen>,
    cross: f64,
    /// The archetypes' records (`count` token records back to back) and the copy share.
    archetypes: Option<(Vec<u16>, f64)>,
    rng: Pcg64,
}

impl Generator {
    /// A generator for `model` with `params` (validated here).
    pub fn new(model: &ModelSpec, params: &GenParams) -> Result<Self, GenError> {
        params.validate(model)?;
        let ks = KeySpace::new(model);
        let m = ks.num_moe_layers();
        let skew = GenParams::per_layer(&params.skew, m, "skew")?;
        let locality = GenParams::per_layer(&params.locality, m, "locality")?;
        let always_on = |i: usize| params.always_on.get(i).map_or(0, |&a| a as usize);
        let mut rng = Pcg64::seed_from_u64(params.seed);
        let mut layers = Vec::with_capacity(m);
        for i in 0..m {
            let experts = ks.experts[i] as usize;
            let mut perm: Vec<u16> = (0..experts as u16).collect();
            perm.shuffle(&mut rng);
            let mut rank_of = vec![0u16; experts];
            for (r, &e) in perm.iter().enumerate() {
                rank_of[e as usize] = r as u16;
            }
            let weights: Vec<f64> = (0..experts)
                .map(|r| ((r + 1) as f64).powf(-skew[i]))
                .collect();
            let alias = WeightedAliasIndex::new(weights.clone())
                .map_err(|e| GenError::Param(format!("layer {}: Zipf weights: {e}", i)))?;
            layers.push(LayerGen {
                k: ks.top_k[i] as usize,
                perm,
                rank_of,
                weights,
                alias,
                locality: locality[i],
                always_on: always_on(i),
                prev: Vec::new(),
                chosen: vec![false; experts],
                exact: None,
            });
        }
        // drawn after every layer's tables, so a generator without archetypes consumes the
        // random stream exactly as before they existed
        let archetypes = params.archetypes.as_ref().map(|a| {
            (
                draw_archetypes(&ks, &mut layers, a.count, &mut rng),
                a.share,
            )
        });
        Ok(Generator {
            ks,
            layers,
            cross: params.cross_layer,
            archetypes,
            rng,
        })
    }

    /// The key space of the model (its `ids_per_token` is the record length).
    pub fn keyspace(&self) -> &KeySpace {
        &self.ks
    }

    /// Forget the previous token: the next token starts a new sequence.
    pub fn start_sequence(&mut self) {
        for l in &mut self.layers {
            l.prev.clear();
        }
    }

    /// Draw the next token's record (every MoE layer's selection) into `out`, whose length
    /// must be `keyspace().ids_per_token()`.
    pub fn next_token(&mut self, out: &mut [u16]) {
        let so = &self.ks.sel_offsets;
        let stride = self.ks.ids_per_token();
        let archetype = self.archetypes.as_ref().map(|(records, share)| {
            let a = self.rng.gen_range(0..records.len() / stride);
            (&records[a * stride..(a + 1) * stride], *share)
        });
        for m in 0..self.layers.len() {
            let (done, rest) = out.split_at_mut(so[m]);
            let cur = &mut rest[..so[m + 1] - so[m]];
            let (before, after) = self.layers.split_at_mut(m);
            let upstream = before
                .last()
                .map(|u| (&done[so[m - 1]..so[m]], u.rank_of.as_slice()));
            let up_always_on = before.last().map_or(0, |u| u.always_on);
            let copy = archetype.map(|(rec, share)| (&rec[so[m]..so[m + 1]], share));
            after[0].select(&mut self.rng, cur, upstream, self.cross, up_always_on, copy);
        }
    }
}

/// Generate a whole trace in memory (for small traces and tests; use [`write_trace`] for
/// large ones).
pub fn generate_trace(model: &ModelSpec, params: &GenParams) -> Result<Trace, GenError> {
    params.validate(model)?;
    check_memory(model, params, true)?;
    let mut g = Generator::new(model, params)?;
    let header = params.header(model);
    let stride = g.keyspace().ids_per_token();
    let mut rec = vec![0u16; stride];
    let sequences = (0..params.sequences)
        .map(|_| {
            g.start_sequence();
            let mut ids = Vec::with_capacity(params.tokens as usize * stride);
            for _ in 0..params.tokens {
                g.next_token(&mut rec);
                ids.extend_from_slice(&rec);
            }
            SequenceData {
                prefill: TokenBlock::default(),
                decode: TokenBlock { ids, weights: None },
            }
        })
        .collect();
    Ok(Trace { header, sequences })
}

/// Generate a trace straight into the file `path` with the streaming writer (temporary file
/// renamed on success), holding one token record in memory.
///
/// Refused before anything is allocated or written: tables larger than the memory available
/// ([`memory_bytes`]), and a file larger than the space free in `path`'s directory (the
/// writer's check).
pub fn write_trace(path: &Path, model: &ModelSpec, params: &GenParams) -> Result<(), GenError> {
    write_trace_ticking(path, model, params, &mut |_| {})
}

/// [`write_trace`], calling `tick(1)` after each token written (a progress bar's advance:
/// `params.sequences * params.tokens` in all when it succeeds).
pub fn write_trace_ticking(
    path: &Path,
    model: &ModelSpec,
    params: &GenParams,
    tick: &mut dyn FnMut(u64),
) -> Result<(), GenError> {
    params.validate(model)?;
    check_memory(model, params, false)?;
    let mut g = Generator::new(model, params)?;
    let header = params.header(model);
    let mut w = TraceWriter::create(path, &header)?;
    let mut rec = vec![0u16; g.keyspace().ids_per_token()];
    for _ in 0..params.sequences {
        g.start_sequence();
        for _ in 0..params.tokens {
            g.next_token(&mut rec);
            w.write_token(&rec, None)?;
            tick(1);
        }
    }
    w.finish()?;
    Ok(())
}
