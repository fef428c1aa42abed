//! Trace statistics (`sim trace stats`): popularity skew, concentration, always-on keys,
//! temporal reuse and next-layer predictability, computed in one streaming pass.
//!
//! [`StatsAccumulator`] is fed one token record at a time (the same record layout as
//! [`TokenBlock`](crate::TokenBlock): every MoE layer's selection, layer after layer), so it
//! works on an in-memory [`Trace`] and on the streaming reader alike. Its memory is
//! independent of the token count: per key a count, a last-seen token index and a run start;
//! per pair of consecutive MoE layers an `E_m x E_{m+1}` successor-count matrix; plus a
//! bounded batch of token records (about 1 MiB) that is processed layer-parallel with rayon.
//! All state is integer, so the result is bit-identical whatever the thread count.
//!
//! # Definitions (the JSON keys of [`TraceStats`])
//! - `tokens`: tokens of the selected phases; `accesses`: selected ids over them (tokens x
//!   sum of top-k over MoE layers); `distinct_keys`: (layer, expert) keys selected at least once.
//! - `always_on_keys`: per sequence, the keys selected in every one of its tokens (of the selected
//!   phases); at the top level, the keys always-on in every sequence that has at least one token
//!   (a sequence with no token in the phase has no always-on keys and is left out of the
//!   intersection, since "selected in every one of zero tokens" says nothing).
//!   Keys are `[layer, expert]` with the **model** layer index (dense layers counted).
//! - per layer: `top_k_share` (accesses taken by the layer's k most selected experts / the
//!   layer's accesses), `gini` over the layer's expert counts (all experts, never-selected ones
//!   as 0; ascending sort, `2*sum(i*x_i)/(n*sum(x)) - (n+1)/n`, i from 1), `entropy_bits`
//!   (Shannon entropy in bits of the layer's access distribution over experts; log2(E) when
//!   uniform), `hottest_token_fraction` (max expert count / tokens).
//! - `concentration`: for p in [`CONCENTRATION_POINTS`], the share of all accesses taken by the
//!   `max(1, round(p*n))` most accessed keys, where **n is every key of the model** (never-
//!   selected keys included), rounding ties to even as the budget rounding of docs/DESIGN.md does. So a
//!   point reads "pinning a fraction p of the whole expert bank, chosen with hindsight, serves
//!   this share of accesses", directly comparable with budgets given as a fraction of the bank.
//! - `global_gini`: the Gini formula above over all keys of the model.
//! - `temporal_reuse` (per layer and overall): the fraction of a layer's selected ids that were
//!   also selected by the same layer for the previous token of the same sequence; a sequence's
//!   first token has no previous token and is left out of numerator and denominator. With
//!   `--phase all` a sequence's first decode token follows its last prefill token.
//! - `next_layer_predictability` (per layer L with a next MoE layer, and overall): successor
//!   counts `C[e][e']` count the tokens in which L selected e and the next MoE layer selected e'.
//!   The predicted successors of e are its `k_{L+1}` most frequent successors (ties to the lower
//!   id), learned on the same trace. The value is the fraction of co-selected pairs (e in L, e'
//!   in L+1, same token) in which e' is a predicted successor of e:
//!   `sum_e sum_{e' in top(e)} C[e][e'] / (tokens * k_L * k_{L+1})`. `next_layer_chance` is the
//!   value a router independent of the previous layer and uniform over experts would get in
//!   expectation, `k_{L+1} / E_{L+1}`, for scale. This pairwise form needs only the final
//!   counts, so it is computed in the same single pass.
//!
//! Non-uniform models: top-level `num_experts` and `top_k` are numbers when every MoE layer
//! agrees and `null` otherwise; each `layers[]` entry always carries its own `num_experts` and
//! `top_k`. `num_layers` counts MoE layers (the entries of `layers`); `model_layers` counts all.

use crate::model::Header;
use crate::trace::{KeySpace, Phase, PhaseSel, Trace};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// The fractions p of the key space at which the concentration curve is reported (README.md,
/// "Trace statistics").
pub const CONCENTRATION_POINTS: [f64; 7] = [0.1, 0.125, 0.25, 0.5, 0.75, 0.9, 1.0];

/// Target size of one batch of token records, in bytes (ids are u16). 1 MiB keeps the
/// batch in L2/L3 while giving each rayon task enough work to amortize its dispatch.
const BATCH_BYTES: usize = 1 << 20;

