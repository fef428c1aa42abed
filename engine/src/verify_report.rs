//! The `steps` block of a run with several tokens per step (`crate::verify`): tokens per
//! step, the union of experts each step's MoE layers read, page-ins by phase, and the
//! break-even acceptance against one token per step. Computed from the recorded plans.

use crate::engine::Plans;
use crate::verify::{Acceptance, Stepping};
use hdrhistogram::Histogram;
pub use reports::run::StepsReport;

/// The block of `plans`, recorded with `stepping` (timing fields left empty: see
/// [`add_baseline`]). Decode groups are those of steps that process no prompt token.
pub fn steps_report(stepping: &Stepping, plans: &Plans) -> StepsReport {
    let mut tally = StepsTally::new();
    for s in plans.base_step..plans.base_step + plans.steps.len() {
        tally.step(plans, s);
    }
    tally.finish(stepping)
}

/// The `steps` block's sums over a plan's steps, fed one step at a time ([`StepsTally::step`])
/// so a plan recorded window by window is tallied before its steps are retired. Memory: the
/// union histogram (its buckets grow with the largest union, not with the steps).
pub struct StepsTally {
    union: Histogram<u64>,
    union_sum: u64,
    slots_sum: u64,
    groups: u64,
    prefill_union: u64,
    prefill_groups: u64,
    prefill_page_ins: u64,
    decode_page_ins: u64,
    decode_chunks: u64,
    decode_tokens: u64,
    prefill_steps: u64,
}

impl Default for StepsTally {
    fn default() -> Self {
        Self::new()
    }
}

impl StepsTally {
    /// Nothing tallied yet.
    pub fn new() -> StepsTally {
        StepsTally {
            union: Histogram::<u64>::new(5).expect("5 significant figures is valid"),
            union_sum: 0,
            slots_sum: 0,
            groups: 0,
            prefill_union: 0,
            prefill_groups: 0,
            prefill_page_ins: 0,
            decode_page_ins: 0,
            decode_chunks: 0,
            decode_tokens: 0,
            prefill_steps: 0,
        }
    }

    /// Tally step number `step` of `plans` (retained, its groups recorded) and its groups.
    pub fn step(&mut self, plans: &Plans, step: usize) {
        let rec = plans.step(step);
        if rec.prefill {
            self.prefill_steps += 1;
        } else {
            self.decode_chunks += rec.sequences as u64;
            self.decode_tokens += rec.tokens as u64;
        }
        let first = plans.groups.partition_point(|g| (g.step as usize) < step);
        for g in plans.groups[first..]
            .iter()
            .take_while(|g| g.step as usize == step)
        {
            let keys = plans.keys(g).len() as u64;
            let page_ins = plans.page_ins(g).len() as u64;
            if rec.prefill {
                self.prefill_union += keys;
                self.prefill_groups += 1;
                self.prefill_page_ins += page_ins;
            } else {
                self.union
                    .record(keys)
                    .expect("an auto-resizing histogram records any u64");
                self.union_sum += keys;
                self.slots_sum += g.slots as u64;
                self.groups += 1;
                self.decode_page_ins += page_ins;
            }
        }
    }

    /// The block of the tallied steps, recorded with `stepping` (timing fields left empty).
    pub fn finish(&self, stepping: &Stepping) -> StepsReport {
        let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let q = |p: f64| {
            if self.groups == 0 {
                0
            } else {
                self.union.value_at_quantile(p)
            }
        };
        let (acceptance, accepted) = match stepping.acceptance {
            Acceptance::Probability(p) => (Some(p), None),
            Acceptance::Fixed(n) => (None, Some(n)),
        };
        StepsReport {
            verify: stepping.verify,
            acceptance: (stepping.verify > 0).then_some(acceptance).flatten(),
            accepted: (stepping.verify > 0).then_some(accepted).flatten(),
            prefill_chunk: stepping.prefill_chunk,
            decode_chunks: self.decode_chunks,
            decode_tokens: self.decode_tokens,
            tokens_per_step: per(self.decode_tokens, self.decode_chunks),
            expected_tokens_per_step: stepping.expected_tokens_per_step(),
            union_mean: per(self.union_sum, self.groups),
            union_p50: q(0.5),
            union_p99: q(0.99),
            slots_mean: per(self.slots_sum, self.groups),
            prefill_steps: self.prefill_steps,
            prefill_union_mean: (self.prefill_groups > 0)
                .then(|| per(self.prefill_union, self.prefill_groups)),
            prefill_page_ins: self.prefill_page_ins,
            decode_page_ins: self.decode_page_ins,
            decode_page_ins_per_token: per(self.decode_page_ins, self.decode_tokens),
            repeat_slots_priced: None,
            baseline_tokens_per_s: None,
            speedup: None,
            step_cost_ratio: None,
            break_even_acceptance: None,
        }
    }
}

