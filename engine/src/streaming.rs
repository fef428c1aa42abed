//! The streaming regime: nothing is retained across steps; every step brings in exactly the
//! units its selections touch. This gives the granularity trade curve of a mechanism: how much
//! memory a decode step holds and how many bytes it moves, per layer per step.
//!
//! Definitions (docs/DESIGN.md, "Streaming regime"), for every step (one token of one sequence):
//! - hot units: units holding at least one selected expert, over the whole model;
//! - resident experts: distinct experts inside hot units; resident physical: committed bytes of
//!   hot units; transfer: useful bytes of hot units;
//! - each is summed over steps and divided by steps x MoE layers ("per layer per step"). For
//!   units confined to one layer this equals the mean over (step, layer) pairs; for regions
//!   that span layers it is the per-step whole-model figure divided by the layer count, as
//!   docs/DESIGN.md asks. Dense layers (no routed experts) are not counted as layers.
//! - selectivity = resident experts / selections (top-k summed over MoE layers), as a ratio
//!   (1.0 = 100%: only the selected experts were brought in);
//! - waste factor = committed bytes / useful bytes over all units of the model;
//! - always-on units: units hot in every step of the selected phases of every sequence.

use crate::MIB;
use policies::UnitMap;
use traces::{KeySpace, PhaseSel, Trace};

/// Streaming-regime metrics (the `streaming` block); defined beside the other report blocks.
pub use reports::run::StreamingMetrics;

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

/// How units relate to keys, chosen once per unit map so the hot loop has no branches on it.
enum Layout {
    /// Every key lies in exactly one unit (`eN`, `region:R`): stamp units.
    OneUnitPerKey { key_unit: Vec<u32> },
    /// Every unit holds exactly one key, and a key's units are all hot together (OS pages):
    /// stamp keys, with each key's run of units aggregated.
    ExclusiveRuns {
        key_committed: Vec<u64>,
        key_useful: Vec<u64>,
        key_units: Vec<u32>,
    },
    /// Anything else: stamp units, and count distinct keys through each unit's key list.
    General {
        unit_keys_start: Vec<u32>,
        unit_keys: Vec<u32>,
    },
}