/// Why statistics could not be computed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum StatsError {
    /// The selected phases hold no token at all.
    #[error("the trace has no {phase} tokens; choose another phase with --phase (decode, prefill or all)")]
    NoTokens { phase: &'static str },
    /// A token record of the wrong length was pushed.
    #[error(
        "sequence {sequence}: token record holds {got} ids, the model needs {expected} per token"
    )]
    RecordLength {
        sequence: usize,
        got: usize,
        expected: usize,
    },
    /// Tokens were pushed for a sequence after a later sequence had started.
    #[error(
        "sequence {sequence} arrived after sequence {current}; tokens must come in sequence order"
    )]
    OutOfOrder { sequence: usize, current: usize },
    /// A sequence index beyond the header's sequence list.
    #[error("sequence {sequence} is not in the header, which lists {count} sequences")]
    UnknownSequence { sequence: usize, count: usize },
    /// An expert id at or above its layer's expert count.
    #[error(
        "sequence {sequence} token {token} layer {layer}: expert id {expert} >= {experts} experts"
    )]
    ExpertOutOfRange {
        sequence: usize,
        token: u64,
        layer: usize,
        expert: u16,
        experts: u16,
    },
    /// More tokens than the 32-bit successor counters can hold.
    #[error("more than {max} tokens: the successor counters are 32-bit; split the trace")]
    TooManyTokens { max: u64 },
}

/// One point of the concentration curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConcentrationPoint {
    /// Fraction of all keys of the model.
    pub p: f64,
    /// `max(1, round(p * num_keys))`, ties to even.
    pub keys: u64,
    /// Share of all accesses taken by the `keys` most accessed keys, in [0, 1].
    pub share: f64,
}

/// Statistics of one MoE layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerStats {
    /// Model layer index (dense layers counted).
    pub layer: usize,
    /// Routed experts of this layer.
    pub num_experts: u16,
    /// Selections per token of this layer.
    pub top_k: u16,
    /// Selected ids of this layer over all tokens.
    pub accesses: u64,
    /// Experts of this layer selected at least once.
    pub distinct_experts: u64,
    /// Accesses taken by the layer's `top_k` most selected experts / the layer's accesses.
    pub top_k_share: f64,
    /// Gini coefficient of the layer's expert counts (0 = uniform).
    pub gini: f64,
    /// Shannon entropy of the layer's access distribution, in bits.
    pub entropy_bits: f64,
    /// Count of the most selected expert / tokens.
    pub hottest_token_fraction: f64,
    /// Fraction of the selected ids repeating the previous token's selection in this layer;
    /// `null` when no sequence has two tokens.
    pub temporal_reuse: Option<f64>,
    /// Next-layer predictability from this layer to the next MoE layer (see module doc);
    /// `null` for the last MoE layer.
    pub next_layer_predictability: Option<f64>,
    /// `k_next / E_next`, the predictability of an independent uniform router; `null` for the
    /// last MoE layer.
    pub next_layer_chance: Option<f64>,
}

/// Statistics of one sequence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SequenceStats {
    /// Sequence name from the header.
    pub name: String,
    /// Tokens of the selected phases.
    pub tokens: u64,
    /// Keys selected at least once in this sequence.
    pub distinct_keys: u64,
    /// `[layer, expert]` keys selected in every token of this sequence, sorted.
    pub always_on_keys: Vec<[u32; 2]>,
}

/// Everything `sim trace stats` reports; field names are the JSON keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceStats {
    /// Model name from the header.
    pub model: String,
    /// Phase(s) the statistics cover: `decode`, `prefill` or `all`.
    pub phase: String,
    /// MoE layers (entries of `layers`).
    pub num_layers: usize,
    /// All transformer layers, dense ones included.
    pub model_layers: usize,
    /// Experts per MoE layer when uniform, else `null` (see `layers[].num_experts`).
    pub num_experts: Option<u16>,
    /// Top-k per MoE layer when uniform, else `null` (see `layers[].top_k`).
    pub top_k: Option<u16>,
    /// Keys (expert instances) of the model.
    pub num_keys: u64,
    /// Tokens over all sequences in the selected phases.
    pub tokens: u64,
    /// Selected ids over those tokens.
    pub accesses: u64,
    /// Keys selected at least once.
    pub distinct_keys: u64,
    /// `[layer, expert]` keys always-on in every sequence that has tokens, sorted.
    pub always_on_keys: Vec<[u32; 2]>,
    /// One entry per header sequence, in order.
    pub sequences: Vec<SequenceStats>,
    /// One entry per MoE layer, in layer order.
    pub layers: Vec<LayerStats>,
    /// Concentration curve over all keys of the model.
    pub concentration: Vec<ConcentrationPoint>,
    /// Gini coefficient over the counts of all keys of the model.
    pub global_gini: f64,
    /// Temporal reuse over all layers (reused ids / ids of tokens that have a predecessor).
    pub temporal_reuse: Option<f64>,
    /// Next-layer predictability over all consecutive MoE layer pairs (pooled pairs).
    pub next_layer_predictability: Option<f64>,
}

