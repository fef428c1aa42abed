//! The text tables of `sim validate`: measured vs predicted per policy, and the host-time
//! breakdown of the real replay beside the engine's split.

use super::analysis::{Analysis, BlocksFrom, RowVerdict};
use super::{Validation, ValidationRow};
use crate::engine::StepParts;
use std::fmt::Write;
use validate::HostBreakdown;

/// The validation goal, percent: a row meets it when its median step-time error is within this
/// (the goal for every mechanism, BENCHMARKS.md, "Validation"). The table's last lines count the
/// rows that do.
pub const GOAL_PCT: f64 = 10.0;

/// The human-readable validation table.
pub fn table(v: &Validation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "trace {} ({}), expert {:.2} MiB, {}, profile {}",
        v.trace,
        v.model,
        v.expert_bytes as f64 / crate::MIB,
        if v.retention_text.is_empty() {
            &v.retention
        } else {
            &v.retention_text
        },
        v.hw
    );
    let _ = writeln!(
        s,
        "{:<14} {:>6} {:>9}   {:>27}   {:>27}   {:>22}",
        "policy",
        "steps",
        "page-ins",
        "measured p50/p99/mean ms",
        "predicted p50/p99/mean ms",
        "error % p50/p99/mean"
    );
    for r in &v.rows {
        let _ = writeln!(
            s,
            "{:<14} {:>6} {:>9}   {:>8.3} {:>8.3} {:>9.3}   {:>8.3} {:>8.3} {:>9.3}   {:>6.1} {:>6.1} {:>7.1}",
            r.policy,
            r.steps,
            r.page_ins,
            r.measured.p50_ms,
            r.measured.p99_ms,
            r.measured.mean_ms,
            r.predicted.p50_ms,
            r.predicted.p99_ms,
            r.predicted.mean_ms,
            r.error_pct_p50,
            r.error_pct_p99,
            r.error_pct_mean
        );
        if r.repetitions.len() > 1 {
            s += &repetitions_lines(r);
        }
    }
    s += &goal_lines(v);
    s
}

/// The lines under a row replayed several times: the repetitions' p50s, their median, spread
/// and error range, and the host-speed probe of each.
fn repetitions_lines(r: &ValidationRow) -> String {
    let mut s = String::new();
    let p50s: Vec<String> = r
        .repetitions
        .iter()
        .map(|x| format!("{:.3}", x.measured.p50_ms))
        .collect();
    let _ = writeln!(
        s,
        "{:<14} p50 of {} repetitions: {} ms; median {:.3}, spread {:.1}%, error {:+.1}% ({:+.1}..{:+.1}%)",
        "",
        r.repetitions.len(),
        p50s.join(" / "),
        r.measured.p50_ms,
        r.measured_p50_spread_pct,
        r.error_pct_p50,
        r.error_pct_p50_range[0],
        r.error_pct_p50_range[1]
    );
    // The host's speed per repetition: a slow host slows every driver call.
    let probe: Option<Vec<String>> = r
        .repetitions
        .iter()
        .map(|x| x.launch_us_per_group().map(|v| format!("{v:.1}")))
        .collect();
    if let Some(probe) = probe {
        let _ = writeln!(
            s,
            "{:<14} host launches per group: {} µs (host-speed probe: no VMM calls in it)",
            "",
            probe.join(" / ")
        );
    }
    s
}

/// The closing lines: how many rows meet the goal, and a note when one row's repetitions
/// spread by more than the goal.
fn goal_lines(v: &Validation) -> String {
    let mut s = String::new();
    let within = v
        .rows
        .iter()
        .filter(|r| r.error_pct_p50.abs() <= GOAL_PCT)
        .count();
    let _ = writeln!(
        s,
        "median step-time error within {GOAL_PCT}%: {within} of {}",
        reports::metrics::count(v.rows.len() as u64, "row")
    );
    // A row's own repetitions bound what one replay can tell: when they disagree by more than
    // the goal, so may the next replay (a row's median moved 5-40% between sets recorded minutes
    // apart: docs/history/validation.md).
    let widest = v
        .rows
        .iter()
        .filter(|r| r.repetitions.len() > 1)
        .max_by(|a, b| {
            a.measured_p50_spread_pct
                .total_cmp(&b.measured_p50_spread_pct)
        });
    if let Some(r) = widest.filter(|r| r.measured_p50_spread_pct > GOAL_PCT) {
        let _ = writeln!(
            s,
            "note: the repetitions of {} spread by {:.1}% (their p50s' max - min over the median), \
             more than the {GOAL_PCT}% goal: one replay here cannot tell errors of that size from \
             run-to-run variation; replay at a quieter time or with a larger --repeat",
            r.policy, r.measured_p50_spread_pct
        );
    }
    s
}

