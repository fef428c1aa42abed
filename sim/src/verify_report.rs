//! The `steps` block of a run with several tokens per step (`crate::verify`): tokens per
//! step, the union of experts each step's MoE layers read, page-ins by phase, and the
//! break-even acceptance against one token per step. Computed from the recorded plans.

use crate::engine::Plans;
use crate::verify::{self, Acceptance, Stepping};
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
    let q = |p: f64| if groups == 0 { 0 } else { union.value_at_quantile(p) };
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

/// Add the comparison with the same run at one token per decode step: this run's tokens per
/// second and mean decode step time (µs) against the baseline's. The break-even acceptance
/// solves expected_tokens(K, P) = step cost ratio ([`verify::break_even_acceptance`]).
pub fn add_baseline(s: &mut StepsReport, tokens_per_s: f64, step_us: f64, base_tps: f64, base_step_us: f64) {
    s.baseline_tokens_per_s = Some(base_tps);
    s.speedup = (base_tps > 0.0).then(|| tokens_per_s / base_tps);
    let ratio = (base_step_us > 0.0).then(|| step_us / base_step_us);
    s.step_cost_ratio = ratio;
    s.break_even_acceptance = ratio.and_then(|r| verify::break_even_acceptance(s.verify, r));
}