/// Gini coefficient of `counts` (any order): ascending sort, then
/// `2*sum(i*x_i)/(n*sum(x)) - (n+1)/n` with i from 1. Returns 0 for an empty or all-zero input.
pub fn gini(counts: &[u64]) -> f64 {
    let n = counts.len();
    let total: u64 = counts.iter().sum();
    if n == 0 || total == 0 {
        return 0.0;
    }
    let mut sorted = counts.to_vec();
    sorted.sort_unstable();
    // i * x_i summed exactly in u128: 65,535 x 2^64 cannot overflow it.
    let weighted: u128 = sorted
        .iter()
        .enumerate()
        .map(|(i, &x)| (i as u128 + 1) * x as u128)
        .sum();
    let n = n as f64;
    2.0 * weighted as f64 / (n * total as f64) - (n + 1.0) / n
}

/// Shannon entropy in bits of the distribution proportional to `counts`; 0 for all-zero input.
pub fn entropy_bits(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let total = total as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / total;
            -p * p.log2()
        })
        .sum()
}

/// Streaming state of one key (expert of a layer).
#[derive(Clone, Copy, Default)]
struct KeyState {
    count: u64,
    /// Global index of the last token that selected it (0 = never).
    last_seen: u64,
    /// Index at which the key's current run of consecutive selections began.
    run_start: u64,
}

/// Per-MoE-layer streaming state. Token indices are global and 1-based (0 = never seen), with
/// a gap of one index between sequences so that "seen at index - 1" means "seen in the
/// previous token of the same sequence".
struct LayerAcc {
    experts: usize,
    /// Per expert, one cache line holds everything a selection updates.
    keys: Vec<KeyState>,
    reuse_hits: u64,
    reuse_slots: u64,
    /// Experts first seen in the current sequence.
    seq_distinct: u64,
    /// The successor counts `C[e][e']` (empty for the last MoE layer).
    successors: Successors,
    next_experts: usize,
    /// First out-of-range id met (token index, expert); the batch is then rejected.
    bad: Option<(u64, u16)>,
}

impl LayerAcc {
    /// Selection count of each expert.
    fn counts(&self) -> Vec<u64> {
        self.keys.iter().map(|k| k.count).collect()
    }

    /// Feed `n` token records of one sequence, the first with global index `first`.
    #[allow(clippy::too_many_arguments)]
    fn process(
        &mut self,
        batch: &[u16],
        stride: usize,
        sel: (usize, usize),
        next_sel: Option<(usize, usize)>,
        first: u64,
        seq_start: u64,
    ) {
        let n = batch.len() / stride;
        for t in 0..n {
            let rec = &batch[t * stride..(t + 1) * stride];
            let idx = first + t as u64;
            let ids = &rec[sel.0..sel.1];
            // Range check once per selection: later indexing relies on it.
            if let Some(&e) = ids.iter().find(|&&e| e as usize >= self.experts) {
                self.bad.get_or_insert((idx, e));
                return;
            }
            if idx > seq_start {
                self.reuse_slots += ids.len() as u64;
            }
            for &e in ids {
                let k = &mut self.keys[e as usize];
                k.count += 1;
                if k.last_seen + 1 == idx {
                    self.reuse_hits += 1;
                } else {
                    k.run_start = idx;
                }
                if k.last_seen < seq_start {
                    self.seq_distinct += 1;
                }
                k.last_seen = idx;
            }
            if let Some((a, b)) = next_sel {
                let next = &rec[a..b];
                if next.iter().any(|&e| e as usize >= self.next_experts) {
                    // The next layer's own task reports it; skip the pair update.
                    continue;
                }
                self.successors
                    .add_pairs(ids, next, self.experts, self.next_experts);
            }
        }
    }
}

/// One-pass statistics accumulator; see the module documentation for the definitions.
///
/// Feed every token of the selected phases with [`push_token`](Self::push_token), sequence by
/// sequence (a sequence's prefill tokens before its decode tokens), then call
/// [`finish`](Self::finish). Tokens of phases outside the selection are ignored, so a reader's
/// whole output can be pushed unfiltered.
pub struct StatsAccumulator {
    ks: KeySpace,
    model_name: String,
    model_layers: usize,
    seq_names: Vec<String>,
    phases: PhaseSel,
    layers: Vec<LayerAcc>,
    stride: usize,
    batch: Vec<u16>,
    batch_capacity: usize,
    /// Global index of the first token in `batch`.
    batch_first: u64,
    /// Global index the next pushed token gets.
    next_index: u64,
    current: Option<usize>,
    seq_start: u64,
    seq_tokens: u64,
    /// First record of the current sequence: the only possible always-on keys.
    first_record: Vec<u16>,
    tokens: u64,
    sequences: Vec<SequenceStats>,
    error: Option<StatsError>,
}

impl StatsAccumulator {
    /// Bytes the accumulator holds for this header before any token: one key state per
    /// declared expert instance (the successor tables are bounded apart, by
    /// `DENSE_SUCCESSORS_TOTAL` and the sparse limits). A caller checks it against the
    /// memory available before [`StatsAccumulator::new`], since it follows what the header
    /// declares, not the data.
    pub fn memory_needed(header: &Header) -> u128 {
        let ks = KeySpace::new(&header.model);
        (0..ks.num_moe_layers())
            .map(|i| ks.experts[i] as u128)
            .sum::<u128>()
            * std::mem::size_of::<KeyState>() as u128
    }

