//! The CPU-lane work of a trace, step by step.

use crate::cache::stream::round_robin_requests;
use traces::{PhaseSel, Trace};

/// One CPU expert call: expert `expert` of MoE layer `layer` (a `KeySpace` index) on the
/// `tokens` tokens of its step that picked it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuCall {
    /// MoE layer, `0..num_moe_layers`.
    pub layer: u32,
    /// Expert within the layer.
    pub expert: u16,
    /// Tokens of the step that selected it (>= 1).
    pub tokens: u32,
}

/// The CPU calls of one step, layer by layer (a layer's experts in the order the step's
/// requests first picked them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuStep {
    /// The calls, one per distinct (layer, expert).
    pub calls: Vec<CpuCall>,
}

/// The steps of `trace` in `phases` as the engine forms them without a queue: requests
/// interleaved round-robin across sequences ([`round_robin_requests`]), `batch` consecutive
/// requests a step (fifo); of each step, the calls of the first `cpu_layers` MoE layers. At
/// most `limit` steps.
pub fn cpu_steps(
    trace: &Trace,
    phases: PhaseSel,
    cpu_layers: usize,
    batch: usize,
    limit: Option<usize>,
) -> Vec<CpuStep> {
    let ks = trace.keyspace();
    let cpu_layers = cpu_layers.min(ks.num_moe_layers());
    let requests = round_robin_requests(trace, phases);
    requests
        .chunks(batch.max(1))
        .take(limit.unwrap_or(usize::MAX))
        .map(|reqs| {
            let mut calls: Vec<CpuCall> = Vec::new();
            for m in 0..cpu_layers {
                let first = calls.len();
                for r in reqs {
                    for t in r.tokens() {
                        for &e in trace.selection(&ks, r.sequence as usize, r.phase, t, m) {
                            match calls[first..].iter_mut().find(|c| c.expert == e) {
                                Some(c) => c.tokens += 1,
                                None => calls.push(CpuCall {
                                    layer: m as u32,
                                    expert: e,
                                    tokens: 1,
                                }),
                            }
                        }
                    }
                }
            }
            CpuStep { calls }
        })
        .collect()
}
