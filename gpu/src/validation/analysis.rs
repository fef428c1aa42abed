//! The analysis of a validation: per row, a verdict that host noise cannot flip, and a table of
//! the per-call prices the replay measured beside the profile's.
//!
//! **Verdict.** Per row and block, the bias `b = ln(measured p50 / predicted p50)` (the
//! block's measured p50: the median of its repetitions' p50s). Each block has a host probe
//! `x` (the mean of the launch probes before and after it; for files without blocks, the
//! repetition's own launch µs per group). With probes on every block and at least two distinct
//! values, the row's bias is the least-squares line of `b` on `x` evaluated at the reference
//! probe `x_ref` (the calibration's probe when the profile records one, else the median of the
//! blocks' probes): the bias the row has in that host state. Otherwise it is the mean of the
//! blocks' biases. A block bootstrap ([`RESAMPLES`] resamples of the blocks with replacement,
//! PCG64 seeded with [`BOOTSTRAP_SEED`]) gives the 95% percentile interval of that estimate.
//! Read as an error `100 (exp(-b) - 1)` (the prediction against the measurement, the table's
//! sign), the row **passes** when the whole interval lies within +-[`GOAL_PCT`]%, **fails**
//! when it lies wholly outside, and is **undecided** otherwise or with fewer than two blocks.
//! Files without blocks have their repetitions taken as blocks (said in the output): they ran
//! back to back, so their interval is too narrow whenever the host's state held for all of them.
//!
//! **Components.** Per row and live-set band (granules mapped at the step's groups, from the
//! prediction's plan), the measured commit and decommit µs per granule (host time of the calls
//! over the granules the plan commits or decommits in those steps) against the engine's price of
//! the same steps; per row, the host's launch time and router wait per group against the
//! profile's `router_sync`; per block, the VMM arm's prices against the profile's.

use super::{Prediction, Validation, ValidationRow};
use crate::cost::{CostModel, ReadLive};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use validate::stats::{Line, Summary};

pub use super::text::GOAL_PCT;

/// Bootstrap resamples per row: 2000, enough that the 2.5% and 97.5% percentiles move by
/// well under 0.5 points of error between seeds on the stored replays' three blocks. Chosen.
pub const RESAMPLES: usize = 2000;
/// Seed of the bootstrap's PCG64 (fixed: the same validation gives the same interval).
pub const BOOTSTRAP_SEED: u64 = 22;
/// Upper edges of the live-set bands, granules: 1k, 3k and 6k, the live sets of the
/// calibration's live-set arms (issue 22); the last band is open.
pub const LIVE_BAND_EDGES: [f64; 3] = [1024.0, 3072.0, 6144.0];

/// What a row's interval says about the goal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Undecided,
}

impl Verdict {
    /// The verdict of an error interval `[lo, hi]` (percent) against +-`goal` percent:
    /// pass inside (bounds included), fail wholly outside on one side, undecided otherwise.
    pub fn of(lo: f64, hi: f64, goal: f64) -> Verdict {
        if lo >= -goal && hi <= goal {
            Verdict::Pass
        } else if lo > goal || hi < -goal {
            Verdict::Fail
        } else {
            Verdict::Undecided
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Undecided => "undecided",
        }
    }
}

/// Where the blocks of the analysis came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlocksFrom {
    /// Recorded blocks (`--blocks`).
    Blocks,
    /// A file without blocks: each repetition taken as a block.
    Repetitions,
}

/// One block of a row: its bias and its host probe.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockBias {
    /// `ln(measured p50 / predicted p50)` of the block.
    pub bias: f64,
    /// The block's host probe, µs per group (absent without a host breakdown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_us: Option<f64>,
}

/// A row's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowVerdict {
    pub policy: String,
    pub blocks: Vec<BlockBias>,
    /// The probe the bias is evaluated at, µs per group (absent: not adjusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_reference_us: Option<f64>,
    /// Slope of the bias on the probe over all blocks, per µs (absent: not adjusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_slope_per_us: Option<f64>,
    /// The row's bias and its bootstrap 95% interval (`ln(measured / predicted)`).
    pub bias: f64,
    pub bias_lo: f64,
    pub bias_hi: f64,
    /// The same as errors of the prediction, percent (`100 (exp(-bias) - 1)`); `lo <= hi`.
    pub error_pct: f64,
    pub error_pct_lo: f64,
    pub error_pct_hi: f64,
    pub verdict: Verdict,
}