    /// [`StatsAccumulator::new`] after checking [`StatsAccumulator::memory_needed`] against
    /// the memory available: a header declaring more expert instances than this machine can
    /// count is refused with a clear error, never an allocation that exhausts memory.
    pub fn checked(
        header: &Header,
        phases: PhaseSel,
    ) -> Result<Self, crate::resources::ResourceError> {
        crate::resources::check_memory(
            "the statistics' per-expert state",
            Self::memory_needed(header),
            "the header declares more expert instances (layers x experts) than this machine can count; check the trace's geometry",
        )?;
        Ok(Self::new(header, phases))
    }

    /// An empty accumulator for traces with this header, counting tokens of `phases`.
    pub fn new(header: &Header, phases: PhaseSel) -> Self {
        let ks = KeySpace::new(&header.model);
        let m = ks.num_moe_layers();
        let mut dense_left = DENSE_SUCCESSORS_TOTAL;
        let layers = (0..m)
            .map(|i| {
                let experts = ks.experts[i] as usize;
                let next_experts = if i + 1 < m {
                    ks.experts[i + 1] as usize
                } else {
                    0
                };
                LayerAcc {
                    experts,
                    keys: vec![KeyState::default(); experts],
                    reuse_hits: 0,
                    reuse_slots: 0,
                    seq_distinct: 0,
                    successors: Successors::new(experts, next_experts, &mut dense_left),
                    next_experts,
                    bad: None,
                }
            })
            .collect();
        let stride = ks.ids_per_token();
        let batch_capacity = (BATCH_BYTES / 2 / stride.max(1)).max(1);
        StatsAccumulator {
            model_name: header.model.name.clone(),
            model_layers: header.model.layers.len(),
            seq_names: header.sequences.iter().map(|s| s.name.clone()).collect(),
            phases,
            layers,
            stride,
            batch: Vec::with_capacity(batch_capacity * stride),
            batch_capacity,
            batch_first: 1,
            next_index: 1,
            current: None,
            seq_start: 1,
            seq_tokens: 0,
            first_record: Vec::new(),
            tokens: 0,
            sequences: Vec::new(),
            error: None,
            ks,
        }
    }

    /// Process token records in batches of `tokens` tokens (default: about 1 MiB of ids).
    /// Results do not depend on it; it trades memory for rayon dispatch overhead.
    pub fn with_batch_tokens(mut self, tokens: usize) -> Self {
        self.batch_capacity = tokens.max(1);
        self
    }

    /// Count every layer pair's successors sparsely (only the co-selected pairs), as the
    /// accumulator does by itself for geometries too large for a dense matrix. Results do
    /// not depend on it; for tests of the sparse path on small traces. Call before any token.
    pub fn with_sparse_successors(mut self) -> Self {
        for l in &mut self.layers {
            if l.next_experts > 0 {
                l.successors = Successors::Sparse(HashMap::new());
            }
        }
        self
    }