/// Means per step of the real replay's host phases (over every repetition) and of the
/// engine's predicted split, per policy, ms.
pub fn breakdown_table(v: &Validation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "where a step's time goes, ms per step (means over steps and repetitions)"
    );
    for r in &v.rows {
        s += &breakdown_rows(r);
    }
    s
}

/// One row's breakdown: the real replay's host phases (when recorded), the engine's predicted
/// split, and the per-call costs of page-ins and evictions, real against the model.
fn breakdown_rows(r: &ValidationRow) -> String {
    let mut s = String::new();
    let host: Vec<&HostBreakdown> = r.repetitions.iter().flat_map(|x| &x.host).collect();
    let nh = host.len().max(1) as f64;
    let h = |f: fn(&HostBreakdown) -> f64| host.iter().map(|b| f(b)).sum::<f64>() / nh / 1e3;
    let np = r.predicted_parts.len().max(1) as f64;
    let p = |f: fn(&StepParts) -> f64| r.predicted_parts.iter().map(f).sum::<f64>() / np / 1e3;
    if host.is_empty() {
        let _ = writeln!(
            s,
            "{:<14} real host:  not recorded (a replay from before the breakdown)",
            r.policy
        );
    }
    let measured_mean = r
        .repetitions
        .iter()
        .map(|x| x.measured.mean_ms)
        .sum::<f64>()
        / r.repetitions.len().max(1) as f64;
    if !host.is_empty() {
        let _ = writeln!(
        s,
        "{:<14} real host:  router wait {:.3}  evict {:.3}  commit {:.3}  h2d enqueue {:.3}  launch+events {:.3}  late wait {:.3}  late evict {:.3}  = {:.3} (GPU step mean {:.3}; page-ins {:.1}, evictions {:.1} per step)",
        r.policy,
        h(|b| b.router_wait_us),
        h(|b| b.evict_us),
        h(|b| b.commit_us),
        h(|b| b.h2d_enqueue_us),
        h(|b| b.launch_us),
        h(|b| b.late_wait_us),
        h(|b| b.late_evict_us),
        h(HostBreakdown::total_us),
        measured_mean,
        h(|b| b.page_ins as f64) * 1e3,
        h(|b| b.evictions as f64) * 1e3,
        );
    }
    let _ = writeln!(
        s,
        "{:<14} predicted: compute {:.3} (experts {:.3})  router sync {:.3}  commit {:.3}  decommit {:.3}  copy {:.3}  faults {:.3}  stall {:.3}  (step mean {:.3})",
        "",
        p(|x| x.compute_us),
        p(|x| x.expert_us),
        p(|x| x.host_sync_us),
        p(|x| x.commit_us),
        p(|x| x.decommit_us),
        p(|x| x.copy_us),
        p(|x| x.fault_us),
        p(|x| x.stall_us),
        r.predicted.mean_ms,
    );
    // the same per call sequence: µs per page-in and per eviction, real vs model
    let (pi, ev) = (h(|b| b.page_ins as f64), h(|b| b.evictions as f64));
    if !host.is_empty() && pi > 0.0 {
        let per = |v: f64, n: f64| {
            if n > 0.0 {
                format!("{:.1}", v / n)
            } else {
                "-".into()
            }
        };
        let _ = writeln!(
            s,
            "{:<14} per page-in: commit {} µs (model {}), H2D enqueue {} µs; per eviction: decommit {} µs (model {})",
            "",
            per(h(|b| b.commit_us), pi),
            per(p(|x| x.commit_us), pi),
            per(h(|b| b.h2d_enqueue_us), pi),
            per(h(|b| b.evict_us + b.late_evict_us), ev),
            per(p(|x| x.decommit_us), ev),
        );
    }
    s
}

