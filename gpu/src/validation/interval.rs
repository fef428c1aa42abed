//! Prediction intervals from the measured spread of the constants: the recorded plan re-priced
//! under `draws` profiles whose constants are each drawn uniformly within +-half their measured
//! relative spread ([`profile::Constant::relative_spread`]: (max - min) / value of the
//! repetitions), seeded, so the interval is deterministic. The 90% interval is the 5th to 95th
//! percentile (nearest rank) of the draws' step p50 (and p99). Only the cost model's constants
//! (VMM calls, copies, faults, the router round trip) are drawn; the compute model keeps its
//! medians. A constant without a recorded spread keeps its value.

use super::predict::Prediction;
use super::report::StepStats;
use crate::cost::{CostModel, CostOptions};
use anyhow::Result;
use profile::Profile;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

/// The 90% interval of one prediction's step p50 and p99, ms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval90 {
    pub p50_ms: [f64; 2],
    pub p99_ms: [f64; 2],
    /// Profiles drawn.
    pub draws: u32,
}

impl Interval90 {
    /// Whether `p50_ms` (a measured step p50) lies inside the p50 interval.
    pub fn holds_p50(&self, p50_ms: f64) -> bool {
        self.p50_ms[0] <= p50_ms && p50_ms <= self.p50_ms[1]
    }
}

/// `p` with every constant that records a relative spread `s > 0` multiplied by a factor drawn
/// uniformly from `[1 - s/2, 1 + s/2]` (floored at a tenth of the value, so a spread above 2
/// never draws a zero or negative rate).
pub fn perturbed(p: &Profile, rng: &mut Pcg64) -> Profile {
    let mut out = p.clone();
    for c in out.constants.values_mut() {
        if let Some(s) = c.relative_spread().filter(|&s| s > 0.0 && s.is_finite()) {
            let f: f64 = rng.gen_range(1.0 - 0.5 * s..=1.0 + 0.5 * s);
            c.value *= f.max(0.1);
            // the drawn value is no longer the median the range was recorded around
            c.min = None;
            c.max = None;
        }
    }
    out
}

/// The 5th and 95th percentile (nearest rank, rank ceil(q x n)) of `xs`.
pub fn band90(xs: &[f64]) -> [f64; 2] {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let q = |p: f64| s[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    [q(0.05), q(0.95)]
}

/// The 90% interval of `pred`, re-pricing its plan under `draws` profiles drawn from `hw`
/// (the profile that priced it) with seed `seed`.
pub fn interval(pred: &Prediction, hw: &Profile, draws: u32, seed: u64) -> Result<Interval90> {
    let base = pred.cost();
    let mut rng = Pcg64::seed_from_u64(seed);
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    for _ in 0..draws.max(1) {
        let drawn = perturbed(hw, &mut rng);
        let mut cost = CostModel::new(&drawn, base.paging, CostOptions::default())?;
        cost.outside_range = base.outside_range;
        cost.page_in_pageable_bytes_per_us = base.page_in_pageable_bytes_per_us;
        let (steps, _) = pred.reprice(&cost)?;
        let s = StepStats::of(&steps);
        p50.push(s.p50_ms);
        p99.push(s.p99_ms);
    }
    Ok(Interval90 {
        p50_ms: band90(&p50),
        p99_ms: band90(&p99),
        draws: draws.max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_band_is_the_5th_to_95th_nearest_rank() {
        // 1..=20: ranks ceil(0.05 x 20) = 1 and ceil(0.95 x 20) = 19
        let xs: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        assert_eq!(band90(&xs), [1.0, 19.0]);
        assert_eq!(band90(&[7.0]), [7.0, 7.0]);
    }

    #[test]
    fn draws_stay_within_half_the_spread_and_repeat_with_the_seed() {
        let p = profile::load("h200-linux").unwrap();
        let (mut a, mut b) = (Pcg64::seed_from_u64(3), Pcg64::seed_from_u64(3));
        let (x, y) = (perturbed(&p, &mut a), perturbed(&p, &mut b));
        assert_eq!(x, y);
        let mut moved = 0;
        for (k, c) in &p.constants {
            let v = x.constants[k].value;
            match c.relative_spread().filter(|&s| s > 0.0) {
                Some(s) => {
                    let lo = c.value * (1.0 - 0.5 * s).max(0.1);
                    assert!(
                        v >= lo - 1e-9 && v <= c.value * (1.0 + 0.5 * s) + 1e-9,
                        "{k}"
                    );
                    moved += usize::from(v != c.value);
                }
                // no spread recorded (the derived slopes, single readings): kept
                None => assert_eq!(v, c.value, "{k}"),
            }
        }
        assert!(moved >= 10, "{moved}");
    }
}