    /// Feed one token: `record` holds every MoE layer's selection (the layout of
    /// [`TokenBlock`](crate::TokenBlock)). Tokens of unselected phases are ignored.
    ///
    /// Errors: a record of the wrong length, a sequence index going backwards or beyond the
    /// header, an id at or above its layer's expert count (reported here or by `finish`).
    /// After an error the accumulator keeps returning it.
    pub fn push_token(
        &mut self,
        sequence: usize,
        phase: Phase,
        record: &[u16],
    ) -> Result<(), StatsError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if !self.phases.includes(phase) {
            return Ok(());
        }
        let r = self.push_selected(sequence, record);
        if let Err(e) = &r {
            self.error = Some(e.clone());
        }
        r
    }

    fn push_selected(&mut self, sequence: usize, record: &[u16]) -> Result<(), StatsError> {
        if record.len() != self.stride {
            return Err(StatsError::RecordLength {
                sequence,
                got: record.len(),
                expected: self.stride,
            });
        }
        if sequence >= self.seq_names.len() {
            return Err(StatsError::UnknownSequence {
                sequence,
                count: self.seq_names.len(),
            });
        }
        match self.current {
            Some(c) if c == sequence => {}
            Some(c) if c > sequence => {
                return Err(StatsError::OutOfOrder {
                    sequence,
                    current: c,
                })
            }
            _ => {
                self.end_sequence()?;
                self.begin_sequence(sequence, record);
            }
        }
        if self.tokens >= u32::MAX as u64 {
            return Err(StatsError::TooManyTokens {
                max: u32::MAX as u64,
            });
        }
        self.batch.extend_from_slice(record);
        self.next_index += 1;
        self.seq_tokens += 1;
        self.tokens += 1;
        if self.batch.len() >= self.batch_capacity * self.stride {
            self.flush()?;
        }
        Ok(())
    }

    /// Give the sequences before `upto` that have no entry yet (no token in the selected
    /// phases) an empty one.
    fn pad_sequences(&mut self, upto: usize) {
        while self.sequences.len() < upto {
            let name = self.seq_names[self.sequences.len()].clone();
            self.sequences.push(SequenceStats {
                name,
                tokens: 0,
                distinct_keys: 0,
                always_on_keys: Vec::new(),
            });
        }
    }

    fn begin_sequence(&mut self, sequence: usize, first: &[u16]) {
        self.pad_sequences(sequence);
        self.current = Some(sequence);
        // Leave one unused index so the new sequence's first token never looks like the
        // successor of the previous sequence's last token.
        self.next_index += 1;
        self.seq_start = self.next_index;
        self.batch_first = self.next_index;
        self.seq_tokens = 0;
        self.first_record.clear();
        self.first_record.extend_from_slice(first);
        for l in &mut self.layers {
            l.seq_distinct = 0;
        }
    }

    /// Process the buffered records, one rayon task per MoE layer (disjoint state).
    fn flush(&mut self) -> Result<(), StatsError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let (batch, stride, first, seq_start) =
            (&self.batch, self.stride, self.batch_first, self.seq_start);
        let so = &self.ks.sel_offsets;
        let m = self.layers.len();
        let work = |(i, l): (usize, &mut LayerAcc)| {
            let next = (i + 1 < m).then(|| (so[i + 1], so[i + 2]));
            l.process(batch, stride, (so[i], so[i + 1]), next, first, seq_start);
        };
        // Tiny batches are not worth waking the thread pool.
        if batch.len() >= 4096 {
            self.layers.par_iter_mut().enumerate().for_each(work);
        } else {
            self.layers.iter_mut().enumerate().for_each(work);
        }
        for (i, l) in self.layers.iter().enumerate() {
            if let Some((idx, expert)) = l.bad {
                return Err(StatsError::ExpertOutOfRange {
                    sequence: self.current.unwrap_or(0),
                    token: idx - self.seq_start,
                    layer: self.ks.moe_layers[i],
                    expert,
                    experts: self.ks.experts[i],
                });
            }
        }
        self.batch_first += (self.batch.len() / self.stride) as u64;
        self.batch.clear();
        Ok(())
    }

    fn end_sequence(&mut self) -> Result<(), StatsError> {
        let Some(s) = self.current else {
            return Ok(());
        };
        self.flush()?;
        let last = self.next_index - 1;
        let mut always_on = Vec::new();
        for (m, l) in self.layers.iter().enumerate() {
            let (a, b) = (self.ks.sel_offsets[m], self.ks.sel_offsets[m + 1]);
            for &e in &self.first_record[a..b] {
                let e = e as usize;
                if l.keys[e].last_seen == last && l.keys[e].run_start == self.seq_start {
                    always_on.push([self.ks.moe_layers[m] as u32, e as u32]);
                }
            }
        }
        always_on.sort_unstable();
        self.sequences.push(SequenceStats {
            name: self.seq_names[s].clone(),
            tokens: self.seq_tokens,
            distinct_keys: self.layers.iter().map(|l| l.seq_distinct).sum(),
            always_on_keys: always_on,
        });
        self.current = None;
        Ok(())
    }

    /// Close the last sequence and compute the statistics.
    ///
    /// Errors: any error a push reported, an out-of-range id in the last batch, or
    /// [`StatsError::NoTokens`] when the selected phases hold no token.
    pub fn finish(mut self) -> Result<TraceStats, StatsError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.end_sequence()?;
        self.pad_sequences(self.seq_names.len());
        if self.tokens == 0 {
            return Err(StatsError::NoTokens {
                phase: self.phases.as_str(),
            });
        }
        let tokens = self.tokens;
        let ks = &self.ks;
        let m = ks.num_moe_layers();
        let layers: Vec<LayerStats> = (0..m).map(|i| self.layer_stats(i)).collect();

        let all_counts: Vec<u64> = self.layers.iter().flat_map(|l| l.counts()).collect();
        let accesses: u64 = all_counts.iter().sum();
        let concentration = concentration(&all_counts, accesses);
        let (hits, slots) = self.layers.iter().fold((0u64, 0u64), |(h, s), l| {
            (h + l.reuse_hits, s + l.reuse_slots)
        });
        let (pred_hits, pred_pairs) = self.successor_hits();
        let always_on = always_on_in_all(&self.sequences);

        let uniform = |v: &[u16]| v.first().copied().filter(|f| v.iter().all(|x| x == f));
        Ok(TraceStats {
            model: self.model_name.clone(),
            phase: self.phases.as_str().to_string(),
            num_layers: m,
            model_layers: self.model_layers,
            num_experts: uniform(&ks.experts),
            top_k: uniform(&ks.top_k),
            num_keys: ks.num_keys() as u64,
            tokens,
            accesses,
            distinct_keys: all_counts.iter().filter(|&&c| c > 0).count() as u64,
            always_on_keys: always_on,
            global_gini: gini(&all_counts),
            sequences: self.sequences,
            layers,
            concentration,
            temporal_reuse: (slots > 0).then(|| hits as f64 / slots as f64),
            next_layer_predictability: (pred_pairs > 0)
                .then(|| pred_hits as f64 / pred_pairs as f64),
        })
    }

    /// The statistics of MoE layer `i` over the accumulated tokens.
    fn layer_stats(&self, i: usize) -> LayerStats {
        let (tokens, ks) = (self.tokens, &self.ks);
        let m = ks.num_moe_layers();
        let l = &self.layers[i];
        let counts = l.counts();
        let k = ks.top_k[i] as usize;
        let accesses = tokens * k as u64;
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top: u64 = sorted.iter().take(k).sum();
        let (pred, chance) = if i + 1 < m {
            let kn = ks.top_k[i + 1] as usize;
            let hits = l.successors.top_hits(l.next_experts, kn);
            let pairs = tokens * k as u64 * kn as u64;
            (
                Some(hits as f64 / pairs as f64),
                Some(kn as f64 / ks.experts[i + 1] as f64),
            )
        } else {
            (None, None)
        };
        LayerStats {
            layer: ks.moe_layers[i],
            num_experts: ks.experts[i],
            top_k: ks.top_k[i],
            accesses,
            distinct_experts: counts.iter().filter(|&&c| c > 0).count() as u64,
            top_k_share: top as f64 / accesses as f64,
            gini: gini(&counts),
            entropy_bits: entropy_bits(&counts),
            hottest_token_fraction: sorted.first().copied().unwrap_or(0) as f64 / tokens as f64,
            temporal_reuse: (l.reuse_slots > 0).then(|| l.reuse_hits as f64 / l.reuse_slots as f64),
            next_layer_predictability: pred,
            next_layer_chance: chance,
        }
    }

    /// Over all consecutive MoE layer pairs: the (layer, successor) pairs the predicted
    /// successors cover, and all pairs.
    fn successor_hits(&self) -> (u64, u64) {
        let (tokens, ks) = (self.tokens, &self.ks);
        let m = ks.num_moe_layers();
        (0..m.saturating_sub(1)).fold((0u64, 0u64), |(h, p), i| {
            let l = &self.layers[i];
            let kn = ks.top_k[i + 1] as usize;
            let hits = l.successors.top_hits(l.next_experts, kn);
            (h + hits, p + tokens * ks.top_k[i] as u64 * kn as u64)
        })
    }
}