/// Resolution of the break-even search: the acceptance is found to 1/128.
pub const BREAK_EVEN_RESOLUTION: f64 = 1.0 / 128.0;

/// Add the comparison with the same run at one token per decode step: this run's tokens per
/// second and mean decode step time (µs) against the baseline's (`base_tps`, `base_step_us`).
pub fn add_baseline(
    s: &mut StepsReport,
    tokens_per_s: f64,
    step_us: f64,
    base_tps: f64,
    base_step_us: f64,
) {
    s.baseline_tokens_per_s = Some(base_tps);
    s.speedup = (base_tps > 0.0).then(|| tokens_per_s / base_tps);
    s.step_cost_ratio = (base_step_us > 0.0).then(|| step_us / base_step_us);
}

/// The smallest acceptance at which verifying K drafts reaches `base_tps` (the same run at one
/// token per step), to [`BREAK_EVEN_RESOLUTION`]: `tps_at(P)` runs the setting with drafts
/// accepted with probability P and returns its tokens per second. Bisection from the bracket
/// [0, 1], narrowed by `known` (a P already run and its tokens per second). `Some(0.0)` when
/// verification pays at P = 0, `None` when it does not even at P = 1. The runs draw their
/// acceptances from one seed, so the search is deterministic; tokens per second need not rise
/// strictly with P (a faster-advancing sequence shares fewer experts between steps), and the
/// result is a crossing point of the bracket.
pub fn break_even_search(
    base_tps: f64,
    known: Option<(f64, f64)>,
    mut tps_at: impl FnMut(f64) -> anyhow::Result<f64>,
) -> anyhow::Result<Option<f64>> {
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    match known {
        Some((p, tps)) if tps >= base_tps => hi = p,
        Some((p, _)) => lo = p,
        None => {}
    }
    if hi == 1.0 && tps_at(1.0)? < base_tps {
        return Ok(None);
    }
    if lo == 0.0 && tps_at(0.0)? >= base_tps {
        return Ok(Some(0.0));
    }
    while hi - lo > BREAK_EVEN_RESOLUTION {
        let mid = 0.5 * (lo + hi);
        if tps_at(mid)? >= base_tps {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_finds_the_crossing_of_a_monotone_curve() {
        // tokens/s = 100 x (0.5 + P): the baseline of 120 is reached at P = 0.7
        let mut runs = 0;
        let mut at = |p: f64| {
            runs += 1;
            Ok(100.0 * (0.5 + p))
        };
        let p = break_even_search(120.0, None, &mut at).unwrap().unwrap();
        assert!(p >= 0.7 && p - 0.7 <= BREAK_EVEN_RESOLUTION, "{p}");
        // 1 and 0, then 7 halvings of [0, 1]
        assert_eq!(runs, 9);
        // a known point narrows the bracket: P = 0.75 pays, so 1 is not run; 0 is, then
        // 7 halvings bring the bracket [0, 0.75] under 1/128
        let mut runs = 0;
        let p = break_even_search(120.0, Some((0.75, 125.0)), |p| {
            runs += 1;
            Ok(100.0 * (0.5 + p))
        })
        .unwrap()
        .unwrap();
        assert!(p >= 0.7 && p - 0.7 <= BREAK_EVEN_RESOLUTION, "{p}");
        assert_eq!(runs, 8);
        // pays at 0, never pays
        assert_eq!(
            break_even_search(40.0, None, |p| Ok(50.0 + p)).unwrap(),
            Some(0.0)
        );
        assert_eq!(
            break_even_search(80.0, None, |p| Ok(50.0 + p)).unwrap(),
            None
        );
        assert_eq!(
            break_even_search(80.0, Some((0.3, 50.3)), |p| Ok(50.0 + p)).unwrap(),
            None
        );
    }
}