/// The analysis's text: per row the verdict and its interval, the component table, the host
/// calls per row and the blocks' VMM arms.
pub fn analysis_table(a: &Analysis) -> String {
    let mut s = String::new();
    let from = match a.blocks_from {
        BlocksFrom::Blocks => "per recorded block",
        BlocksFrom::Repetitions => {
            "no blocks recorded: each repetition taken as a block (they ran back to back, so the interval is too narrow if the host's state held for all of them)"
        }
    };
    let _ = writeln!(
        s,
        "verdicts: bias ln(measured/predicted) {from}; probe-adjusted where every block has a probe; block bootstrap of {} resamples (seed {}), 95% interval read as error %; pass inside +-{GOAL_PCT}%, fail outside",
        a.resamples, a.seed
    );
    for r in &a.rows {
        s += &verdict_line(r);
    }
    s += &components_lines(a);
    s
}

/// One row's verdict line.
fn verdict_line(r: &RowVerdict) -> String {
    let biases: Vec<String> = r.blocks.iter().map(|b| format!("{:+.3}", b.bias)).collect();
    let adjusted = match (r.probe_reference_us, r.probe_slope_per_us) {
        (Some(x), Some(k)) => format!(" at probe {x:.1} µs (slope {k:+.4}/µs)"),
        _ => " (not probe-adjusted)".to_string(),
    };
    format!(
        "{:<14} {:<9} error {:+.1}% [{:+.1}, {:+.1}]{adjusted}; block biases {}\n",
        r.policy,
        r.verdict.name(),
        r.error_pct,
        r.error_pct_lo,
        r.error_pct_hi,
        biases.join(" ")
    )
}

/// The component table, the host calls and the VMM arms.
fn components_lines(a: &Analysis) -> String {
    let mut s = String::new();
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
    if !a.components.is_empty() {
        let _ = writeln!(
            s,
            "per-call VMM prices, µs per granule, measured / model, by live set (granules mapped at the step's groups, from the plan)"
        );
        let _ = writeln!(
            s,
            "{:<14} {:>6} {:>10} {:>8} {:>6}   {:>17}   {:>17}",
            "policy", "unit", "live band", "live", "steps", "commit", "decommit"
        );
        for c in &a.components {
            let _ = writeln!(
                s,
                "{:<14} {:>6.1} {:>10} {:>8.0} {:>6}   {:>8} {:>8}   {:>8} {:>8}",
                c.policy,
                c.unit_granules,
                c.live_band,
                c.live_granules,
                c.steps,
                opt(c.commit_us_per_granule),
                opt(c.commit_model_us_per_granule),
                opt(c.decommit_us_per_granule),
                opt(c.decommit_model_us_per_granule)
            );
        }
    }
    for c in &a.calls {
        let _ = writeln!(
            s,
            "{:<14} host per group: launches {:.1} µs (not priced), router wait {:.1} µs (model router_sync {:.1}); per page-in: H2D enqueue {} µs, model copy {} µs",
            c.policy,
            c.launch_us_per_group,
            c.router_wait_us_per_group,
            c.router_sync_model_us,
            opt(c.h2d_enqueue_us_per_page_in),
            opt(c.h2d_copy_model_us_per_page_in)
        );
    }
    for r in &a.arms {
        let _ = writeln!(
            s,
            "VMM arm {} block {}: {} granules, commit {:.2} (model {:.2}) µs/granule, decommit {:.2} (model {:.2}), H2D {:.1} µs (model {:.1})",
            r.when,
            r.block + 1,
            r.unit_granules,
            r.commit_us_per_granule,
            r.commit_model_us_per_granule,
            r.decommit_us_per_granule,
            r.decommit_model_us_per_granule,
            r.h2d_us,
            r.h2d_model_us
        );
    }
    s
}