/// The concentration curve of per-key access `counts` (`accesses` in all): the share the
/// hottest fraction `p` of keys takes, at each of [`CONCENTRATION_POINTS`].
fn concentration(counts: &[u64], accesses: u64) -> Vec<ConcentrationPoint> {
    let mut desc = counts.to_vec();
    desc.sort_unstable_by(|a, b| b.cmp(a));
    let n = desc.len();
    CONCENTRATION_POINTS
        .iter()
        .map(|&p| {
            let keys = ((p * n as f64).round_ties_even() as usize).clamp(1, n.max(1));
            let share: u64 = desc.iter().take(keys).sum();
            ConcentrationPoint {
                p,
                keys: keys as u64,
                share: share as f64 / accesses as f64,
            }
        })
        .collect()
}

/// The keys always on in every sequence that has tokens (at least one has).
fn always_on_in_all(sequences: &[SequenceStats]) -> Vec<[u32; 2]> {
    let with_tokens: Vec<&SequenceStats> = sequences.iter().filter(|s| s.tokens > 0).collect();
    let mut always_on = with_tokens[0].always_on_keys.clone();
    for s in &with_tokens[1..] {
        always_on.retain(|k| s.always_on_keys.binary_search(k).is_ok());
    }
    always_on
}

/// Successor counters a layer pair may hold densely: 4 Mi counters (16 MiB; DeepSeek-V3's
/// 256 x 256 experts take 64 Ki). A design limit, not a measurement: above it a declared
/// geometry would decide the memory, so the pair is counted sparsely.
const DENSE_SUCCESSORS_PER_PAIR: usize = 1 << 22;

/// Dense successor counters over all layer pairs of one accumulator: 64 Mi (256 MiB); pairs
/// past it are counted sparsely, so a header declaring many wide layers cannot decide the
/// memory either.
const DENSE_SUCCESSORS_TOTAL: usize = 1 << 26;

/// The successor counts `C[e][e']` of one pair of consecutive MoE layers.
enum Successors {
    /// `C[e * next_experts + e']`, when the matrix fits the dense limits.
    Dense(Vec<u32>),
    /// Only the co-selected pairs, keyed `e << 16 | e'` (expert ids are u16).
    Sparse(HashMap<u32, u32>),
}