/// The measured and modelled per-call prices of one row in one live-set band.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComponentRow {
    pub policy: String,
    /// Mean granules per page-in of the row (its unit size).
    pub unit_granules: f64,
    /// The band, as `lo-hi` granules (`6144-` for the open one).
    pub live_band: String,
    /// Mean live granules of the band's steps.
    pub live_granules: f64,
    /// Steps (over all repetitions) in the band.
    pub steps: usize,
    /// Commit µs per granule: measured (host) and the engine's (absent: nothing committed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_us_per_granule: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_model_us_per_granule: Option<f64>,
    /// Decommit µs per granule: measured and the engine's (absent: nothing decommitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decommit_us_per_granule: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decommit_model_us_per_granule: Option<f64>,
}

/// A row's host calls per group and per page-in, measured, with the profile's prices where
/// the model has one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowCalls {
    pub policy: String,
    /// Host time of the launches per group, µs (the model prices no host launch time).
    pub launch_us_per_group: f64,
    /// Host blocked on the router event per group, µs, and the profile's `router_sync`.
    pub router_wait_us_per_group: f64,
    pub router_sync_model_us: f64,
    /// H2D enqueue per page-in, µs (absent without page-ins), and the engine's H2D copy per
    /// page-in (the replay times no copy; the VMM arms do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2d_enqueue_us_per_page_in: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2d_copy_model_us_per_page_in: Option<f64>,
}

/// A block's VMM arm (before or after it) against the profile's prices at no live mapping.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmRow {
    pub block: u32,
    /// `before` or `after`.
    pub when: String,
    pub unit_granules: u32,
    /// Medians over the arm's cycles, and the profile's price of the same call.
    pub commit_us_per_granule: f64,
    pub commit_model_us_per_granule: f64,
    pub decommit_us_per_granule: f64,
    pub decommit_model_us_per_granule: f64,
    pub h2d_us: f64,
    pub h2d_model_us: f64,
}

/// The analysis block of a validation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub blocks_from: BlocksFrom,
    /// Bootstrap resamples and seed.
    pub resamples: usize,
    pub seed: u64,
    pub rows: Vec<RowVerdict>,
    pub components: Vec<ComponentRow>,
    pub calls: Vec<RowCalls>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arms: Vec<ArmRow>,
}

/// The analysis of `v`, whose rows were predicted as `preds` (same order). `probe_reference`:
/// the calibration's probe, µs per group, when known.
pub fn analyse(v: &Validation, preds: &[Prediction], probe_reference: Option<f64>) -> Analysis {
    let blocks_from = if v
        .rows
        .iter()
        .any(|r| r.repetitions.iter().any(|x| x.block.is_some()))
    {
        BlocksFrom::Blocks
    } else {
        BlocksFrom::Repetitions
    };
    let rows = v
        .rows
        .iter()
        .map(|r| {
            let blocks = row_blocks(v, r);
            row_verdict(&r.policy, &blocks, probe_reference)
        })
        .collect();
    let mut components = Vec::new();
    let mut calls = Vec::new();
    for (r, p) in v.rows.iter().zip(preds) {
        components.extend(component_rows(r, p));
        calls.extend(row_calls(r, p));
    }
    let cost = preds
        .iter()
        .find(|p| p.paging == crate::cost::Paging::Vmm)
        .map(Prediction::cost);
    Analysis {
        blocks_from,
        resamples: RESAMPLES,
        seed: BOOTSTRAP_SEED,
        rows,
        components,
        calls,
        arms: cost.map_or_else(Vec::new, |c| arm_rows(v, c)),
    }
}

