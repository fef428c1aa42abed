//! The summary of re-pricing many stored replays (`sim validate --reprice DIR...`): per row
//! its error and verdict, per family (trace x retention x mechanism) the median error over the
//! stored sets with its sign counts, per VMM row the composition check, and how many rows are
//! within the goal: raw, adjusted for the host probe, and at best for a model that is exact on
//! each family's centre or on each stored set's host state ([`Within`]).

use super::analysis::{RowVerdict, Verdict, GOAL_PCT};
use super::composition::{CompositionRow, COMPOSITION_GOAL_PCT};
use super::Validation;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use validate::stats::Summary;

/// One re-priced row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RepricedRow {
    /// The stored file.
    pub file: String,
    pub trace: String,
    /// Retention as the flags say it (`lru, budget 50%`, `streaming`).
    pub retention: String,
    pub policy: String,
    pub steps: usize,
    /// Warm-up steps (0 for files written before the warm-up).
    pub warmup_steps: usize,
    /// Error of the prediction against the median of the repetitions, percent: p50 and mean.
    pub error_pct_p50: f64,
    pub error_pct_mean: f64,
    /// The verdict (its blocks: the file's, or its repetitions).
    pub verdict: RowVerdict,
    /// The composition check (VMM rows with a host breakdown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub composition: Option<CompositionRow>,
    /// The 90% interval of the predicted step p50 and p99 from the constants' measured spread
    /// (`--intervals N`), and whether the measured p50 lies inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<RowInterval>,
    /// Where the row was checked (GPU, model, batch, live-set range), for the coverage table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<super::coverage::RowContext>,
}

/// A row's 90% interval and the measured p50 held against it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowInterval {
    #[serde(flatten)]
    pub interval: super::interval::Interval90,
    /// The measured step p50 (median over the repetitions), ms.
    pub measured_p50_ms: f64,
    /// Whether it lies inside the p50 interval.
    pub inside: bool,
}

/// A stored file that was not re-priced, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub file: String,
    pub reason: String,
}

/// The median p50 error of one family over its stored sets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Family {
    pub trace: String,
    pub retention: String,
    pub policy: String,
    /// Rows (stored sets) of the family.
    pub sets: usize,
    pub median_error_pct: f64,
    pub min_error_pct: f64,
    pub max_error_pct: f64,
    /// Sets whose error is below 0 (the model faster than the replay) and above 0.
    pub under: usize,
    pub over: usize,
}

/// The whole re-pricing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Repricing {
    /// `--hw` as given (`None`: each file's own profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hw: Option<String>,
    pub rows: Vec<RepricedRow>,
    pub families: Vec<Family>,
    pub skipped: Vec<Skipped>,
    /// Rows within the goal, raw, probe-adjusted and at best ([`Within::of`]).
    #[serde(default)]
    pub within: Within,
}

/// Rows within +-[`GOAL_PCT`]% of the measured step time, counted four ways. The two ceilings
/// divide every prediction of a group by one free factor, chosen per group to bring the most
/// rows within the goal (an oracle: the figure no model of that shape can beat on these
/// rows). Per family (trace x retention x mechanism): a model exact on each family's centre
/// that cannot see the host's state; per stored set (the stored file's folder, one session's
/// commands): a model exact up to each session's host state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Within {
    pub rows: usize,
    /// `|error_pct_p50| <= GOAL_PCT`: the target's figure.
    pub raw: usize,
    /// `|verdict.error_pct| <= GOAL_PCT`: the bias adjusted to the reference probe.
    pub probe_adjusted: usize,
    /// At best with one factor per family, and with one per stored set.
    pub ceiling_per_family: usize,
    pub ceiling_per_set: usize,
}

impl Within {
    /// The four counts of `rows`.
    pub fn of(rows: &[RepricedRow]) -> Within {
        let inside = |e: f64| e.abs() <= GOAL_PCT;
        let family = |r: &RepricedRow| format!("{}\n{}\n{}", r.trace, r.retention, r.policy);
        let set = |r: &RepricedRow| {
            let p = std::path::Path::new(&r.file);
            p.parent()
                .map_or(String::new(), |d| d.display().to_string())
        };
        Within {
            rows: rows.len(),
            raw: rows.iter().filter(|r| inside(r.error_pct_p50)).count(),
            probe_adjusted: rows.iter().filter(|r| inside(r.verdict.error_pct)).count(),
            ceiling_per_family: ceiling(rows, family),
            ceiling_per_set: ceiling(rows, set),
        }
    }
}

/// The most rows within the goal when each group's predictions (grouped by `key`) are divided
/// by the factor best for that group.
fn ceiling(rows: &[RepricedRow], key: impl Fn(&RepricedRow) -> String) -> usize {
    let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
    for r in rows {
        let k = key(r);
        let x = r.error_pct_p50;
        match groups.iter_mut().find(|g| g.0 == k) {
            Some(g) => g.1.push(x),
            None => groups.push((k, vec![x])),
        }
    }
    groups.iter().map(|g| best_shifted_within(&g.1)).sum()
}

