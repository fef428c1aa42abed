//! The text `sim run` prints: the inputs, the streaming regime, and (when present) the cache
//! regime with its tiers, schedule and target search, and the timing on a hardware profile.

use super::MIB;
use crate::run::{
    DramMode, PrefetchReport, RetentionInputs, RunReport, ScheduleReport, StreamingMetrics,
    TargetReport, TiersReport,
};
use crate::sizes::{budget_text, BudgetSize};
use policies::{Budget, Schedule};
use std::fmt::Write;

/// The human-readable summary of a run.
pub fn run_summary(r: &RunReport) -> String {
    let i = &r.inputs;
    let mut s = String::new();
    let dtype = i.dtype.map_or("--expert-mib".to_string(), |d| {
        format!("{d:?}").to_lowercase()
    });
    let _ = writeln!(s, "trace     {}", i.trace_text());
    let _ = writeln!(
        s,
        "policy    {}   expert {:.3} MiB ({})   granule {}   profile trace {}",
        i.policy,
        i.expert_mib,
        dtype,
        granule_text(i.granule_bytes),
        i.profile_trace
    );
    if let Some(m) = &r.streaming {
        s += &streaming_summary(m);
    }
    s
}

/// The streaming-regime section of a run summary: per MoE layer per step, then the whole model.
pub fn streaming_summary(m: &StreamingMetrics) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nstreaming regime (nothing retained across steps), per MoE layer per step:"
    );
    let rows = [
        (
            "resident",
            format!("{:.3} MiB", m.resident_mib_per_layer_step),
            "committed bytes of the hot units",
        ),
        (
            "transfer",
            format!("{:.3} MiB", m.transfer_mib_per_layer_step),
            "useful bytes of the hot units (H2D)",
        ),
        (
            "resident experts",
            format!("{:.3}", m.resident_experts_per_layer_step),
            "experts inside the hot units",
        ),
        (
            "hot units",
            format!("{:.3}", m.hot_units_per_layer_step),
            "units holding a selected expert",
        ),
        (
            "selectivity",
            format!("{:.1} %", m.selectivity * 100.0),
            "resident experts / top-k",
        ),
    ];
    write_rows(&mut s, rows);
    let _ = writeln!(s, "whole model:");
    let rows = [
        (
            "units per layer",
            format!("{:.3}", m.units_per_layer),
            "commit units / MoE layers",
        ),
        (
            "always-on units",
            m.always_on_units.to_string(),
            "units hot in every step",
        ),
        (
            "waste factor",
            format!("{:.4}", m.waste_factor),
            "committed / useful bytes",
        ),
        (
            "committed",
            format!("{:.1} MiB", m.committed_mib_total),
            "all units",
        ),
        (
            "useful",
            format!("{:.1} MiB", m.useful_mib_total),
            "the expert bank",
        ),
    ];
    write_rows(&mut s, rows);
    s
}

/// Append summary rows `(name, value, note)` in the aligned layout every summary of `sim run`
/// uses: name left in 17 columns, value right in 12, then the note.
pub fn write_rows<'a>(s: &mut String, rows: impl IntoIterator<Item = (&'a str, String, &'a str)>) {
    for (k, v, note) in rows {
        let _ = writeln!(s, "  {k:<17} {v:>12}   {note}");
    }
}

/// A granule or page size in the unit that reads best: `2 MiB`, `64 KiB`.
pub fn granule_text(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes as f64 / 1024.0)
    }
}