/// A row's blocks: its repetitions grouped by recorded block (in block order), or each
/// repetition a block when none was recorded; each with its bias and probe.
pub fn row_blocks(v: &Validation, r: &ValidationRow) -> Vec<BlockBias> {
    let pred = r.predicted.p50_ms;
    let mut groups: Vec<(Option<u32>, Vec<usize>)> = Vec::new();
    for (i, x) in r.repetitions.iter().enumerate() {
        match (
            x.block,
            groups.iter_mut().find(|g| g.0.is_some() && g.0 == x.block),
        ) {
            (Some(_), Some(g)) => g.1.push(i),
            _ => groups.push((x.block, vec![i])),
        }
    }
    groups
        .iter()
        .filter_map(|(block, reps)| {
            let p50s: Vec<f64> = reps
                .iter()
                .map(|&i| r.repetitions[i].measured.p50_ms)
                .collect();
            let m = Summary::of(&p50s)?.median;
            let recorded = block.and_then(|b| v.blocks.iter().find(|x| x.block == b));
            let probe_us = match recorded {
                Some(rec) => Some(rec.probe_us()),
                None => mean_of(reps.iter().map(|&i| r.repetitions[i].launch_us_per_group())),
            };
            (m > 0.0 && pred > 0.0).then(|| BlockBias {
                bias: (m / pred).ln(),
                probe_us,
            })
        })
        .collect()
}

/// The mean of `xs`, `None` when any is `None` or there are none.
fn mean_of(xs: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = xs.collect::<Option<_>>()?;
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The probe-adjusted bias of `blocks`: the line of bias on probe at `x_ref` when every block
/// has a probe and at least two distinct probes occur, else the mean bias.
fn adjusted_bias(blocks: &[BlockBias], x_ref: Option<f64>) -> f64 {
    if let Some(x_ref) = x_ref {
        let pts: Option<Vec<(f64, f64)>> =
            blocks.iter().map(|b| Some((b.probe_us?, b.bias))).collect();
        if let Some(line) = pts.as_deref().and_then(Line::fit) {
            return line.intercept + line.slope * x_ref;
        }
    }
    blocks.iter().map(|b| b.bias).sum::<f64>() / blocks.len() as f64
}

/// Error of the prediction, percent, for a bias `b = ln(measured / predicted)`.
pub fn bias_to_error_pct(b: f64) -> f64 {
    100.0 * ((-b).exp() - 1.0)
}

/// The verdict of one row from its blocks (see the module's doc).
pub fn row_verdict(policy: &str, blocks: &[BlockBias], probe_reference: Option<f64>) -> RowVerdict {
    let probes: Option<Vec<f64>> = blocks.iter().map(|b| b.probe_us).collect();
    let line = probes.as_ref().and_then(|xs| {
        let pts: Vec<(f64, f64)> = xs.iter().zip(blocks).map(|(&x, b)| (x, b.bias)).collect();
        Line::fit(&pts)
    });
    let x_ref = line.as_ref().and_then(|_| {
        probe_reference.or_else(|| Summary::of(probes.as_deref().unwrap_or(&[])).map(|s| s.median))
    });
    let bias = if blocks.is_empty() {
        0.0
    } else {
        adjusted_bias(blocks, x_ref)
    };
    let (lo, hi) = bootstrap(blocks, x_ref);
    let (e_lo, e_hi) = (bias_to_error_pct(hi), bias_to_error_pct(lo));
    let verdict = if blocks.len() < 2 {
        Verdict::Undecided
    } else {
        Verdict::of(e_lo, e_hi, GOAL_PCT)
    };
    RowVerdict {
        policy: policy.to_string(),
        blocks: blocks.to_vec(),
        probe_reference_us: x_ref,
        probe_slope_per_us: x_ref.and(line.map(|l| l.slope)),
        bias,
        bias_lo: lo,
        bias_hi: hi,
        error_pct: bias_to_error_pct(bias),
        error_pct_lo: e_lo,
        error_pct_hi: e_hi,
        verdict,
    }
}

/// The 2.5% and 97.5% percentiles (nearest rank) of the adjusted bias over [`RESAMPLES`]
/// resamples of `blocks` with replacement; the estimate itself twice with fewer than two
/// blocks.
fn bootstrap(blocks: &[BlockBias], x_ref: Option<f64>) -> (f64, f64) {
    let n = blocks.len();
    if n < 2 {
        let b = if n == 1 { blocks[0].bias } else { 0.0 };
        return (b, b);
    }
    let mut rng = Pcg64::seed_from_u64(BOOTSTRAP_SEED);
    let mut sample = Vec::with_capacity(n);
    let mut est: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            sample.clear();
            sample.extend((0..n).map(|_| blocks[rng.gen_range(0..n)]));
            adjusted_bias(&sample, x_ref)
        })
        .collect();
    est.sort_by(f64::total_cmp);
    let rank = |q: f64| est[((q * RESAMPLES as f64).ceil() as usize).clamp(1, RESAMPLES) - 1];
    (rank(0.025), rank(0.975))
}

