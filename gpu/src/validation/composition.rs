//! The composition check: does the engine put the parts of a step together right, given the
//! right price for each? Per VMM row and repetition, the prediction's plans are priced again
//! with the VMM calls scaled so that their total over the measured steps is the repetition's
//! measured host time in those calls (commits: `commit_us`; decommits: `evict_us +
//! late_evict_us`), every other price the profile's; the step times that come out are held
//! against the repetition's measured ones. A row that matches here and misses in the plain
//! prediction has its error in the price of the VMM calls, not in how the engine composes them.
//!
//! The scale is one factor per repetition for commits and one for decommits (the engine prices
//! calls, not steps): the measured total is substituted, its split over the steps stays the
//! model's. The factors are found by fixed-point iteration (the oversubscription factor and any
//! price term not scaled here would leave the first guess short); what is left of the mismatch
//! is reported (`vmm_residual_pct`).

use super::report::{error_pct, StepStats};
use super::{Prediction, ValidationRow};
use crate::cost::{CostModel, Paging};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use validate::stats::Summary;

/// Goal of the check, percent: the substituted model's mean step within 1% of the measured
/// (issue 22's target for every VMM row).
pub const COMPOSITION_GOAL_PCT: f64 = 1.0;
/// Fixed-point iterations of the scale factors: the first lands within the oversubscription
/// jitter; 4 bring the stored rows' totals within 0.01%.
const ITERATIONS: usize = 4;

/// One repetition's check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompositionRep {
    /// Factors on the profile's commit and decommit prices.
    pub commit_scale: f64,
    pub decommit_scale: f64,
    /// Substituted VMM time against the measured, percent (what the iteration left).
    pub vmm_residual_pct: f64,
    /// The substituted model's step statistics and the repetition's measured ones, ms.
    pub predicted: StepStats,
    pub measured: StepStats,
    /// Errors of the substituted model, percent of the measured: mean and p50.
    pub error_pct_mean: f64,
    pub error_pct_p50: f64,
}

/// One VMM row's check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompositionRow {
    pub policy: String,
    pub repetitions: Vec<CompositionRep>,
    /// Median over the repetitions of the mean-step error, percent, and the range.
    pub error_pct_mean: f64,
    pub error_pct_mean_min: f64,
    pub error_pct_mean_max: f64,
}

/// `cost` with every commit price term scaled by `c` and every decommit term by `d`.
pub fn scale_vmm(cost: &CostModel, c: f64, d: f64) -> CostModel {
    let mut m = cost.clone();
    m.commit_fixed_us *= c;
    m.commit_per_granule_us *= c;
    m.commit_live_slope_us *= c;
    if let Some(p) = m.commit_live_power.as_mut() {
        p.scale_us *= c;
    }
    m.commit_fresh_us *= c;
    m.commit_read_slope_us *= c;
    m.commit_read_unit_slope_us *= c;
    m.decommit_fixed_us *= d;
    m.decommit_per_granule_us *= d;
    m.decommit_live_slope_us *= d;
    if let Some(p) = m.decommit_live_power.as_mut() {
        p.scale_us *= d;
    }
    m.decommit_read_slope_us *= d;
    m.decommit_read_unit_slope_us *= d;
    m
}

/// The check of `row` (predicted as `pred`); `None` for OS-paged rows and rows without a
/// host breakdown of every measured step.
pub fn composition(row: &ValidationRow, pred: &Prediction) -> Result<Option<CompositionRow>> {
    if pred.paging != Paging::Vmm
        || row.repetitions.is_empty()
        || row.repetitions.iter().any(|x| x.host.len() != pred.steps)
    {
        return Ok(None);
    }
    let mut reps = Vec::with_capacity(row.repetitions.len());
    for x in &row.repetitions {
        let commit: f64 = x.host.iter().map(|h| h.commit_us + h.h2d_enqueue_us).sum();
        let decommit: f64 = x.host.iter().map(|h| h.evict_us + h.late_evict_us).sum();
        let (mut c, mut d) = (1.0, 1.0);
        let mut priced = pred.reprice(&scale_vmm(pred.cost(), c, d))?;
        for _ in 0..ITERATIONS {
            let pc: f64 = priced.1.iter().map(|p| p.commit_us).sum();
            let pd: f64 = priced.1.iter().map(|p| p.decommit_us).sum();
            c *= ratio(commit, pc);
            d *= ratio(decommit, pd);
            priced = pred.reprice(&scale_vmm(pred.cost(), c, d))?;
        }
        let got: f64 = priced.1.iter().map(|p| p.commit_us + p.decommit_us).sum();
        let predicted = StepStats::of(&priced.0);
        let measured = StepStats::of(&x.step_us);
        reps.push(CompositionRep {
            commit_scale: c,
            decommit_scale: d,
            vmm_residual_pct: if commit + decommit > 0.0 {
                error_pct(got, commit + decommit)
            } else {
                0.0
            },
            error_pct_mean: error_pct(predicted.mean_ms, measured.mean_ms),
            error_pct_p50: error_pct(predicted.p50_ms, measured.p50_ms),
            predicted,
            measured,
        });
    }
    let Some(s) = Summary::of(&reps.iter().map(|r| r.error_pct_mean).collect::<Vec<_>>()) else {
        return Ok(None); // a step time that is not finite: nothing to hold against
    };
    Ok(Some(CompositionRow {
        policy: row.policy.clone(),
        repetitions: reps,
        error_pct_mean: s.median,
        error_pct_mean_min: s.min,
        error_pct_mean_max: s.max,
    }))
}

/// `measured / priced`, 1 when nothing was priced (no call to scale).
fn ratio(measured: f64, priced: f64) -> f64 {
    if priced > 0.0 && measured > 0.0 {
        measured / priced
    } else {
        1.0
    }
}
