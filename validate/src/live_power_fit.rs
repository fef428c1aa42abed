//! The concave live-set curve: the per-granule VMM price against the granules mapped, fitted
//! as a power law to `sim calibrate --only live-set` sets that reach large live sets. Pure CPU.
//!
//! On the H100 of 2026-12-07 the per-granule commit price grew from 28.4 to 38.9 µs between 0
//! and 36,248 live granules, faster at first than later (about L^0.6): a line through the
//! points under-prices the middle and over-prices past the end (validate/data/
//! h100-linux-2026-12-07/live-set/livefit.txt). The form, per granule (µs):
//!
//! `c(L) = base + scale x (L / 1024)^exponent`, `0 < exponent <= 1`,
//!
//! fitted in two steps: per live level `L`, `t = fixed + g x c(L)` through the cells of unit
//! sizes `g` (least squares on relative residuals, as [`crate::live_set_fit`]), then `c(L)`
//! against `L` by least squares, the exponent on a grid of [`EXPONENT_STEP`] (the best of the
//! closed-form `(base, scale)` fits at each grid point). The cost model adds
//! `scale x (L / 1024)^exponent` to the profile's per-granule price (`base` is reported, not
//! used, as the linear fit's intercept is not).

use crate::calibrate::{GpuWork, LiveSetArm, LiveSetCalibration};
use crate::live_set_fit::{cell_medians, Call};
use profile::{Constant, ConstantName as N, Domain, Measurement, Profile, Regressor as R, Span};

/// Step of the exponent grid (0.01 ..= 1.00).
pub const EXPONENT_STEP: f64 = 0.01;

/// One fitted curve.
#[derive(Clone, Debug, PartialEq)]
pub struct PowerFit {
    /// Per-granule price with nothing live, µs (the fit's intercept).
    pub base_us: f64,
    /// Per-granule price added at 1024 live granules, µs.
    pub scale_us: f64,
    /// The exponent, in (0, 1].
    pub exponent: f64,
    /// Root mean square of the residuals of `c(L)`, µs per granule.
    pub rms_us: f64,
}

impl PowerFit {
    /// The price added per granule at `live` granules, µs.
    pub fn added_us(&self, live: f64) -> f64 {
        self.scale_us * (live / 1024.0).powf(self.exponent)
    }
}

/// Per live level of `work`'s `call` cells: the per-granule price `c(L)` of the weighted line
/// `t = fixed + g c` through the level's unit sizes (weights `1 / t^2`), sorted by level.
/// Levels with fewer than two unit sizes are left out.
pub fn level_prices(arm: &LiveSetArm, work: GpuWork, call: Call) -> Vec<(f64, f64)> {
    let cells = cell_medians(arm, work, call);
    let levels: std::collections::BTreeSet<u64> = cells.iter().map(|c| c.1).collect();
    levels
        .into_iter()
        .filter_map(|l| {
            let pts: Vec<(f64, f64)> = cells
                .iter()
                .filter(|c| c.1 == l && c.2 > 0.0)
                .map(|c| (c.0 as f64, c.2))
                .collect();
            let ws: Vec<f64> = pts.iter().map(|p| 1.0 / (p.1 * p.1)).collect();
            line(&pts, &ws).map(|(_, c)| (l as f64, c))
        })
        .collect()
}