/// The human-readable cache, tiers, schedule and target blocks of a run (empty in the
/// streaming regime).
pub fn retention_summary(r: &RunReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let (Some(i), Some(c)) = (&r.retention, &r.cache) else {
        return s;
    };
    let _ = writeln!(
        s,
        "\ncache regime: evict {}  budget {} ({} split)  semantics {}  batch {}",
        i.evict,
        budget_text(&i.budget, BudgetSize::of_run(r).as_ref()),
        i.split.name(),
        i.semantics.name(),
        match (i.batching.as_deref(), i.max_seqs, i.max_batched_tokens) {
            (None, ..) => i.batch.to_string(),
            (Some(b), Some(n), Some(t)) =>
                format!("({b} passes of at most {n} requests and {t} tokens)"),
            (Some(b), ..) => format!("({b} forward passes)"),
        }
    );
    let rows = [
        ("tokens", c.tokens.to_string(), "requests decoded"),
        (
            "accesses",
            c.accesses.to_string(),
            "unit accesses (one per unit per group)",
        ),
        (
            "page-ins",
            c.page_ins.to_string(),
            "accesses to a non-resident unit",
        ),
        (
            "page-ins/token",
            format!("{:.3}", c.page_ins_per_token),
            "page-ins / tokens",
        ),
        (
            "miss rate",
            format!("{:.2} %", c.miss_rate * 100.0),
            "page-ins / accesses",
        ),
        (
            "bytes/token",
            format!("{:.3} MiB", c.bytes_per_token / MIB),
            "useful bytes paged in per token (H2D)",
        ),
        (
            "evictions",
            c.evictions.to_string(),
            "resident units dropped to make room",
        ),
        (
            "peak resident",
            format!("{:.1} MiB", c.peak_resident_mib),
            "committed bytes, after each group/access",
        ),
    ];
    write_rows(&mut s, rows);
    if let Some(t) = &r.tiers {
        s += &tiers_summary(t, i, c.tokens);
    }
    if let Some(q) = &r.schedule {
        s += &schedule_summary(q, i);
    }
    if let Some(t) = &r.target {
        s += &target_summary(t, i, r);
    }
    if let Some(v) = &r.vs_belady {
        s += &vs_belady_summary(v);
    }
    s
}

/// The "policy or working set?" lines of a run summary (with `--vs-belady`).
pub fn vs_belady_summary(v: &crate::run::VsBelady) -> String {
    let matching = match v.policy_budget_matching_belady {
        Some(b) => format!(
            "{} matches it at {b} units ({:.2}x this budget; {})",
            v.policy,
            b as f64 / v.budget_units.max(1) as f64,
            v.matched_by
        ),
        None => format!("no budget of the bank lets {} match it", v.policy),
    };
    format!(
        "vs belady (policy or working set?):\n  belady page-ins {} at {} units ({} {}); {matching}\n",
        v.belady_page_ins, v.budget_units, v.policy, v.policy_page_ins
    )
}

/// The DRAM/SSD tier lines of a run summary.
pub fn tiers_summary(t: &TiersReport, i: &RetentionInputs, tokens: u64) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let per = |x: u64| x as f64 / tokens.max(1) as f64;
    let dram = i.dram.as_ref().map_or(String::new(), |d| d.to_string());
    let _ = match t.mode {
        DramMode::Pinned => writeln!(s, "tiers (DRAM {dram} behind VRAM, SSD behind DRAM):"),
        DramMode::PageCache => writeln!(
            s,
            "tiers (page cache {dram} behind VRAM, SSD behind it; --dram-mode page-cache):"
        ),
    };
    for (k, v) in [
        ("DRAM hits", t.dram_hits),
        ("SSD compulsory", t.ssd_compulsory),
        ("SSD capacity", t.ssd_capacity),
    ] {
        let _ = writeln!(s, "  {k:<17} {v:>12}   {:.3} per token", per(v));
    }
    s
}

/// The scheduling line of a run summary (with `--queue`).
pub fn schedule_summary(q: &ScheduleReport, i: &RetentionInputs) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "schedule ({}, queue {}):\n  unions/token {:.3}   dispatch delay p50 {}  p99 {}  max {}",
        match i.schedule {
            Schedule::Fifo => "fifo",
            Schedule::RouteAware => "route-aware",
        },
        i.queue.unwrap_or(0),
        q.unions_per_token,
        q.delay_p50,
        q.delay_p99,
        q.delay_max
    );
    s
}

