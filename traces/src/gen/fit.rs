//! Fitting the generator's skew and locality to a real trace (`sim trace gen --fit-to`).
//!
//! # Estimators (method of simulated moments, per MoE layer)
//! - **skew**: the Zipf exponent whose generated layer has the same `entropy_bits` (Shannon
//!   entropy of the layer's access distribution, see [`crate::stats`]) as the real layer.
//!   Entropy falls monotonically as the exponent grows, so the exponent is found by bisection
//!   on [0, [`MAX_FIT_SKEW`]].
//! - **locality**: the reuse probability whose generated layer has the same `temporal_reuse`
//!   as the real layer. Observed reuse exceeds the locality parameter (fresh draws also land on
//!   the previous token's popular experts), so it is solved for, again by bisection on [0, 1],
//!   which reuse grows with. A trace without two consecutive tokens gives locality 0.
//!
//! The two interact (reuse concentrates the access distribution), so they are solved
//! alternately for `rounds` rounds. The simulated layer reproduces the real trace's
//! finite-sample conditions: the same number of sequences of the same mean length, repeated
//! until `sim_tokens` tokens are drawn, the entropy averaged over those replicates (the plug-in
//! entropy of a short trace is biased low, and the replicates carry the same bias). Each layer
//! is simulated with its own fixed seed, so the fit is deterministic; layers run in parallel.
//!
//! Always-on experts and cross-layer correlation couple layers and tokens, so they are fitted
//! on whole simulated traces afterwards, in [`super::fit_cross`].

use super::{GenParams, Generator};
use crate::model::ModelSpec;
use crate::stats::{entropy_bits, TraceStats};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Upper end of the skew search. At 8 the hottest of 32 experts already takes over 99% of the
/// fresh draws, beyond what any recorded router shows.
pub const MAX_FIT_SKEW: f64 = 8.0;

/// Effort of the fit.
#[derive(Clone, Debug, PartialEq)]
pub struct FitOptions {
    /// Tokens drawn per simulated evaluation (more = less noise, slower).
    pub sim_tokens: u64,
    /// Alternating skew/locality rounds.
    pub rounds: usize,
    /// Bisection steps per parameter and round (the bracket halves each step).
    pub iterations: usize,
    /// Base seed of the simulations (layer i uses `seed + i`).
    pub seed: u64,
}

impl Default for FitOptions {
    /// 8,192 simulated tokens, 3 rounds of 12 bisection steps: a skew resolution of
    /// 8 / 2^12 ~ 0.002, below the sampling noise of an 8,192-token simulation.
    fn default() -> Self {
        FitOptions {
            sim_tokens: 8192,
            rounds: 3,
            iterations: 12,
            seed: 0,
        }
    }
}

/// The fitted parameters of one MoE layer and the statistics they reproduce.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerFit {
    /// Model layer index.
    pub layer: usize,
    /// Fitted Zipf exponent.
    pub skew: f64,
    /// Fitted reuse probability.
    pub locality: f64,
    /// The real layer's entropy (bits).
    pub target_entropy_bits: f64,
    /// The real layer's temporal reuse, when it has consecutive tokens.
    pub target_reuse: Option<f64>,
    /// Entropy of the simulated layer at the fitted parameters.
    pub fitted_entropy_bits: f64,
    /// Temporal reuse of the simulated layer at the fitted parameters.
    pub fitted_reuse: f64,
}

/// Shape of one simulated evaluation: `sequences` x `seq_len` tokens, `replicates` times.
#[derive(Clone, Copy, Debug)]
pub(super) struct SimShape {
    pub(super) sequences: u64,
    pub(super) seq_len: u64,
    pub(super) replicates: u64,
}

impl SimShape {
    pub(super) fn new(stats: &TraceStats, sim_tokens: u64) -> Self {
        let sim_tokens = sim_tokens.max(2);
        let seqs = stats.sequences.iter().filter(|s| s.tokens > 0).count() as u64;
        let seqs = seqs.max(1);
        let seq_len = (stats.tokens / seqs).clamp(1, sim_tokens);
        let sequences = seqs.min((sim_tokens / seq_len).max(1));
        let replicates = (sim_tokens / (sequences * seq_len)).clamp(1, 64);
        SimShape {
            sequences,
            seq_len,
            replicates,
        }
    }
}

