//! What a timed replay reports: the `timing` block (exact keys) and the details beside it.
//! The types live in `reports::run`, which reads them back from result files.

pub use reports::run::{StepParts, TimingDetail, TimingReport};
pub use reports::step_latency::StepLatencies;

/// The step latencies a timed run keeps when asked (`TimingConfig::step_latencies`, set by
/// `sim compare`): `step_us` are the replay's step times, µs, in step order, the same steps
/// the `timing` block's percentiles summarize.
pub fn keep_step_latencies(detail: &mut TimingDetail, step_us: &[f64]) {
    detail.step_latency = Some(StepLatencies::of_steps(step_us));
}

/// Step latencies kept as a replay priced window by window ends its steps, in the precision
/// [`StepLatencies`] keeps (0.01 µs): each step as its whole number of hundredths of a µs,
/// 4 bytes a step while every step is under 2^32 hundredths (about 42.9 s), 8 bytes a step
/// after a longer one. [`CentiLatencies::finish`] gives what [`StepLatencies::of_steps`]
/// gives on the steps' f64 latencies, bit for bit: rounding to hundredths is monotone, so
/// the quantiles of the rounded steps are the rounded quantiles.
#[derive(Debug, Default)]
pub struct CentiLatencies {
    narrow: Vec<u32>,
    /// Every step, once one did not fit `narrow` (which is then empty).
    wide: Option<Vec<u64>>,
}

impl CentiLatencies {
    /// Keep one step's latency, µs (finite and non-negative; a step time the engine refuses
    /// is kept as some value and the replay errs anyway).
    pub fn push(&mut self, us: f64) {
        let c = (us * 100.0).round();
        match &mut self.wide {
            Some(w) => w.push(c as u64),
            None if c <= u32::MAX as f64 => self.narrow.push(c as u32),
            None => {
                let mut w: Vec<u64> = self.narrow.drain(..).map(u64::from).collect();
                w.push(c as u64);
                self.wide = Some(w);
            }
        }
    }

    /// The kept steps as [`StepLatencies`].
    pub fn finish(self) -> StepLatencies {
        match self.wide {
            Some(w) => of_centi(w),
            None => of_centi(self.narrow),
        }
    }
}

/// [`StepLatencies`] of steps given in hundredths of a µs, in step order.
fn of_centi<T: Copy + Ord + Into<u64>>(c: Vec<T>) -> StepLatencies {
    StepLatencies::of_values(c, |s| s.sort_unstable(), |x| x.into() as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reports::step_latency::{LatencyForm, MAX_EVERY_STEP};

    /// The latencies of `steps` through [`CentiLatencies`].
    fn kept(steps: &[f64]) -> StepLatencies {
        let mut c = CentiLatencies::default();
        steps.iter().for_each(|&x| c.push(x));
        c.finish()
    }

    #[test]
    fn short_runs_keep_every_step_as_of_steps_does() {
        let steps = [3.004, 1.0, 2.006, 2.0, 0.005, 123.456789];
        assert_eq!(kept(&steps), StepLatencies::of_steps(&steps));
        assert_eq!(kept(&steps).us, vec![3.0, 1.0, 2.01, 2.0, 0.01, 123.46]);
    }

    #[test]
    fn long_runs_keep_the_quantiles_of_steps_as_of_steps_does() {
        // 30,001 scrambled latencies with fractions that round both ways
        let n = 30_001usize;
        let steps: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % n) as f64 * 0.337 + 0.004)
            .collect();
        let k = kept(&steps);
        assert_eq!(k.form, LatencyForm::Quantiles);
        assert_eq!(k, StepLatencies::of_steps(&steps));
    }

    #[test]
    fn a_step_past_u32_hundredths_widens_the_log_without_changing_results() {
        // 5e7 µs = 5e9 hundredths > 2^32
        let mut steps: Vec<f64> = (0..MAX_EVERY_STEP + 10).map(|i| i as f64 + 0.5).collect();
        steps[100] = 5e7;
        assert_eq!(kept(&steps), StepLatencies::of_steps(&steps));
        assert_eq!(kept(&steps[..120]).us[100], 5e7);
    }
}
