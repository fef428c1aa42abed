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
    let mut union = Histogram::<u64>::new(5).expect("5 significant figures is valid");
    let (mut union_sum, mut slots_sum, mut groups) = (0u64, 0u64, 0u64);
    let (mut prefill_union, mut prefill_groups) = (0u64, 0u64);
    let (mut prefill_page_ins, mut decode_page_ins) = (0u64, 0u64);
    for g in &plans.groups {
        let keys = plans.keys(g).len() as u64;
        let page_ins = plans.page_ins(g).len() as u64;
        if plans.steps[g.step as usize].prefill {
            prefill_union += keys;
            prefill_groups += 1;
            prefill_page_ins += page_ins;
        } else {
            union
                .record(keys)
                .expect("an auto-resizing histogram records any u64");
            union_sum += keys;
            slots_sum += g.slots as u64;
            groups += 1;
            decode_page_ins += page_ins;
        }
    }
    let decode = plans.steps.iter().filter(|s| !s.prefill);
    let (decode_chunks, decode_tokens) = decode.fold((0u64, 0u64), |(c, t), s| {
        (c + s.sequences as u64, t + s.tokens as u64)
    });
    let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let q = |p: f64| {
        if groups == 0 {
            0
        } else {
            union.value_at_quantile(p)
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
        decode_chunks,
        decode_tokens,
        tokens_per_step: per(decode_tokens, decode_chunks),
        expected_tokens_per_step: stepping.expected_tokens_per_step(),
        union_mean: per(union_sum, groups),
        union_p50: q(0.5),
        union_p99: q(0.99),
        slots_mean: per(slots_sum, groups),
        prefill_steps: plans.steps.iter().filter(|s| s.prefill).count() as u64,
        prefill_union_mean: (prefill_groups > 0).then(|| per(prefill_union, prefill_groups)),
        prefill_page_ins,
        decode_page_ins,
        decode_page_ins_per_token: per(decode_page_ins, decode_tokens),
        repeat_slots_priced: None,
        baseline_tokens_per_s: None,
        speedup: None,
        step_cost_ratio: None,
        break_even_acceptance: None,
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