/// The streaming pass as an accumulator: feed it token records with [`StreamingPass::step`]
/// (from an in-memory [`Trace`] or the streaming reader) and call [`StreamingPass::finish`].
///
/// Cost per selection: one add to find the key, then one stamp compare (per unit of the key in
/// the general layout). Hot units and keys are marked with a generation stamp (the step number),
/// so nothing is cleared between steps and the loop allocates nothing.
pub struct StreamingPass<'a> {
    map: &'a UnitMap,
    /// MoE layers of the key space (the "per layer" divisor).
    layers: usize,
    /// Key of position i of a token record = `key_base[i] + id`.
    key_base: Vec<u32>,
    layout: Layout,
    /// Per unit: committed and useful bytes, and the experts it holds.
    committed: Vec<u64>,
    useful: Vec<u64>,
    experts: Vec<u32>,
    /// Generation stamps and hot-step counts: per unit, or per key for `ExclusiveRuns`.
    stamp: Vec<u32>,
    hot_steps: Vec<u32>,
    /// Per key, for counting distinct keys in the `General` layout.
    key_stamp: Vec<u32>,
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
        let nkeys = ks.num_keys();
        if map.key_first.len() != nkeys || map.key_count.len() != nkeys {
            return Err(StreamingError::KeyMismatch {
                map: map.key_first.len(),
                trace: nkeys,
            });
        }
        let key_base = (0..ks.num_moe_layers())
            .flat_map(|m| vec![ks.offsets[m]; ks.top_k[m] as usize])
            .collect();
        let nu = map.num_units();
        // keys holding bytes in each unit, as a CSR list
        let mut per_unit = vec![0u32; nu + 1];
        for k in 0..nkeys as u32 {
            for u in map.units_of(k) {
                per_unit[u as usize + 1] += 1;
            }
        }
        let layout = if map.key_count.iter().all(|&c| c == 1) {
            Layout::OneUnitPerKey {
                key_unit: map.key_first.clone(),
            }
        } else if per_unit[1..].iter().all(|&c| c == 1) {
            let run = |k: usize, f: &dyn Fn(&policies::UnitInfo) -> u64| -> u64 {
                map.units_of(k as u32)
                    .map(|u| f(&map.units[u as usize]))
                    .sum()
            };
            Layout::ExclusiveRuns {
                key_committed: (0..nkeys).map(|k| run(k, &|u| u.committed_bytes)).collect(),
                key_useful: (0..nkeys).map(|k| run(k, &|u| u.useful_bytes)).collect(),
                key_units: map.key_count.clone(),
            }
        } else {
            for u in 0..nu {
                per_unit[u + 1] += per_unit[u];
            }
            let mut fill = per_unit.clone();
            let mut unit_keys = vec![0u32; per_unit[nu] as usize];
            for k in 0..nkeys as u32 {
                for u in map.units_of(k) {
                    unit_keys[fill[u as usize] as usize] = k;
                    fill[u as usize] += 1;
                }
            }
            Layout::General {
                unit_keys_start: per_unit,
                unit_keys,
            }
        };
        let stamped = match layout {
            Layout::ExclusiveRuns { .. } => nkeys,
            _ => nu,
        };
        Ok(StreamingPass {
            map,
            layers: ks.num_moe_layers(),
            key_base,
            key_stamp: vec![
                0;
                if matches!(layout, Layout::General { .. }) {
                    nkeys
                } else {
                    0
                }
            ],
            layout,
            committed: map.units.iter().map(|u| u.committed_bytes).collect(),
            useful: map.units.iter().map(|u| u.useful_bytes).collect(),
            experts: map.units.iter().map(|u| u.experts).collect(),
            stamp: vec![0; stamped],
            hot_steps: vec![0; stamped],
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
        let keys = self
            .key_base
            .iter()
            .zip(record)
            .map(|(&b, &id)| b + id as u32);
        match &self.layout {
            Layout::OneUnitPerKey { key_unit } => {
                for key in keys {
                    let unit = key_unit[key as usize] as usize;
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
            Layout::ExclusiveRuns {
                key_committed,
                key_useful,
                key_units,
            } => {
                for key in keys {
                    let k = key as usize;
                    if self.stamp[k] != gen {
                        self.stamp[k] = gen;
                        self.hot_steps[k] += 1;
                        c += key_committed[k];
                        u += key_useful[k];
                        x += 1;
                        n += key_units[k] as u64;
                    }
                }
            }
            Layout::General {
                unit_keys_start,
                unit_keys,
            } => {
                for key in keys {
                    for unit in self.map.units_of(key) {
                        let unit = unit as usize;
                        if self.stamp[unit] == gen {
                            continue;
                        }
                        self.stamp[unit] = gen;
                        self.hot_steps[unit] += 1;
                        c += self.committed[unit];
                        u += self.useful[unit];
                        n += 1;
                        let range =
                            unit_keys_start[unit] as usize..unit_keys_start[unit + 1] as usize;
                        for &k in &unit_keys[range] {
                            if self.key_stamp[k as usize] != gen {
                                self.key_stamp[k as usize] = gen;
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
        // hot_steps counts at most one per step, so it cannot exceed steps
        let always_on = |i: usize| self.hot_steps[i] as u64 == self.steps;
        let always_on_units = match &self.layout {
            Layout::ExclusiveRuns { key_units, .. } => (0..key_units.len())
                .filter(|&k| always_on(k))
                .map(|k| key_units[k] as u64)
                .sum(),
            _ => (0..self.hot_steps.len()).filter(|&i| always_on(i)).count() as u64,
        };
        Ok(StreamingMetrics {
            resident_mib_per_layer_step: self.sum_committed as f64 / layer_steps / MIB,
            transfer_mib_per_layer_step: self.sum_useful as f64 / layer_steps / MIB,
            resident_experts_per_layer_step: self.sum_experts as f64 / layer_steps,
            hot_units_per_layer_step: self.sum_units as f64 / layer_steps,
            waste_factor: committed as f64 / useful as f64,
            selectivity: self.sum_experts as f64 / self.selections as f64,
            always_on_units,
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

#[cfg(test)]
mod tests {
    use super::*;
    use policies::UnitInfo;
    use traces::{Header, ModelSpec, Provenance, SequenceData, SequenceInfo, TokenBlock};

    /// The general layout: two 3-byte experts packed contiguously into 4-byte pages, so page 0
    /// holds expert 0 and the first byte of expert 1, and expert 1 spans pages 0 and 1.
    #[test]
    fn units_shared_by_keys_and_keys_spanning_units() {
        let unit = |useful| UnitInfo {
            useful_bytes: useful,
            committed_bytes: 4,
            experts: 0,
            first_moe_layer: 0,
            last_moe_layer: 0,
        };
        let map = UnitMap {
            spec: "packed-pages".into(),
            paging: policies::Paging::Vmm,
            expert_bytes: 3,
            granule_bytes: 4,
            key_first: vec![0, 0],
            key_count: vec![1, 2],
            units: vec![unit(4), unit(2)],
        };
        let trace = Trace {
            header: Header {
                model: ModelSpec::uniform("t", 1, 2, 1),
                provenance: Provenance::default(),
                sequences: vec![SequenceInfo {
                    name: "s".into(),
                    prefill_tokens: 0,
                    decode_tokens: 2,
                }],
                has_weights: false,
                passes: None,
            },
            sequences: vec![SequenceData {
                prefill: TokenBlock::default(),
                decode: TokenBlock {
                    ids: vec![0, 1],
                    weights: None,
                },
            }],
        };
        // step 0: page 0 (experts 0 and 1 resident), 4 B committed, 4 useful
        // step 1: pages 0 and 1, experts 0 and 1, 8 B committed, 6 useful
        let m = streaming_metrics(&trace, PhaseSel::Decode, &map).unwrap();
        assert_eq!(m.resident_mib_per_layer_step, 12.0 / 2.0 / MIB);
        assert_eq!(m.transfer_mib_per_layer_step, 10.0 / 2.0 / MIB);
        assert_eq!(m.resident_experts_per_layer_step, 2.0);
        assert_eq!(m.hot_units_per_layer_step, 1.5);
        assert_eq!(m.selectivity, 2.0);
        assert_eq!(m.waste_factor, 8.0 / 6.0);
        assert_eq!(m.always_on_units, 1);
        assert_eq!(
            streaming_metrics(&trace, PhaseSel::Prefill, &map),
            Err(StreamingError::NoTokens("prefill"))
        );
    }
}