/// The target-search line of a run summary (with `--target-tokens-per-s`).
pub fn target_summary(t: &TargetReport, i: &RetentionInputs, r: &RunReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    match t.budget_units {
        Some(u) => {
            let _ = writeln!(
                s,
                "target {} tokens/s over {} GB/s: smallest budget {} ({} search, {} runs); transfer floor {}",
                t.target_tokens_per_s,
                t.link_gbps,
                budget_text(&Budget::Units(u), BudgetSize::of(r, u).as_ref()),
                t.search,
                t.evaluations,
                t.tokens_per_s
                    .map_or("unbounded (nothing crosses the link)".to_string(), |x| format!("{x:.1} tokens/s"))
            );
        }
        None => {
            let _ = writeln!(
                s,
                "target {} tokens/s over {} GB/s: not reachable with {}; even the whole bank moves {:.3} MiB per token ({:.1} tokens/s)",
                t.target_tokens_per_s,
                t.link_gbps,
                i.evict,
                t.bytes_per_token / MIB,
                t.tokens_per_s.unwrap_or(f64::INFINITY)
            );
        }
    }
    s
}

/// The human-readable timing section of a run summary.
pub fn timing_summary(r: &RunReport) -> String {
    use std::fmt::Write;
    let (Some(t), Some(d)) = (&r.timing, &r.timing_detail) else {
        return String::new();
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\ntiming on {}: {} steps, {} tokens, {:.1} ms simulated",
        d.profile, d.steps, d.tokens, d.total_ms
    );
    let _ = writeln!(
        s,
        "  step ms     p50 {:.3}   p90 {:.3}   p99 {:.3}   max {:.3}   mean {:.3}",
        t.step_ms_p50, t.step_ms_p90, t.step_ms_p99, t.step_ms_max, t.step_ms_mean
    );
    let _ = writeln!(s, "  tokens/s    {:.1}", t.tokens_per_s);
    let _ = writeln!(
        s,
        "  per step    compute {:.3} ms   h2d {:.3} ms   vmm {:.3} ms   faults {:.3} ms   stall {:.3} ms   (the parts overlap: they can add up to more than a step)",
        t.compute_ms_per_step,
        t.h2d_ms_per_step,
        t.vmm_ms_per_step,
        t.fault_ms_per_step,
        t.stall_ms_per_step
    );
    let _ = writeln!(
        s,
        "  memory      peak mapped {:.1} MiB   map calls {}   unmap calls {}   page-ins {} ({} above 90% of usable VRAM)",
        t.peak_mapped_mib, t.map_calls, t.unmap_calls, d.page_ins, d.oversubscribed_page_ins
    );
    if !d.outside_range.is_empty() {
        let lines: Vec<String> = d.outside_range.iter().map(|o| o.line()).collect();
        let _ = writeln!(
            s,
            "  outside the measured range: {} (--outside-range; docs/DESIGN.md)",
            lines.join("; ")
        );
    }
    match &r.prefetch {
        Some(p) => s += &prefetch_summary(p, &r.inputs.profile_trace),
        None if t.prefetch_issued > 0 => {
            let _ = writeln!(
                s,
                "  prefetch    issued {}   used {}   wasted {}",
                t.prefetch_issued, t.prefetch_used, d.prefetch_wasted
            );
        }
        None => {}
    }
    if let Some(x) = &d.tiers {
        s += &crate::tier_timing::tier_summary(x);
    }
    if let Some(c) = &r.cpu {
        s += &crate::cpu_lane::cpu_lane_summary(c, t.tokens_per_s);
    }
    if let Some(a) = &r.admission {
        if let (Some(cap), Some(limit)) = (a.cap, a.limit_mib) {
            let _ = writeln!(
                s,
                "  admission   {} of {} sequences admitted under {cap} x usable VRAM ({limit:.0} MiB)",
                a.admitted, a.requested
            );
        }
    }
    s
}

