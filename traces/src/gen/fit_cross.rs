//! Fitting what couples tokens and layers beyond each layer's skew and locality (`sim trace
//! gen --fit-to`): the always-on experts, the cross-layer correlation and the token
//! archetypes.
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
//! - **token archetypes**: the generator's slot-wise successor cannot reach every recorded
//!   router's predictability (on the bundled granite prose trace, 0.630, its best is near
//!   0.53, at `cross_layer` 0), so with `cross_layer` fixed at its fitted value the archetype
//!   `share` is the closest of a grid over [0, 1] in steps of 1 / [`SHARE_STEPS`] to the same
//!   target, for [`archetype_count`] archetypes (4 on granite; share 0.825 there, simulated
//!   predictability 0.626). The predictability climbs with the share (at 4 archetypes on
//!   granite: 0.53 at 0, 0.61 at 0.8, 0.75 at 1), and the archetypes, spread over disjoint
//!   experts, add no always-on key. A share of 0 (no archetype) is in the grid, so the fit
//!   never ends farther from the target than the cross-layer probability alone. Skew and
//!   locality are not refitted with the archetypes, which move the per-layer statistics a
//!   little: `sim trace gen --fit-to traces/data/granite/prose.bin --tokens 64` (seed 0) has
//!   a mean layer entropy of 4.77 bits against the recording's 4.68, and an overall reuse of
//!   0.49 against 0.47.
//!
//! The fit reports both figures (`target_predictability`, `fitted_predictability`).
//!
//! The fit is deterministic: every simulated trace has a fixed seed.

use super::fit::{FitOptions, LayerFit, SimShape};
use super::{generate_trace, Archetypes, GenParams, MAX_ARCHETYPES};
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

/// Steps of the archetype share's grid over [0, 1]: 0.025 apart. On the granite prose trace
/// the predictability climbs about 0.65 per unit of share near its fitted value, so a step
/// moves it by about 0.016, under 3% of the recording's 0.630.
const SHARE_STEPS: u32 = 40;

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
    /// Fitted token archetypes, fitted with `cross_layer` fixed; `None` when a share of 0
    /// comes closest (or the trace has no next-layer statistic).
    pub archetypes: Option<Archetypes>,
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
        archetypes: None,
    };
    let replicates = shape.replicates.min(MAX_REPLICATES);
    let count = archetype_count(model);
    let predictability = |cross: f64, share: f64| -> Option<f64> {
        let mut sum = 0.0;
        for r in 0..replicates {
            let p = GenParams {
                cross_layer: cross,
                seed: opts.seed.wrapping_add(CROSS_SEED_OFFSET + r),
                archetypes: (share > 0.0).then_some(Archetypes { count, share }),
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
    let (cross_layer, share) = match target {
        Some(t) => {
            let cross = closest(GRID_STEPS, t, |c| predictability(c, 0.0));
            (cross, closest(SHARE_STEPS, t, |s| predictability(cross, s)))
        }
        None => (0.0, 0.0),
    };
    CrossFit {
        fitted_predictability: target.and(predictability(cross_layer, share)),
        always_on,
        cross_layer,
        archetypes: (share > 0.0).then_some(Archetypes { count, share }),
        target_predictability: target,
    }
}

/// Archetypes of the fit for `model`: the fewest whose selections cover every expert of its
/// widest-covered MoE layer once, `max ceil(E_L / k_L)` (4 on granite's 32 experts, top-8),
/// so that each expert belongs to one archetype (see [`super::Archetypes`]); at most
/// [`MAX_ARCHETYPES`].
pub fn archetype_count(model: &ModelSpec) -> u32 {
    model
        .moe_layers()
        .iter()
        .map(|&l| {
            let s = &model.layers[l];
            (s.experts as u32).div_ceil(s.top_k.max(1) as u32)
        })
        .max()
        .unwrap_or(1)
        .clamp(1, MAX_ARCHETYPES)
}

/// The value of a grid over [0, 1] in `steps` steps whose `f` is closest to `target`; ties
/// (and values where `f` has no answer) keep the smaller value, the simpler model; 0 when
/// `f` answers nowhere.
fn closest(steps: u32, target: f64, f: impl Fn(f64) -> Option<f64>) -> f64 {
    (0..=steps)
        .map(|i| i as f64 / steps as f64)
        .filter_map(|x| Some((x, (f(x)? - target).abs())))
        .fold(None, |best: Option<(f64, f64)>, x| match best {
            Some(b) if b.1 <= x.1 => Some(b),
            _ => Some(x),
        })
        .map_or(0.0, |b| b.0)
}