impl Successors {
    /// The counters of an `experts x next_experts` pair: dense while the pair and the
    /// accumulator's running total (`dense_left`, decreased here) allow, else sparse.
    fn new(experts: usize, next_experts: usize, dense_left: &mut usize) -> Successors {
        let n = experts.saturating_mul(next_experts);
        if n <= DENSE_SUCCESSORS_PER_PAIR && n <= *dense_left {
            *dense_left -= n;
            Successors::Dense(vec![0; n])
        } else {
            Successors::Sparse(HashMap::new())
        }
    }

    /// Count every (e in `ids`, e' in `next`) pair once; the ids were range-checked against
    /// `experts` and `next_experts`.
    #[inline]
    fn add_pairs(&mut self, ids: &[u16], next: &[u16], experts: usize, next_experts: usize) {
        match self {
            // The hot loop (k x k' increments per token and layer, ~90% of the pass on
            // DeepSeek-V3 geometry): bounds checks are hoisted into the range checks.
            Successors::Dense(c) => {
                debug_assert_eq!(c.len(), experts * next_experts);
                for &e in ids {
                    let base = e as usize * next_experts;
                    for &f in next {
                        // SAFETY: e < experts and f < next_experts were checked by the
                        // caller, so base + f < experts * next_experts == c.len().
                        unsafe {
                            *c.get_unchecked_mut(base + f as usize) += 1;
                        }
                    }
                }
            }
            Successors::Sparse(c) => {
                for &e in ids {
                    for &f in next {
                        *c.entry(u32::from(e) << 16 | u32::from(f)).or_insert(0) += 1;
                    }
                }
            }
        }
    }

    /// Over every expert e of the layer: the sum of e's `k` largest successor counts (the
    /// pairs e's predicted successors cover). A row with no counts adds 0.
    fn top_hits(&self, next_experts: usize, k: usize) -> u64 {
        match self {
            Successors::Dense(c) if next_experts > 0 => c
                .chunks_exact(next_experts)
                .map(|row| top_sum(row, k))
                .sum(),
            Successors::Dense(_) => 0,
            Successors::Sparse(c) => {
                let mut rows: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
                for (&key, &n) in c {
                    rows.entry(key >> 16).or_default().push(n);
                }
                rows.values().map(|row| top_sum(row, k)).sum()
            }
        }
    }
}

/// The successor counts `C[e][e']` of one pair of MoE layers, for a caller that learns them
/// itself (the prefetch predictor `next-layer`): the same counters
/// `next_layer_predictability` is computed from, dense or sparse under the same limits.
pub struct SuccessorTable {
    experts: usize,
    next_experts: usize,
    counts: Successors,
}

impl SuccessorTable {
    /// One table per `(source experts, target experts)` pair, dense while the per-pair and
    /// total limits of the statistics' counters allow (4 Mi and 64 Mi counters), else sparse.
    pub fn for_pairs(pairs: impl IntoIterator<Item = (usize, usize)>) -> Vec<SuccessorTable> {
        let mut dense_left = DENSE_SUCCESSORS_TOTAL;
        pairs
            .into_iter()
            .map(|(experts, next_experts)| SuccessorTable {
                experts,
                next_experts,
                counts: Successors::new(experts, next_experts, &mut dense_left),
            })
            .collect()
    }

    /// Count every (e in `ids`, e' in `next`) pair once. Ids at or above their layer's
    /// expert count are not counted (a trace read from a file never holds one).
    pub fn add_pairs(&mut self, ids: &[u16], next: &[u16]) {
        let in_range = |v: &[u16], n: usize| v.iter().all(|&e| (e as usize) < n);
        if in_range(ids, self.experts) && in_range(next, self.next_experts) {
            self.counts
                .add_pairs(ids, next, self.experts, self.next_experts);
        }
    }

    /// Add row `e` (the counts of each target expert e' with source expert `e`) to `acc`,
    /// which holds one entry per target expert. A source id out of range adds nothing.
    pub fn add_row(&self, e: u16, acc: &mut [u64]) {
        let (e, n) = (e as usize, self.next_experts.min(acc.len()));
        if e >= self.experts {
            return;
        }
        match &self.counts {
            Successors::Dense(c) => {
                let row = &c[e * self.next_experts..e * self.next_experts + n];
                for (a, &x) in acc.iter_mut().zip(row) {
                    *a += x as u64;
                }
            }
            Successors::Sparse(c) => {
                for (f, a) in acc.iter_mut().enumerate().take(n) {
                    if let Some(&x) = c.get(&((e as u32) << 16 | f as u32)) {
                        *a += x as u64;
                    }
                }
            }
        }
    }
}

