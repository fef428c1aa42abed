//! The streaming regime: nothing is retained across steps; every step brings in exactly the
//! units its selections touch. This gives the granularity trade curve of a mechanism: how much
//! memory a decode step holds and how many bytes it moves, per layer per step.
//!
//! Definitions (DESIGN.md, "Streaming regime"), for every step (one token of one sequence):
//! - hot units: units holding at least one selected expert, over the whole model;
//! - resident experts: distinct experts inside hot units; resident physical: committed bytes of
//!   hot units; transfer: useful bytes of hot units;
//! - each is summed over steps and divided by steps x MoE layers ("per layer per step"). For
//!   units confined to one layer this equals the mean over (step, layer) pairs; for regions
//!   that span layers it is the per-step whole-model figure divided by the layer count, as
//!   DESIGN.md asks. Dense layers (no routed experts) are not counted as layers.
//! - selectivity = resident experts / selections (top-k summed over MoE layers), as a ratio
//!   (1.0 = 100%: only the selected experts were brought in);
//! - waste factor = committed bytes / useful bytes over all units of the model;
//! - always-on units: units hot in every step of the selected phases of every sequence.

use policies::UnitMap;
use serde::Serialize;
use traces::{KeySpace, PhaseSel, Trace};

/// Bytes in one MiB.
const MIB: f64 = (1u64 << 20) as f64;

/// Streaming-regime metrics of one mechanism on one trace. The JSON keys are part of the
/// interface (`sim run --json`'s `streaming` block); MiB = 2^20 bytes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamingMetrics {
    /// Committed bytes of hot units, MiB per MoE layer per step.
    pub resident_mib_per_layer_step: f64,
    /// Useful bytes of hot units (what an H2D copy moves), MiB per MoE layer per step.
    pub transfer_mib_per_layer_step: f64,
    /// Distinct experts inside hot units, per MoE layer per step.
    pub resident_experts_per_layer_step: f64,
    /// Hot units, per MoE layer per step.
    pub hot_units_per_layer_step: f64,
    /// Committed bytes / useful bytes over all units (>= 1).
    pub waste_factor: f64,
    /// Resident experts / selected experts, a ratio (>= 1; 1.0 = 100%).
    pub selectivity: f64,
    /// Units hot in every step.
    pub always_on_units: u64,
    /// Units / MoE layers (fractional when regions span layers).
    pub units_per_layer: f64,
    /// Committed bytes of all units, MiB.
    pub committed_mib_total: f64,
    /// Useful bytes of all units (the whole expert bank), MiB.
    pub useful_mib_total: f64,
}

/// Why the streaming pass could not produce metrics.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StreamingError {
    #[error("the trace has no tokens in the selected phase `{0}`; choose another --phase (decode, prefill or all)")]
    NoTokens(&'static str),
    #[error("the model has no MoE layers (no routed experts), so there is nothing to page")]
    NoMoeLayers,
    #[error("the unit map covers {map} expert instances but the trace has {trace}")]
    KeyMismatch { map: usize, trace: usize },
}

/// The streaming pass as an accumulator: feed it token records with [`StreamingPass::step`]
/// (from an in-memory [`Trace`] or the streaming reader) and call [`StreamingPass::finish`].
///
/// Cost per selection: one add to find the key, then per unit of the key one stamp compare.
/// Units are marked hot with a generation stamp (the step number), so nothing is cleared
/// between steps and the loop allocates nothing.
pub struct StreamingPass<'a> {
    map: &'a UnitMap,
    /// MoE layers of the key space (the "per layer" divisor).
    layers: usize,
    /// Key of position i of a token record = `key_base[i] + id`.
    key_base: Vec<u32>,
    /// Units per key, flattened: `Some` when every key has exactly one unit (eN, region).
    key_unit: Option<Vec<u32>>,
    /// Per unit: committed, useful bytes and resident experts it adds when hot. When keys span
    /// several units (OS pages), experts are counted through `unit_key` instead.
    committed: Vec<u64>,
    useful: Vec<u64>,
    experts: Vec<u32>,
    /// For multi-unit keys: the single key inside each unit (OS pages hold one expert each).
    unit_key: Option<Vec<u32>>,
    key_stamp: Vec<u32>,
    stamp: Vec<u32>,
    hot_steps: Vec<u32>,
    gen: u32,
    steps: u64,
    selections: u64,
    sum_committed: u128,
    sum_useful: u128,
    sum_experts: u64,
    sum_units: u64,
}