/// The prefetch lines of a timed run with a predictor: what it learned from (`profile`, the
/// run's profile trace), the fate of its prefetches, its accuracy and the stall it hid.
pub fn prefetch_summary(p: &PrefetchReport, profile: &str) -> String {
    let mut s = String::new();
    let source = match p.learns_from.as_str() {
        "profile" => format!("learned from the profile trace {profile} only"),
        "online" => "online: learned from the evaluated trace's earlier tokens only".to_string(),
        "future" => "reads the plan's future: the bound".to_string(),
        other => other.to_string(),
    };
    let _ = writeln!(
        s,
        "  prefetch    {} (window {}), {source}",
        p.predictor, p.window
    );
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.1} %", v * 100.0));
    let rows = [
        (
            "issued",
            p.issued.to_string(),
            format!("used {} (in time), late {}, wasted {}", p.used, p.late, p.wasted),
        ),
        (
            "precision",
            pct(p.precision),
            "(used + late) / issued".to_string(),
        ),
        (
            "recall",
            pct(p.recall),
            format!("(used + late) / the {} page-ins without prefetch", p.page_ins),
        ),
        (
            "wasted",
            format!("{:.3} MiB", p.wasted_bytes_per_token / MIB),
            "per token, prefetched and unmapped unused".to_string(),
        ),
        (
            "stall hidden",
            format!("{:.3} ms", p.stall_hidden_ms_per_step),
            format!(
                "per step: {:.3} without prefetch, {:.3} with it, {:.3} with the oracle ({} of its hidden stall)",
                p.stall_ms_per_step_none,
                p.stall_ms_per_step,
                p.stall_ms_per_step_oracle,
                pct(p.stall_hidden_of_oracle)
            ),
        ),
    ];
    let rows = rows.into_iter().chain(issue_row(p)).chain(cut_row(p));
    for (k, v, note) in rows.chain(curve_row(p)) {
        let _ = writeln!(s, "    {k:<15} {v:>12}   {note}");
    }
    s
}

/// The confidence cut's row of the prefetch lines; none without a cut.
fn cut_row(p: &PrefetchReport) -> Option<(&'static str, String, String)> {
    let min = p.min_score?;
    Some((
        "cut",
        format!("{min}"),
        "predictions scoring below this fraction of their prediction's best were not issued; precision and recall above are against the cut".to_string(),
    ))
}

/// The cut curve's row of the prefetch lines (none under `legacy`): precision / recall, %,
/// of the issued prefetches scoring at least each cut.
fn curve_row(p: &PrefetchReport) -> Option<(&'static str, String, String)> {
    let curve = p.cut_curve.as_ref()?;
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.0}", v * 100.0));
    let points: Vec<String> = curve
        .iter()
        .map(|c| format!("{}: {}/{}", c.min_score, pct(c.precision), pct(c.recall)))
        .collect();
    Some((
        "by cut",
        "prec/rec %".to_string(),
        format!(
            "of the issued scoring at least each cut: {}",
            points.join(", ")
        ),
    ))
}

/// The issue policy's row of the prefetch lines; none under `legacy` (absent from the block).
fn issue_row(p: &PrefetchReport) -> Option<(&'static str, String, String)> {
    let issue = p.issue.as_ref()?;
    let cap = p
        .cap_mib
        .map_or(String::new(), |c| format!(", at most {c:.1} MiB in flight"));
    let buffer = p.buffer_units.map_or(String::new(), |n| {
        format!(", staged in a buffer of {n} units")
    });
    Some((
        "issue",
        issue.clone(),
        format!(
            "{} of the issued cancelled before they started{cap}{buffer}; demand work waited {:.3} ms per step for started prefetches",
            p.cancelled.unwrap_or(0),
            p.blocked_ms_per_step.unwrap_or(0.0)
        ),
    ))
}