/// Weighted least-squares line `y = a + b x` through `pts`; `None` with fewer than two
/// distinct `x`.
fn line(pts: &[(f64, f64)], ws: &[f64]) -> Option<(f64, f64)> {
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (&(x, y), &w) in pts.iter().zip(ws) {
        sw += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let d = sw * sxx - sx * sx;
    if pts.len() < 2 || d.abs() <= 1e-12 * sw * sxx {
        return None;
    }
    let b = (sw * sxy - sx * sy) / d;
    Some(((sy - b * sx) / sw, b))
}

/// The `(base, scale)` of `c = base + scale (L / 1024)^e` through `levels` at exponent `e`,
/// unweighted, and the residuals' sum of squares.
pub fn fit_at(levels: &[(f64, f64)], e: f64) -> Option<(f64, f64, f64)> {
    let pts: Vec<(f64, f64)> = levels
        .iter()
        .map(|&(l, c)| ((l / 1024.0).powf(e), c))
        .collect();
    let (a, b) = line(&pts, &vec![1.0; pts.len()])?;
    let ss = pts.iter().map(|&(x, y)| (y - a - b * x).powi(2)).sum();
    Some((a, b, ss))
}

/// The power law through `levels` (`(L, c(L))`): the exponent of least residual sum of
/// squares on the grid (the first on ties). `None` with fewer than three levels (two fix any
/// exponent), or when the best scale is not above 0 (no growth to describe).
pub fn fit(levels: &[(f64, f64)]) -> Option<PowerFit> {
    if levels.len() < 3 || levels.iter().any(|l| !(l.0.is_finite() && l.1.is_finite())) {
        return None;
    }
    let steps = (1.0 / EXPONENT_STEP).round() as u32;
    let mut best: Option<(f64, (f64, f64, f64))> = None;
    for i in 1..=steps {
        let e = i as f64 * EXPONENT_STEP;
        let Some(f) = fit_at(levels, e) else { continue };
        if best.as_ref().is_none_or(|b| f.2 < b.1 .2) {
            best = Some((e, f));
        }
    }
    let (exponent, (base_us, scale_us, ss)) = best?;
    (scale_us > 0.0).then(|| PowerFit {
        base_us,
        scale_us,
        exponent,
        rms_us: (ss / levels.len() as f64).sqrt(),
    })
}

/// Adds the commit and decommit curves of the busy cells (kernels between the calls, what a
/// decode step does) of `sets` (`sim calibrate --only live-set`, pooled: every set's cells
/// together) to `p`, each as its scale and exponent with the sets' live and unit-size ranges
/// as domain. `names` name the sets in the provenance (file names). The spread of a scale is
/// that of the scales fitted to each set alone at the pooled exponent; of an exponent, that of
/// each set's own best exponent. A call whose curve does not fit is left out (the profile
/// keeps its linear slope).
pub fn add_to_profile(sets: &[LiveSetCalibration], names: &[String], p: &mut Profile) {
    let Some(first) = sets.first() else { return };
    let pooled = LiveSetArm {
        points: sets
            .iter()
            .flat_map(|s| s.live_set.points.clone())
            .collect(),
        ..Default::default()
    };
    let busy: Vec<_> = pooled
        .points
        .iter()
        .filter(|q| q.work == GpuWork::Kernels)
        .collect();
    let domain = Domain::of([
        Span::of_levels(R::LiveGranules, busy.iter().map(|q| q.live_granules as f64)),
        Span::of_levels(R::UnitGranules, busy.iter().map(|q| q.granules as f64)),
    ]);
    for (call, scale, exp, what) in [
        (
            Call::Commit,
            N::VmmCommitLivePower,
            N::VmmCommitLivePowerExp,
            "commit (cuMemCreate + cuMemMap + cuMemSetAccess per granule)",
        ),
        (
            Call::Decommit,
            N::VmmDecommitLivePower,
            N::VmmDecommitLivePowerExp,
            "decommit (cuMemUnmap + cuMemRelease per granule)",
        ),
    ] {
        let levels = level_prices(&pooled, GpuWork::Kernels, call);
        let Some(f) = fit(&levels) else { continue };
        let per_set: Vec<&LiveSetArm> = sets.iter().map(|s| &s.live_set).collect();
        let own = |arm: &LiveSetArm| level_prices(arm, GpuWork::Kernels, call);
        let scales: Vec<f64> = per_set
            .iter()
            .filter_map(|a| fit_at(&own(a), f.exponent).map(|x| x.1))
            .collect();
        let exps: Vec<f64> = per_set
            .iter()
            .filter_map(|a| fit(&own(a)).map(|x| x.exponent))
            .collect();
        let spread = |xs: &[f64], v: f64| {
            (xs.len() == sets.len() && sets.len() > 1 && v > 0.0).then(|| {
                let (lo, hi) = xs
                    .iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                        (l.min(x), h.max(x))
                    });
                (hi - lo) / v
            })
        };
        let prices: Vec<String> = levels
            .iter()
            .map(|(l, c)| format!("{}: {c:.2}", l))
            .collect();
        let method = format!(
            "live-set arm (`sim calibrate --only live-set`), per-unit {what}, kernels between the calls; per live level, the per-granule price c(L) of the line t = fixed + g x c(L) through the unit sizes (least squares on relative residuals; cell = median over blocks of block medians): {}; then c(L) = base + scale x (L / 1024)^exponent by least squares, the exponent on a grid of {EXPONENT_STEP}: base {:.2} µs, scale {:.3} µs, exponent {:.2} (rms {:.2} µs per granule); the cost model adds scale x (L / 1024)^exponent per granule",
            prices.join(", "),
            f.base_us,
            f.scale_us,
            f.exponent,
            f.rms_us
        );
        let meas = |spread: Option<f64>| Measurement {
            gpu: first.device.gpu.clone(),
            driver: first.device.driver.clone(),
            cuda: first.device.cuda.clone(),
            date: first.device.date.clone(),
            method: method.clone(),
            repetitions: Some(sets.len() as u32),
            spread,
            statistic: Some("least-squares fit over per-level prices of the pooled sets".into()),
            source: Some(format!(
                "sim calibrate --only live-set (validate crate): {}",
                names.join(", ")
            )),
        };
        p.set(
            scale,
            Constant::measured(f.scale_us, "us", meas(spread(&scales, f.scale_us)))
                .with_domain(domain.clone()),
        );
        p.set(
            exp,
            Constant::measured(f.exponent, "ratio", meas(spread(&exps, f.exponent)))
                .with_domain(domain.clone()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::LiveSetPoint;
    use crate::stats::Summary;

    #[test]
    fn exact_power_levels_give_back_their_curve() {
        // c = 28 + 1.25 (L / 1024)^0.6; by hand at L = 32768: 32^0.6 = 2^3 = 8 -> 38
        let c = |l: f64| 28.0 + 1.25 * (l / 1024.0).powf(0.6);
        assert!((c(32768.0) - 38.0).abs() < 1e-12);
        let levels: Vec<_> = [0.0, 1024.0, 4096.0, 16384.0, 32768.0]
            .iter()
            .map(|&l| (l, c(l)))
            .collect();
        let f = fit(&levels).unwrap();
        assert!((f.exponent - 0.6).abs() < 1e-9, "{f:?}");
        assert!((f.base_us - 28.0).abs() < 1e-9 && (f.scale_us - 1.25).abs() < 1e-9);
        assert!(f.rms_us < 1e-9);
        assert!((f.added_us(32768.0) - 10.0).abs() < 1e-9);
        // a line is the exponent 1
        let lin: Vec<_> = [0.0, 2048.0, 6144.0]
            .iter()
            .map(|&l| (l, 5.0 + 0.5 * l / 1024.0))
            .collect();
        let f = fit(&lin).unwrap();
        assert!((f.exponent - 1.0).abs() < 1e-12 && (f.scale_us - 0.5).abs() < 1e-9);
        // two levels, or a falling price: no curve
        assert_eq!(fit(&lin[..2]), None);
        let fall: Vec<_> = lin.iter().map(|&(l, c)| (l, 10.0 - c)).collect();
        assert_eq!(fit(&fall), None);
    }

    #[test]
    fn level_prices_are_the_per_granule_slope_of_each_level() {
        // t = 10 + g (30 + L / 1024) at every block: c(L) = 30 + L / 1024 exactly
        let pt = |g: u64, l: u64| {
            let t = 10.0 + g as f64 * (30.0 + l as f64 / 1024.0);
            LiveSetPoint {
                block: 0,
                granules: g,
                live_granules: l,
                work: GpuWork::Kernels,
                commit_us: Summary::of(&[t]).unwrap(),
                decommit_us: Summary::of(&[t / 2.0]).unwrap(),
            }
        };
        let arm = LiveSetArm {
            points: [2u64, 8, 32]
                .iter()
                .flat_map(|&g| [0u64, 2048].into_iter().map(move |l| pt(g, l)))
                .collect(),
            ..Default::default()
        };
        let c = level_prices(&arm, GpuWork::Kernels, Call::Commit);
        assert_eq!(c.len(), 2);
        assert!(
            (c[0].1 - 30.0).abs() < 1e-9 && (c[1].1 - 32.0).abs() < 1e-9,
            "{c:?}"
        );
        let d = level_prices(&arm, GpuWork::Kernels, Call::Decommit);
        assert!((d[1].1 - 16.0).abs() < 1e-9);
        assert!(level_prices(&arm, GpuWork::Idle, Call::Commit).is_empty());
    }
}
