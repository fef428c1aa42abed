//! The text of the `steps` block (several tokens per step: `--verify`, `--prefill-chunk`):
//! the lines `sim run` prints and the table of `sim sweep`.

use crate::metrics::count;
use crate::run::{RunReport, StepsReport};
use std::fmt::Write;

/// How a run's steps took tokens, in a few words: `verify K=2 P=0.7`, `verify K=2 N=1`,
/// `prefill chunk 64`, or `1 token/step`.
pub fn stepping_label(s: &StepsReport) -> String {
    let mut parts = Vec::new();
    if s.verify > 0 {
        let acc = match (s.acceptance, s.accepted) {
            (Some(p), _) => format!("P={p}"),
            (None, Some(n)) => format!("N={n}"),
            (None, None) => String::new(),
        };
        parts.push(format!("verify K={} {acc}", s.verify));
    }
    if let Some(c) = s.prefill_chunk {
        parts.push(format!("prefill chunk {c}"));
    }
    if parts.is_empty() {
        "1 token/step".into()
    } else {
        parts.join(", ")
    }
}

/// The `sim run` lines of the `steps` block (empty without it).
pub fn steps_summary(r: &RunReport) -> String {
    let Some(s) = &r.steps else {
        return String::new();
    };
    let mut out = String::new();
    let _ = writeln!(out, "\nsteps ({}):", stepping_label(s));
    let _ = writeln!(
        out,
        "  decode      {} chunks, {} tokens: {:.3} tokens per sequence-step (expected {:.3})",
        s.decode_chunks, s.decode_tokens, s.tokens_per_step, s.expected_tokens_per_step
    );
    let _ = writeln!(
        out,
        "  union       {:.2} distinct experts per MoE layer per decode step (p50 {}, p99 {}) of {:.2} routed slots",
        s.union_mean, s.union_p50, s.union_p99, s.slots_mean
    );
    if s.prefill_steps > 0 {
        let _ = writeln!(
            out,
            "  prefill     {}, {:.2} distinct experts per MoE layer, {} page-ins",
            count(s.prefill_steps, "step"),
            s.prefill_union_mean.unwrap_or(0.0),
            s.prefill_page_ins
        );
    }
    let _ = writeln!(
        out,
        "  page-ins    {} in decode steps ({:.3} per decode token)",
        s.decode_page_ins, s.decode_page_ins_per_token
    );
    if s.repeat_slots_priced == Some(false) {
        let _ = writeln!(out, "  kernel      repeated slots not priced: the profile has no expert_kernel_repeat_bandwidth (each distinct expert read once)");
    }
    if let (Some(b), Some(sp), Some(ratio)) =
        (s.baseline_tokens_per_s, s.speedup, s.step_cost_ratio)
    {
        let _ = writeln!(
            out,
            "  vs K=0      {b:.1} tokens/s with one token per step: speedup {sp:.3}x; a verify step costs {ratio:.3} steps"
        );
        let verdict = match s.break_even_acceptance {
            Some(0.0) => "verification pays at any acceptance".to_string(),
            Some(p) => format!(
                "verification pays from acceptance {p:.3} on (runs of this setting, to 1/128)"
            ),
            None => "verification does not pay even when every draft is accepted".to_string(),
        };
        let _ = writeln!(out, "  break-even  {verdict}");
    }
    out
}

/// The `sim sweep` table of runs with a `steps` block: tokens/s, unions and the break-even
/// against K and P (empty when no run has the block).
pub fn steps_table(reports: &[RunReport]) -> String {
    let rows: Vec<(&RunReport, &StepsReport)> = reports
        .iter()
        .filter_map(|r| Some((r, r.steps.as_ref()?)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let _ = writeln!(out, "\ntokens per step against K and P:");
    let _ = writeln!(
        out,
        "{:<34} {:<26} {:>9} {:>10} {:>7} {:>5} {:>5} {:>10} {:>9} {:>10}",
        "mechanism / retention",
        "steps",
        "tok/step",
        "tokens/s",
        "union",
        "p50",
        "p99",
        "dec pg-in",
        "speedup",
        "break-even"
    );
    for (r, s) in rows {
        let key = super::grid::batch_key_base(r);
        let tps = r
            .timing
            .as_ref()
            .map_or("-".into(), |t| format!("{:.1}", t.tokens_per_s));
        let speedup = s.speedup.map_or("-".into(), |x| format!("{x:.3}x"));
        let even = match (s.step_cost_ratio, s.break_even_acceptance) {
            (None, _) => "-".to_string(),
            (Some(_), Some(p)) => format!("{p:.3}"),
            (Some(_), None) => "never".to_string(),
        };
        let _ = writeln!(
            out,
            "{:<34} {:<26} {:>9.3} {:>10} {:>7.2} {:>5} {:>5} {:>10} {:>9} {:>10}",
            key,
            stepping_label(s),
            s.tokens_per_step,
            tps,
            s.union_mean,
            s.union_p50,
            s.union_p99,
            s.decode_page_ins,
            speedup,
            even
        );
    }
    out
}