/// Mean entropy (bits) over replicates and pooled temporal reuse of one simulated layer.
fn simulate(
    experts: u16,
    k: u16,
    skew: f64,
    locality: f64,
    shape: SimShape,
    seed: u64,
) -> (f64, f64) {
    let model = ModelSpec::uniform("fit", 1, experts, k);
    let params = GenParams {
        preset: None,
        skew: vec![skew],
        locality: vec![locality],
        cross_layer: 0.0,
        sequences: shape.sequences,
        tokens: shape.seq_len,
        seed,
        fitted_to: None,
        always_on: Vec::new(),
        archetypes: None,
    };
    let mut g = Generator::new(&model, &params).expect("fit parameters are in range");
    let k = k as usize;
    let mut rec = vec![0u16; k];
    let mut prev = vec![0u16; k];
    let (mut hits, mut slots) = (0u64, 0u64);
    let mut entropy_sum = 0.0;
    let mut counts = vec![0u64; experts as usize];
    for _ in 0..shape.replicates {
        counts.iter_mut().for_each(|c| *c = 0);
        for _ in 0..shape.sequences {
            g.start_sequence();
            for t in 0..shape.seq_len {
                g.next_token(&mut rec);
                for &e in &rec {
                    counts[e as usize] += 1;
                }
                if t > 0 {
                    hits += rec.iter().filter(|e| prev.contains(e)).count() as u64;
                    slots += k as u64;
                }
                prev.copy_from_slice(&rec);
            }
        }
        entropy_sum += entropy_bits(&counts);
    }
    let reuse = if slots > 0 {
        hits as f64 / slots as f64
    } else {
        0.0
    };
    (entropy_sum / shape.replicates as f64, reuse)
}

/// Bisection for `f(x) = target` on [lo, hi] with `f` monotone (`increasing` says which way);
/// clamps to the end of the bracket when the target lies outside f's range there.
pub(super) fn solve(
    mut lo: f64,
    mut hi: f64,
    increasing: bool,
    target: f64,
    iterations: usize,
    f: impl Fn(f64) -> f64,
) -> f64 {
    let below = |v: f64| if increasing { v < target } else { v > target };
    if !below(f(lo)) {
        return lo;
    }
    if below(f(hi)) {
        return hi;
    }
    for _ in 0..iterations {
        let mid = 0.5 * (lo + hi);
        if below(f(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Fit skew and locality for every MoE layer of the trace `stats` describes.
pub fn fit(stats: &TraceStats, opts: &FitOptions) -> Vec<LayerFit> {
    let shape = SimShape::new(stats, opts.sim_tokens);
    stats
        .layers
        .par_iter()
        .enumerate()
        .map(|(i, l)| {
            let seed = opts.seed.wrapping_add(i as u64);
            let sim = |s: f64, loc: f64| simulate(l.num_experts, l.top_k, s, loc, shape, seed);
            let target_reuse = l.temporal_reuse;
            let mut locality = target_reuse.unwrap_or(0.0);
            let mut skew = 1.0;
            for _ in 0..opts.rounds.max(1) {
                skew = solve(
                    0.0,
                    MAX_FIT_SKEW,
                    false,
                    l.entropy_bits,
                    opts.iterations,
                    |s| sim(s, locality).0,
                );
                locality = match target_reuse {
                    Some(r) => solve(0.0, 1.0, true, r, opts.iterations, |loc| sim(skew, loc).1),
                    None => 0.0,
                };
            }
            let (fitted_entropy_bits, fitted_reuse) = sim(skew, locality);
            LayerFit {
                layer: l.layer,
                skew,
                locality,
                target_entropy_bits: l.entropy_bits,
                target_reuse,
                fitted_entropy_bits,
                fitted_reuse,
            }
        })
        .collect()
}
