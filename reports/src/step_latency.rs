//! The step latencies of a timed run, kept so that a report can draw the empirical CDF of
//! every step (the `step_latency` entry of `timing_detail`, written by `sim compare`): each
//! step's latency when the run is short enough, else the latency at evenly spaced quantiles,
//! computed exactly from every step. Either form is bounded, whatever the run's length.

use serde::{Deserialize, Serialize};

/// Most steps whose latencies are kept one by one; a longer run keeps quantiles instead.
/// Chosen to bound a run's entry in `results.json`: 20,000 values of about 8 characters are
/// about 160 kB, and a CDF drawn from more points than a chart has pixels looks the same.
pub const MAX_EVERY_STEP: usize = 20_000;

/// Quantile intervals of the long form: the latency at p = i / 2,000 for i = 0..=2,000
/// (2,001 values, p = 0 being the fastest step). Its drawn CDF is below the exact one by
/// at most 1 / 2,000 = 0.05 percentage points.
pub const QUANTILES: usize = 2_000;

/// What the values of [`StepLatencies::us`] are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LatencyForm {
    /// Every step's latency, in step order.
    EveryStep,
    /// The latency at p = i / [`QUANTILES`], i = 0..=QUANTILES, ascending.
    Quantiles,
}

/// The latencies of a timed run's steps (the same steps as the `timing` block's
/// percentiles: every step the replay priced), µs rounded to 0.01 µs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepLatencies {
    pub form: LatencyForm,
    /// Steps of the run, whatever the form.
    pub steps: u64,
    /// µs: one per step ([`LatencyForm::EveryStep`]) or QUANTILES + 1 ascending values
    /// ([`LatencyForm::Quantiles`]).
    pub us: Vec<f64>,
}

/// `x` rounded to 0.01 (µs), the precision the latencies keep.
fn centi(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Index into `n` sorted values of the quantile at p = i / QUANTILES: the smallest value
/// at or above which a fraction p of the values lie (rank ceil(p n), at least 1).
fn quantile_index(i: usize, n: usize) -> usize {
    let rank = (i as u128 * n as u128).div_ceil(QUANTILES as u128) as usize;
    rank.max(1) - 1
}

impl StepLatencies {
    /// The latencies of the steps `step_us` (µs, in step order, each finite): all of them
    /// when there are at most [`MAX_EVERY_STEP`], else [`QUANTILES`] + 1 quantiles of them.
    pub fn of_steps(step_us: &[f64]) -> StepLatencies {
        Self::of_values(step_us.to_vec(), |s| s.sort_by(f64::total_cmp), centi)
    }

    /// The latencies of steps given as `values` in step order, `us` turning one into µs
    /// rounded to 0.01 µs (monotone, so the quantiles of the values give the quantiles of
    /// the latencies): all of them when there are at most [`MAX_EVERY_STEP`], else
    /// [`QUANTILES`] + 1 quantiles, the values ordered by `sort` first.
    pub fn of_values<T: Copy>(
        mut values: Vec<T>,
        sort: impl FnOnce(&mut [T]),
        us: impl Fn(T) -> f64,
    ) -> StepLatencies {
        let steps = values.len() as u64;
        if values.len() <= MAX_EVERY_STEP {
            return StepLatencies {
                form: LatencyForm::EveryStep,
                steps,
                us: values.into_iter().map(us).collect(),
            };
        }
        sort(&mut values);
        let us = (0..=QUANTILES)
            .map(|i| us(values[quantile_index(i, values.len())]))
            .collect();
        StepLatencies {
            form: LatencyForm::Quantiles,
            steps,
            us,
        }
    }

    /// The empirical CDF as the corners of a step function: (latency µs, fraction of steps
    /// at or below it), starting at (fastest, 0) and ending at (slowest, 1), one point per
    /// distinct latency (the highest fraction at that latency). Empty without a step.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let mut sorted = self.us.clone();
        sorted.sort_by(f64::total_cmp);
        let Some(&fastest) = sorted.first() else {
            return Vec::new();
        };
        // the quantile form's first value is p = 0, drawn by the starting point alone
        let values = match self.form {
            LatencyForm::EveryStep => &sorted[..],
            LatencyForm::Quantiles => &sorted[1..],
        };
        let n = values.len().max(1) as f64;
        let mut pts = vec![(fastest, 0.0)];
        for (j, &x) in values.iter().enumerate() {
            if values.get(j + 1) != Some(&x) {
                pts.push((x, (j + 1) as f64 / n));
            }
        }
        pts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_keeps_every_step_rounded_to_a_hundredth() {
        let s = StepLatencies::of_steps(&[3.004, 1.0, 2.006, 2.0]);
        assert_eq!(s.form, LatencyForm::EveryStep);
        assert_eq!(s.steps, 4);
        assert_eq!(s.us, vec![3.0, 1.0, 2.01, 2.0]);
        // sorted 1, 2, 2.01, 3: each a quarter of the steps
        assert_eq!(
            s.cdf(),
            vec![
                (1.0, 0.0),
                (1.0, 0.25),
                (2.0, 0.5),
                (2.01, 0.75),
                (3.0, 1.0)
            ]
        );
        // equal latencies make one corner, at the fraction of all of them
        let s = StepLatencies::of_steps(&[3.0, 1.0, 2.0, 2.0]);
        assert_eq!(
            s.cdf(),
            vec![(1.0, 0.0), (1.0, 0.25), (2.0, 0.75), (3.0, 1.0)]
        );
        assert!(StepLatencies::of_steps(&[]).cdf().is_empty());
    }

    #[test]
    fn a_long_run_keeps_exact_quantiles_of_every_step() {
        // 50,000 steps of 1..=50,000 µs in a scrambled order (7 is coprime with 50,000)
        let n = 50_000usize;
        let steps: Vec<f64> = (0..n).map(|i| ((i * 7) % n + 1) as f64).collect();
        let s = StepLatencies::of_steps(&steps);
        assert_eq!(s.form, LatencyForm::Quantiles);
        assert_eq!(s.steps, 50_000);
        assert_eq!(s.us.len(), QUANTILES + 1);
        // p = i / 2000 of 50,000 values: rank 25 i, the value 25 i; p = 0 is the fastest
        assert_eq!(s.us[0], 1.0);
        for i in 1..=QUANTILES {
            assert_eq!(s.us[i], 25.0 * i as f64, "quantile {i}");
        }
        let cdf = s.cdf();
        assert_eq!(cdf.len(), QUANTILES + 1);
        assert_eq!(cdf[0], (1.0, 0.0));
        assert_eq!(cdf[1], (25.0, 0.0005));
        assert_eq!(cdf[QUANTILES], (50_000.0, 1.0));
    }

    #[test]
    fn the_boundary_between_the_forms_is_max_every_step() {
        let at = vec![5.0; MAX_EVERY_STEP];
        assert_eq!(StepLatencies::of_steps(&at).form, LatencyForm::EveryStep);
        let over = vec![5.0; MAX_EVERY_STEP + 1];
        let s = StepLatencies::of_steps(&over);
        assert_eq!(s.form, LatencyForm::Quantiles);
        assert_eq!(s.cdf(), vec![(5.0, 0.0), (5.0, 1.0)]);
    }

    #[test]
    fn the_json_names_the_form() {
        let s = StepLatencies::of_steps(&[1.5, 2.25]);
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"form":"every-step","steps":2,"us":[1.5,2.25]}"#
        );
    }
}