/// The live-set band of `live` granules, as its label.
fn band_label(live: f64) -> &'static str {
    match LIVE_BAND_EDGES.iter().position(|&e| live < e) {
        Some(0) => "0-1024",
        Some(1) => "1024-3072",
        Some(2) => "3072-6144",
        _ => "6144-",
    }
}

/// Running sums of one band of one row.
#[derive(Default)]
struct BandSums {
    live: f64,
    steps: usize,
    commit_us: f64,
    commit_model_us: f64,
    commit_granules: u64,
    decommit_us: f64,
    decommit_model_us: f64,
    decommit_granules: u64,
}

/// The component rows of one VMM row, one per live-set band its steps fall in.
fn component_rows(r: &ValidationRow, p: &Prediction) -> Vec<ComponentRow> {
    if p.paging != crate::cost::Paging::Vmm || r.predicted_parts.len() != p.steps {
        return Vec::new();
    }
    let live = p.live_granules_per_step();
    let (cg, dg) = (
        p.committed_granules_per_step(),
        p.decommitted_granules_per_step(),
    );
    let mut bands: Vec<(&'static str, BandSums)> = Vec::new();
    for x in &r.repetitions {
        for (i, h) in x.host.iter().enumerate().take(p.steps) {
            let label = band_label(live[i]);
            let pos = bands.iter().position(|b| b.0 == label).unwrap_or_else(|| {
                bands.push((label, BandSums::default()));
                bands.len() - 1
            });
            let b = &mut bands[pos].1;
            let parts = &r.predicted_parts[i];
            b.live += live[i];
            b.steps += 1;
            b.commit_us += h.commit_us;
            b.commit_model_us += parts.commit_us;
            b.commit_granules += cg[i];
            b.decommit_us += h.evict_us + h.late_evict_us;
            b.decommit_model_us += parts.decommit_us;
            b.decommit_granules += dg[i];
        }
    }
    bands.sort_by(|a, b| (a.1.live / a.1.steps as f64).total_cmp(&(b.1.live / b.1.steps as f64)));
    let page_ins: u64 = p
        .plan
        .groups
        .iter()
        .filter(|g| g.step as usize >= p.warm_up.steps)
        .map(|g| (g.page_ins.len() + g.background.len()) as u64)
        .sum();
    let unit_granules = if page_ins > 0 {
        cg.iter().sum::<u64>() as f64 / page_ins as f64
    } else {
        0.0
    };
    let per = |us: f64, g: u64| (g > 0).then(|| us / g as f64);
    bands
        .into_iter()
        .map(|(label, b)| ComponentRow {
            policy: r.policy.clone(),
            unit_granules,
            live_band: label.to_string(),
            live_granules: b.live / b.steps as f64,
            steps: b.steps,
            commit_us_per_granule: per(b.commit_us, b.commit_granules),
            commit_model_us_per_granule: per(b.commit_model_us, b.commit_granules),
            decommit_us_per_granule: per(b.decommit_us, b.decommit_granules),
            decommit_model_us_per_granule: per(b.decommit_model_us, b.decommit_granules),
        })
        .collect()
}

/// A row's host calls per group and per page-in (`None` without a host breakdown).
fn row_calls(r: &ValidationRow, p: &Prediction) -> Option<RowCalls> {
    let host: Vec<_> = r.repetitions.iter().flat_map(|x| &x.host).collect();
    let groups: u64 = host.iter().map(|h| u64::from(h.groups)).sum();
    if groups == 0 {
        return None;
    }
    let page_ins: u64 = host.iter().map(|h| u64::from(h.page_ins)).sum();
    let sum = |f: fn(&validate::HostBreakdown) -> f64| host.iter().map(|h| f(h)).sum::<f64>();
    let pred_page_ins = r.page_ins;
    let copy_model: f64 = r.predicted_parts.iter().map(|x| x.copy_us).sum();
    let vmm = p.paging == crate::cost::Paging::Vmm;
    Some(RowCalls {
        policy: r.policy.clone(),
        launch_us_per_group: sum(|h| h.launch_us) / groups as f64,
        router_wait_us_per_group: sum(|h| h.router_wait_us) / groups as f64,
        router_sync_model_us: p.cost().host_sync_us,
        h2d_enqueue_us_per_page_in: (vmm && page_ins > 0)
            .then(|| sum(|h| h.h2d_enqueue_us) / page_ins as f64),
        h2d_copy_model_us_per_page_in: (vmm && pred_page_ins > 0)
            .then(|| copy_model / pred_page_ins as f64),
    })
}

/// The VMM arms of `v`'s blocks against `cost`'s prices at no live mapping.
fn arm_rows(v: &Validation, cost: &CostModel) -> Vec<ArmRow> {
    let mut out = Vec::new();
    for b in &v.blocks {
        for (when, probe) in [("before", &b.before), ("after", &b.after)] {
            let Some(a) = &probe.vmm else { continue };
            let g = u64::from(a.unit_granules);
            out.push(ArmRow {
                block: b.block,
                when: when.to_string(),
                unit_granules: a.unit_granules,
                commit_us_per_granule: a.commit_us_per_granule.median,
                commit_model_us_per_granule: cost.commit_us_at(g, 0.0, ReadLive::default())
                    / g as f64,
                decommit_us_per_granule: a.decommit_us_per_granule.median,
                decommit_model_us_per_granule: cost.decommit_us_at(g, 0.0, ReadLive::default())
                    / g as f64,
                h2d_us: a.h2d_us.median,
                h2d_model_us: cost.copy_us(g * a.granule_bytes),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks whose error (the prediction against the measurement) is `err_pct` exactly, with
    /// no probe.
    fn blocks_at(errs_pct: &[f64]) -> Vec<BlockBias> {
        // error e = p/m - 1, so bias ln(m/p) = -ln(1 + e)
        errs_pct
            .iter()
            .map(|e| BlockBias {
                bias: -(1.0 + e / 100.0).ln(),
                probe_us: None,
            })
            .collect()
    }

    #[test]
    fn verdicts_flip_at_the_goal() {
        assert_eq!(Verdict::of(-10.0, 10.0, 10.0), Verdict::Pass);
        assert_eq!(Verdict::of(-10.001, 5.0, 10.0), Verdict::Undecided);
        assert_eq!(Verdict::of(10.001, 30.0, 10.0), Verdict::Fail);
        assert_eq!(Verdict::of(-30.0, -10.001, 10.0), Verdict::Fail);
        assert_eq!(Verdict::of(-30.0, 30.0, 10.0), Verdict::Undecided);
        // identical blocks: the interval is the point, so the verdict flips exactly at 10%
        for (e, v) in [
            (-9.99, Verdict::Pass),
            (-10.01, Verdict::Fail),
            (9.99, Verdict::Pass),
            (10.01, Verdict::Fail),
        ] {
            let r = row_verdict("e1", &blocks_at(&[e; 4]), None);
            assert!((r.error_pct - e).abs() < 1e-9, "{e}: {}", r.error_pct);
            assert!((r.error_pct_lo - e).abs() < 1e-9 && (r.error_pct_hi - e).abs() < 1e-9);
            assert_eq!(r.verdict, v, "{e}");
        }
    }

    #[test]
    fn a_spread_across_the_goal_is_undecided_and_one_block_never_decides() {
        // blocks at -2% and -18%: the resamples' means span about -2..-18 (all-first to
        // all-second), straddling -10%
        let r = row_verdict("e1", &blocks_at(&[-2.0, -18.0, -2.0, -18.0]), None);
        assert_eq!(r.verdict, Verdict::Undecided);
        assert!(r.error_pct_lo < -10.0 && r.error_pct_hi > -10.0, "{r:?}");
        assert!(r.error_pct_lo >= -18.0 - 1e-9 && r.error_pct_hi <= -2.0 + 1e-9);
        // the point estimate: the mean bias, read as an error
        let mean_bias = (-(0.98f64).ln() - (0.82f64).ln()) / 2.0;
        assert!((r.bias - mean_bias).abs() < 1e-12);
        let one = row_verdict("e1", &blocks_at(&[-1.0]), None);
        assert_eq!(one.verdict, Verdict::Undecided);
        assert!((one.error_pct + 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_probe_adjustment_recovers_the_bias_at_the_reference() {
        // bias = 0.05 + 0.01 (x - 40): blocks in a slow host state (x = 60) look 20 points
        // worse; at the reference x = 40 the bias is 0.05 in every resample with two distinct
        // probes, and the rest (one probe value drawn n times) fall back to the mean
        let xs = [40.0, 40.0, 60.0, 40.0, 60.0, 40.0];
        let blocks: Vec<BlockBias> = xs
            .iter()
            .map(|&x| BlockBias {
                bias: 0.05 + 0.01 * (x - 40.0),
                probe_us: Some(x),
            })
            .collect();
        let r = row_verdict("e1", &blocks, Some(40.0));
        assert!((r.bias - 0.05).abs() < 1e-12, "{}", r.bias);
        assert!((r.probe_slope_per_us.unwrap() - 0.01).abs() < 1e-12);
        assert_eq!(r.probe_reference_us, Some(40.0));
        // without a reference: the median probe (40) is used
        let r2 = row_verdict("e1", &blocks, None);
        assert_eq!(r2.probe_reference_us, Some(40.0));
        assert!((r2.bias - 0.05).abs() < 1e-12);
        // unadjusted, the mean bias is 0.05 + 0.01 x 20 x 2/6
        let plain: Vec<BlockBias> = blocks
            .iter()
            .map(|b| BlockBias {
                probe_us: None,
                ..*b
            })
            .collect();
        let r3 = row_verdict("e1", &plain, None);
        assert!((r3.bias - (0.05 + 0.2 / 3.0)).abs() < 1e-12);
        assert_eq!(r3.probe_reference_us, None);
        // error at 0.05: 100 (exp(-0.05) - 1) = -4.88%. A resample of x = 40 blocks only (a
        // chance of (4/6)^6 = 8.8%) falls back to their mean, 0.05 too; one of x = 60 blocks
        // only ((2/6)^6 = 0.14%, under the 2.5% tail) to 0.25: the interval is the point
        let e = 100.0 * ((-0.05f64).exp() - 1.0);
        assert!((r.error_pct - e).abs() < 1e-9);
        assert!((r.error_pct_lo - e).abs() < 1e-9 && (r.error_pct_hi - e).abs() < 1e-9);
        assert_eq!(r.verdict, Verdict::Pass);
        // unadjusted, the slow blocks pull the row past the goal: -11.0%
        assert!((r3.error_pct - 100.0 * ((-(0.05 + 0.2 / 3.0f64)).exp() - 1.0)).abs() < 1e-9);
        assert!(r3.error_pct < -10.0 && r3.verdict != Verdict::Pass);
    }

    #[test]
    fn the_bootstrap_is_the_seeds_and_percentiles_of_resampled_means() {
        let b = blocks_at(&[-3.0, -7.0, -5.0]);
        let (lo, hi) = bootstrap(&b, None);
        assert_eq!(bootstrap(&b, None), (lo, hi));
        // an independent bootstrap of the mean with the same generator and draws
        let mut rng = Pcg64::seed_from_u64(BOOTSTRAP_SEED);
        let mut means: Vec<f64> = (0..RESAMPLES)
            .map(|_| (0..3).map(|_| b[rng.gen_range(0..3)].bias).sum::<f64>() / 3.0)
            .collect();
        means.sort_by(f64::total_cmp);
        assert_eq!((lo, hi), (means[49], means[1949]));
        // the interval lies inside the blocks' range and holds the estimate
        let r = row_verdict("e1", &b, None);
        assert!(r.bias_lo <= r.bias && r.bias <= r.bias_hi);
        assert!(r.error_pct_lo >= -7.0 - 1e-9 && r.error_pct_hi <= -3.0 + 1e-9);
        assert_eq!(r.verdict, Verdict::Pass);
    }

    #[test]
    fn live_bands_follow_the_calibration_cells() {
        assert_eq!(band_label(0.0), "0-1024");
        assert_eq!(band_label(1023.9), "0-1024");
        assert_eq!(band_label(1024.0), "1024-3072");
        assert_eq!(band_label(3072.0), "3072-6144");
        assert_eq!(band_label(1e6), "6144-");
    }
}
