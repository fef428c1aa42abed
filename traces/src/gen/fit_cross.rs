//! Fitting what couples tokens and layers beyond each layer's skew and locality (`sim trace
//! gen --fit-to`): the always-on experts and the cross-layer correlation.
//!
//! # Estimators
//! - **always-on experts**: per MoE layer, the number of the real trace's `always_on_keys`
//!   (keys selected by every token of every sequence, see [`crate::stats`]) in that layer. The
//!   generator makes that many of the layer's most popular experts always-on; a count is a
//!   count, so it is copied, not solved for.
//! - **cross-layer correlation**: the `cross_layer` probability whose generated trace has the
//!   real trace's overall `next_layer_predictability`. The statistic learns its successor table
//!   on the trace it scores, so it is inflated on short traces; the simulated traces therefore
//!   have the real trace's shape (its sequences at their mean decode length, as
//!   [`super::fit`] simulates them), the value averaged over replicates with their own seeds.
//!   Predictability is not monotone in `cross_layer` (rank successors fill slots that the
//!   locality's reused experts, themselves predictable on a short trace, would otherwise
//!   keep), so the value is the closest of a grid over [0, 1] in steps of 1 / [`GRID_STEPS`],
//!   with the per-layer skew, locality and always-on counts fixed.
//!
//! The generator's slot-wise successor cannot reach every recorded router's predictability:
//! on the bundled granite prose trace (0.630) its best is near 0.53, at `cross_layer` 0. The
//! fit then reports both figures (`target_predictability`, `fitted_predictability`).
//!
//! The fit is deterministic: every simulated trace has a fixed seed.

use super::fit::{FitOptions, LayerFit, SimShape};
use super::{generate_trace, GenParams};
use crate::model::ModelSpec;
use crate::stats::{trace_stats, TraceStats};
use crate::PhaseSel;
use serde::{Deserialize, Serialize};

/// Most replicate traces averaged per evaluation of the predictability: a bound on the fit's
/// time (each replicate is a whole simulated trace, and the grid evaluates 11 values), the
/// same role as the per-layer fit's `sim_tokens`.
const MAX_REPLICATES: u64 = 16;

/// Steps of the cross-layer grid over [0, 1]: 0.1 apart, finer than the statistic's response
/// (a few points of predictability over the whole range on the granite traces).
const GRID_STEPS: u32 = 10;

/// Seed offset of the cross-layer simulations, apart from the per-layer fits' seeds (`seed +
/// layer`), so the two fits never share a random stream.
const CROSS_SEED_OFFSET: u64 = 1 << 32;

/// The always-on counts and the cross-layer correlation fitted to a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CrossFit {
    /// Always-on experts per MoE layer (the real trace's always-on keys in each).
    pub always_on: Vec<u16>,
    /// Fitted cross-layer probability (0 when the trace has no next-layer statistic).
    pub cross_layer: f64,
    /// The real trace's `next_layer_predictability`, when it has one.
    pub target_predictability: Option<f64>,
    /// The same of the simulated traces at the fitted parameters.
    pub fitted_predictability: Option<f64>,
}

/// Always-on counts per MoE layer of `model` from the real trace's always-on keys.
pub fn always_on_counts(model: &ModelSpec, stats: &TraceStats) -> Vec<u16> {
    model
        .moe_layers()
        .iter()
        .map(|&l| {
            let n = stats
                .always_on_keys
                .iter()
                .filter(|k| k[0] as usize == l)
                .count();
            (n as u16).min(model.layers[l].top_k)
        })
        .collect()
}

/// Fit the always-on counts and the cross-layer correlation of the trace `stats` describes,
/// whose geometry is `model`, given its per-layer fits `layers` (from [`super::fit::fit`]).
pub fn fit_cross(
    model: &ModelSpec,
    stats: &TraceStats,
    layers: &[LayerFit],
    opts: &FitOptions,
) -> CrossFit {
    let always_on = always_on_counts(model, stats);
    let shape = SimShape::new(stats, opts.sim_tokens);
    let base = GenParams {
        preset: None,
        skew: layers.iter().map(|f| f.skew).collect(),
        locality: layers.iter().map(|f| f.locality).collect(),
        cross_layer: 0.0,
        sequences: shape.sequences,
        tokens: shape.seq_len,
        seed: 0,
        fitted_to: None,
        always_on: always_on.clone(),
    };
    let replicates = shape.replicates.min(MAX_REPLICATES);
    let predictability = |cross: f64| -> Option<f64> {
        let mut sum = 0.0;
        for r in 0..replicates {
            let p = GenParams {
                cross_layer: cross,
                seed: opts.seed.wrapping_add(CROSS_SEED_OFFSET + r),
                ..base.clone()
            };
            let trace = generate_trace(model, &p).ok()?;
            sum += trace_stats(&trace, PhaseSel::Decode)
                .ok()?
                .next_layer_predictability?;
        }
        Some(sum / replicates as f64)
    };
    let target = stats.next_layer_predictability;
    // the grid's values in order; ties keep the smaller probability (the simpler model)
    let cross_layer = match target {
        Some(t) => (0..=GRID_STEPS)
            .map(|i| i as f64 / GRID_STEPS as f64)
            .filter_map(|c| Some((c, (predictability(c)? - t).abs())))
            .fold(None, |best: Option<(f64, f64)>, x| match best {
                Some(b) if b.1 <= x.1 => Some(b),
                _ => Some(x),
            })
            .map_or(0.0, |b| b.0),
        None => 0.0,
    };
    CrossFit {
        fitted_predictability: target.and(predictability(cross_layer)),
        always_on,
        cross_layer,
        target_predictability: target,
    }
}
