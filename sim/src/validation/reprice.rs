//! The summary of re-pricing many stored replays (`sim validate --reprice DIR...`): per row
//! its error and verdict, per family (trace x retention x mechanism) the median error over the
//! stored sets with its sign counts, and per VMM row the composition check.

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
        let within = self
            .rows
            .iter()
            .filter(|r| r.error_pct_p50.abs() <= GOAL_PCT)
            .count();
        let count = |v: Verdict| self.rows.iter().filter(|r| r.verdict.verdict == v).count();
        let _ = writeln!(
            s,
            "median step-time error within {GOAL_PCT}%: {within} of {}; verdicts: {} pass, {} fail, {} undecided",
            reports::metrics::count(self.rows.len() as u64, "row"),
            count(Verdict::Pass),
            count(Verdict::Fail),
            count(Verdict::Undecided)
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