/// The most of `errors_pct` (each `100 (predicted - measured) / measured`) that one common
/// factor on the predictions can bring within +-[`GOAL_PCT`]%: the most points of
/// `ln(1 + e / 100)` inside any window of width `ln((1 + goal) / (1 - goal))`.
pub fn best_shifted_within(errors_pct: &[f64]) -> usize {
    let g = GOAL_PCT / 100.0;
    let width = ((1.0 + g) / (1.0 - g)).ln();
    let mut x: Vec<f64> = errors_pct.iter().map(|e| (1.0 + e / 100.0).ln()).collect();
    x.sort_by(f64::total_cmp);
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..x.len() {
        while x[hi] - x[lo] > width * (1.0 + 1e-12) {
            lo += 1;
        }
        best = best.max(hi + 1 - lo);
    }
    best
}

impl RepricedRow {
    /// The rows of one re-priced file (its trace as the file records it), with their verdicts
    /// and composition checks (same order as `v.rows`).
    pub fn of(
        file: &str,
        trace: &str,
        v: &Validation,
        verdicts: &[RowVerdict],
        compositions: &[Option<CompositionRow>],
    ) -> Vec<RepricedRow> {
        v.rows
            .iter()
            .zip(verdicts)
            .zip(compositions)
            .map(|((r, verdict), c)| RepricedRow {
                file: file.to_string(),
                trace: trace.to_string(),
                retention: if v.retention_text.is_empty() {
                    v.retention.clone()
                } else {
                    v.retention_text.clone()
                },
                policy: r.policy.clone(),
                steps: r.steps,
                warmup_steps: r.warmup_steps.unwrap_or(0),
                error_pct_p50: r.error_pct_p50,
                error_pct_mean: r.error_pct_mean,
                verdict: verdict.clone(),
                composition: c.clone(),
                interval: None,
                context: None,
            })
            .collect()
    }
}