/// Sum of the `k` largest entries of `row`: the pairs a row's predicted successors cover.
/// (Which of several tied entries is "predicted" does not change the sum.)
fn top_sum(row: &[u32], k: usize) -> u64 {
    let mut v = row.to_vec();
    let k = k.min(v.len());
    if k == 0 {
        return 0;
    }
    v.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
    v[..k].iter().map(|&x| x as u64).sum()
}

/// Statistics of an in-memory trace over `phases` (one pass through [`StatsAccumulator`]).
pub fn trace_stats(trace: &Trace, phases: PhaseSel) -> Result<TraceStats, StatsError> {
    let ks = trace.keyspace();
    let mut acc = StatsAccumulator::new(&trace.header, phases);
    for s in 0..trace.sequences.len() {
        for &phase in phases.phases() {
            for t in 0..trace.tokens(s, phase) {
                acc.push_token(s, phase, trace.token(&ks, s, phase, t))?;
            }
        }
    }
    acc.finish()
}

impl TraceStats {
    /// Human-readable report: summary, always-on keys, concentration and one row per layer.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        self.summary_text(&mut o);
        self.sequences_text(&mut o);
        self.concentration_text(&mut o);
        self.layers_text(&mut o);
        o
    }

    /// The report's summary lines, down to the always-on keys.
    fn summary_text(&self, o: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(o, "model            {}", self.model);
        let _ = writeln!(o, "phase            {}", self.phase);
        let _ = writeln!(
            o,
            "layers           {} MoE of {} ({}, {})",
            self.num_layers,
            self.model_layers,
            self.num_experts
                .map_or("experts vary by layer".to_string(), |n| format!(
                    "{n} experts"
                )),
            self.top_k
                .map_or("top-k varies by layer".to_string(), |k| format!("top-{k}"))
        );
        let _ = writeln!(o, "tokens           {}", self.tokens);
        let _ = writeln!(o, "accesses         {}", self.accesses);
        let _ = writeln!(
            o,
            "distinct keys    {} of {} ({:.1}%)",
            self.distinct_keys,
            self.num_keys,
            100.0 * self.distinct_keys as f64 / self.num_keys.max(1) as f64
        );
        let _ = writeln!(o, "global gini      {:.4}", self.global_gini);
        let _ = writeln!(o, "temporal reuse   {}", pct(self.temporal_reuse));
        let _ = writeln!(
            o,
            "next-layer pred. {}",
            pct(self.next_layer_predictability)
        );
        let _ = writeln!(
            o,
            "always-on keys   {} (in every sequence)",
            key_list(&self.always_on_keys)
        );
    }

    /// One line per sequence (the first 50).
    fn sequences_text(&self, o: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(o, "\nsequences");
        for s in self.sequences.iter().take(50) {
            let _ = writeln!(
                o,
                "  {:<20} {:>9} tokens {:>7} distinct keys, always-on: {}",
                s.name,
                s.tokens,
                s.distinct_keys,
                key_list(&s.always_on_keys)
            );
        }
        if self.sequences.len() > 50 {
            let _ = writeln!(o, "  ... {} more (see --json)", self.sequences.len() - 50);
        }
    }

    /// The concentration curve, one line per point.
    fn concentration_text(&self, o: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            o,
            "\nconcentration (share of accesses taken by the hottest keys)"
        );
        for c in &self.concentration {
            let _ = writeln!(
                o,
                "  top {:>6.1}% = {:>7} keys  {:>6.1}%",
                100.0 * c.p,
                c.keys,
                100.0 * c.share
            );
        }
    }

    /// The per-layer table.
    fn layers_text(&self, o: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            o,
            "\n{:>5} {:>7} {:>5} {:>9} {:>10} {:>6} {:>8} {:>8} {:>8} {:>9} {:>7}",
            "layer",
            "experts",
            "top-k",
            "distinct",
            "top-k shr",
            "gini",
            "entropy",
            "hottest",
            "reuse",
            "next-pred",
            "chance"
        );
        for l in &self.layers {
            let _ = writeln!(
                o,
                "{:>5} {:>7} {:>5} {:>9} {:>9.1}% {:>6.3} {:>8.3} {:>7.1}% {:>8} {:>9} {:>7}",
                l.layer,
                l.num_experts,
                l.top_k,
                l.distinct_experts,
                100.0 * l.top_k_share,
                l.gini,
                l.entropy_bits,
                100.0 * l.hottest_token_fraction,
                pct(l.temporal_reuse),
                pct(l.next_layer_predictability),
                pct(l.next_layer_chance)
            );
        }
    }
}

/// A fraction as a percentage with one decimal, `-` when absent.
fn pct(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{:.1}%", 100.0 * x))
}

/// Keys as `L<layer>/E<expert>`, space-separated, `none` when empty.
fn key_list(v: &[[u32; 2]]) -> String {
    if v.is_empty() {
        "none".to_string()
    } else {
        v.iter()
            .map(|[l, e]| format!("L{l}/E{e}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}