impl<'a> StreamingPass<'a> {
    /// A pass over traces of key space `ks` with unit map `map`.
    pub fn new(ks: &KeySpace, map: &'a UnitMap) -> Result<Self, StreamingError> {
        if ks.num_moe_layers() == 0 {
            return Err(StreamingError::NoMoeLayers);
        }
        if map.key_first.len() != ks.num_keys() {
            return Err(StreamingError::KeyMismatch {
                map: map.key_first.len(),
                trace: ks.num_keys(),
            });
        }
        let key_base = (0..ks.num_moe_layers())
            .flat_map(|m| vec![ks.offsets[m]; ks.top_k[m] as usize])
            .collect();
        let single = map.key_count.iter().all(|&c| c == 1);
        let nu = map.num_units();
        let unit_key = (!single).then(|| {
            // each unit's key: the units of every key are disjoint runs
            let mut uk = vec![u32::MAX; nu];
            for k in 0..map.key_first.len() as u32 {
                for u in map.units_of(k) {
                    uk[u as usize] = k;
                }
            }
            uk
        });
        Ok(StreamingPass {
            map,
            layers: ks.num_moe_layers(),
            key_base,
            key_unit: single.then(|| map.key_first.clone()),
            committed: map.units.iter().map(|u| u.committed_bytes).collect(),
            useful: map.units.iter().map(|u| u.useful_bytes).collect(),
            experts: map.units.iter().map(|u| u.experts).collect(),
            unit_key,
            key_stamp: vec![0; if single { 0 } else { ks.num_keys() }],
            stamp: vec![0; nu],
            hot_steps: vec![0; nu],
            gen: 0,
            steps: 0,
            selections: 0,
            sum_committed: 0,
            sum_useful: 0,
            sum_experts: 0,
            sum_units: 0,
        })
    }

    /// Account one step: `record` is one token's ids, every MoE layer in order
    /// (`KeySpace::ids_per_token` ids, as in [`Trace::token`]).
    #[inline]
    pub fn step(&mut self, record: &[u16]) {
        if self.gen == u32::MAX {
            // stamps would wrap: start a fresh generation range
            self.stamp.fill(0);
            self.key_stamp.fill(0);
            self.gen = 0;
        }
        self.gen += 1;
        let gen = self.gen;
        let (mut c, mut u, mut x, mut n) = (0u64, 0u64, 0u64, 0u64);
        match &self.key_unit {
            Some(key_unit) => {
                for (&b, &id) in self.key_base.iter().zip(record) {
                    let unit = key_unit[(b + id as u32) as usize] as usize;
                    if self.stamp[unit] != gen {
                        self.stamp[unit] = gen;
                        self.hot_steps[unit] += 1;
                        c += self.committed[unit];
                        u += self.useful[unit];
                        x += self.experts[unit] as u64;
                        n += 1;
                    }
                }
            }
            None => {
                let unit_key = self.unit_key.as_deref().unwrap_or_default();
                for (&b, &id) in self.key_base.iter().zip(record) {
                    let key = b + id as u32;
                    for unit in self.map.units_of(key) {
                        let unit = unit as usize;
                        if self.stamp[unit] != gen {
                            self.stamp[unit] = gen;
                            self.hot_steps[unit] += 1;
                            c += self.committed[unit];
                            u += self.useful[unit];
                            n += 1;
                            let k = unit_key[unit] as usize;
                            if self.key_stamp[k] != gen {
                                self.key_stamp[k] = gen;
                                x += 1;
                            }
                        }
                    }
                }
            }
        }
        self.steps += 1;
        self.selections += self.key_base.len() as u64;
        self.sum_committed += c as u128;
        self.sum_useful += u as u128;
        self.sum_experts += x;
        self.sum_units += n;
    }

    /// The metrics over every step fed so far.
    pub fn finish(&self, phases: PhaseSel) -> Result<StreamingMetrics, StreamingError> {
        if self.steps == 0 {
            return Err(StreamingError::NoTokens(phases.as_str()));
        }
        let layers = self.layers as f64;
        let layer_steps = self.steps as f64 * layers;
        let committed: u128 = self.committed.iter().map(|&b| b as u128).sum();
        let useful: u128 = self.useful.iter().map(|&b| b as u128).sum();
        // hot_steps counts at most one per step, so it cannot exceed steps even if the stamps
        // were reset
        let always_on = self
            .hot_steps
            .iter()
            .filter(|&&h| h as u64 == self.steps)
            .count() as u64;
        Ok(StreamingMetrics {
            resident_mib_per_layer_step: self.sum_committed as f64 / layer_steps / MIB,
            transfer_mib_per_layer_step: self.sum_useful as f64 / layer_steps / MIB,
            resident_experts_per_layer_step: self.sum_experts as f64 / layer_steps,
            hot_units_per_layer_step: self.sum_units as f64 / layer_steps,
            waste_factor: committed as f64 / useful as f64,
            selectivity: self.sum_experts as f64 / self.selections as f64,
            always_on_units: always_on,
            units_per_layer: self.map.num_units() as f64 / layers,
            committed_mib_total: committed as f64 / MIB,
            useful_mib_total: useful as f64 / MIB,
        })
    }

    /// Steps fed so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }
}

/// The streaming metrics of `map` over the tokens of `phases` in `trace`.
pub fn streaming_metrics(
    trace: &Trace,
    phases: PhaseSel,
    map: &UnitMap,
) -> Result<StreamingMetrics, StreamingError> {
    let ks = trace.keyspace();
    let mut pass = StreamingPass::new(&ks, map)?;
    let stride = ks.ids_per_token();
    for seq in &trace.sequences {
        for &p in phases.phases() {
            for rec in seq.block(p).ids.chunks_exact(stride) {
                pass.step(rec);
            }
        }
    }
    pass.finish(phases)
}