/// The families of `rows`, in the order each first appears.
pub fn families(rows: &[RepricedRow]) -> Vec<Family> {
    let mut keys: Vec<(&str, &str, &str)> = Vec::new();
    for r in rows {
        let k = (r.trace.as_str(), r.retention.as_str(), r.policy.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .filter_map(|(trace, retention, policy)| {
            let errs: Vec<f64> = rows
                .iter()
                .filter(|r| {
                    (r.trace.as_str(), r.retention.as_str(), r.policy.as_str())
                        == (trace, retention, policy)
                })
                .map(|r| r.error_pct_p50)
                .collect();
            let s = Summary::of(&errs)?;
            Some(Family {
                trace: trace.to_string(),
                retention: retention.to_string(),
                policy: policy.to_string(),
                sets: errs.len(),
                median_error_pct: s.median,
                min_error_pct: s.min,
                max_error_pct: s.max,
                under: errs.iter().filter(|&&e| e < 0.0).count(),
                over: errs.iter().filter(|&&e| e > 0.0).count(),
            })
        })
        .collect()
}

impl Repricing {
    /// The text of the re-pricing: rows, families, composition check, skipped files, counts.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "re-priced {} rows of {} stored replays under {}; {} not re-priced",
            self.rows.len(),
            self.files(),
            self.hw.as_deref().unwrap_or("each file's own profile"),
            reports::metrics::count(self.skipped.len() as u64, "file")
        );
        s += &self.rows_text();
        s += &self.families_text();
        s += &self.composition_text();
        for k in &self.skipped {
            let _ = writeln!(s, "not re-priced: {}: {}", k.file, k.reason);
        }
        let with: Vec<&RowInterval> = self
            .rows
            .iter()
            .filter_map(|r| r.interval.as_ref())
            .collect();
        if let Some(first) = with.first() {
            let inside = with.iter().filter(|i| i.inside).count();
            let _ = writeln!(
                s,
                "measured p50 inside the predicted 90% interval (constants drawn from their measured spread, {} draws): {} of {} ({:.0}%)",
                first.interval.draws,
                inside,
                reports::metrics::count(with.len() as u64, "row"),
                100.0 * inside as f64 / with.len() as f64
            );
        }
        let w = &self.within;
        let count = |v: Verdict| self.rows.iter().filter(|r| r.verdict.verdict == v).count();
        let _ = writeln!(
            s,
            "median step-time error within {GOAL_PCT}%: {} of {}; verdicts: {} pass, {} fail, {} undecided",
            w.raw,
            reports::metrics::count(self.rows.len() as u64, "row"),
            count(Verdict::Pass),
            count(Verdict::Fail),
            count(Verdict::Undecided)
        );
        let _ = writeln!(
            s,
            "within {GOAL_PCT}% adjusted to the reference host probe: {} of {}; at best, one free factor per family (a model exact on each family's centre, blind to the host): {}; per stored set (exact up to each session's host state): {}",
            w.probe_adjusted, w.rows, w.ceiling_per_family, w.ceiling_per_set
        );
        s
    }

    /// Distinct files re-priced.
    fn files(&self) -> usize {
        let mut f: Vec<&str> = self.rows.iter().map(|r| r.file.as_str()).collect();
        f.sort_unstable();
        f.dedup();
        f.len()
    }

    fn rows_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<58} {:<14} {:>6} {:>7} {:>8} {:>8}   {:<9} {:>17}",
            "file", "policy", "steps", "warm-up", "err p50", "err mean", "verdict", "interval %"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<58} {:<14} {:>6} {:>7} {:>+8.1} {:>+8.1}   {:<9} [{:>+6.1}, {:>+6.1}]",
                r.file,
                r.policy,
                r.steps,
                r.warmup_steps,
                r.error_pct_p50,
                r.error_pct_mean,
                r.verdict.verdict.name(),
                r.verdict.error_pct_lo,
                r.verdict.error_pct_hi
            );
        }
        s
    }

    fn families_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "per family (trace x retention x mechanism), p50 error over the stored sets: median [min, max], sets below / above 0"
        );
        for f in &self.families {
            let _ = writeln!(
                s,
                "{:<46} {:<18} {:<14} {:>3} sets  median {:>+6.1}% [{:>+6.1}, {:>+6.1}]  {} below / {} above",
                f.trace,
                f.retention,
                f.policy,
                f.sets,
                f.median_error_pct,
                f.min_error_pct,
                f.max_error_pct,
                f.under,
                f.over
            );
        }
        s
    }

    fn composition_text(&self) -> String {
        let mut s = String::new();
        let checked: Vec<(&RepricedRow, &CompositionRow)> = self
            .rows
            .iter()
            .filter_map(|r| Some((r, r.composition.as_ref()?)))
            .collect();
        let within = checked
            .iter()
            .filter(|(_, c)| {
                c.error_pct_mean_min.abs() <= COMPOSITION_GOAL_PCT
                    && c.error_pct_mean_max.abs() <= COMPOSITION_GOAL_PCT
            })
            .count();
        let _ = writeln!(
            s,
            "composition check (the model with each repetition's measured VMM time): mean-step error, median [min, max] over repetitions; {within} of {} VMM rows within {COMPOSITION_GOAL_PCT}% in every repetition",
            checked.len()
        );
        for (r, c) in checked {
            let residual = c
                .repetitions
                .iter()
                .map(|x| x.vmm_residual_pct.abs())
                .fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "{:<58} {:<14} {:>+6.2}% [{:>+6.2}, {:>+6.2}]  (plain model {:>+6.1}%; VMM time substituted within {:.3}%)",
                r.file, r.policy, c.error_pct_mean, c.error_pct_mean_min, c.error_pct_mean_max, r.error_pct_mean, residual
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of `file` in family `policy` with p50 error `e` and probe-adjusted error `adj`.
    fn row(file: &str, policy: &str, e: f64, adj: f64) -> RepricedRow {
        RepricedRow {
            file: file.into(),
            trace: "t".into(),
            retention: "streaming".into(),
            policy: policy.into(),
            steps: 1,
            warmup_steps: 0,
            error_pct_p50: e,
            error_pct_mean: e,
            verdict: super::super::analysis::row_verdict(policy, &[], None),
            composition: None,
            interval: None,
            context: None,
        }
        .with_adjusted(adj)
    }

    impl RepricedRow {
        fn with_adjusted(mut self, adj: f64) -> RepricedRow {
            self.verdict.error_pct = adj;
            self
        }
    }

    #[test]
    fn one_factor_brings_a_tight_offset_cluster_within_the_goal() {
        // ln(1.12..1.25) spans 0.110 of the window's ln(1.1 / 0.9) = 0.2007: all four fit
        assert_eq!(best_shifted_within(&[12.0, 15.0, 20.0, 25.0]), 4);
        // ln 0.88 = -0.128 .. ln 1.09 = 0.086 spans 0.214 > 0.2007: at most 4 of the 6
        // (-12, -5, 0, +4 or -5, 0, +4, +9), +30 far off
        assert_eq!(best_shifted_within(&[-12.0, -5.0, 0.0, 4.0, 9.0, 30.0]), 4);
        // exactly -10% and +10% are ln 0.9 and ln 1.1 apart: both fit
        assert_eq!(best_shifted_within(&[-10.0, 10.0]), 2);
        assert_eq!(best_shifted_within(&[]), 0);
    }

    #[test]
    fn the_ceilings_group_by_family_and_by_stored_folder() {
        // set a ran 20% slow on both families, set b 20% fast: per set one factor fits both
        // rows of each; per family +20 and -20 are ln(1.2 / 0.8) = 0.405 apart, more than the
        // window's 0.2007: one row of each family; raw none; probe-adjusted the two inside
        let rows = [
            row("d/a/x.json", "e1", 20.0, 3.0),
            row("d/a/x.json", "e4", 20.0, -11.0),
            row("d/b/y.json", "e1", -20.0, -9.5),
            row("d/b/y.json", "e4", -20.0, 25.0),
        ];
        let w = Within::of(&rows);
        assert_eq!(w.rows, 4);
        assert_eq!(w.raw, 0);
        assert_eq!(w.probe_adjusted, 2, "+3 and -9.5");
        assert_eq!(w.ceiling_per_family, 2);
        assert_eq!(w.ceiling_per_set, 4);
    }
}
