//! The text tables of `sim validate`: measured vs predicted per policy, and the host-time
//! breakdown of the real replay beside the engine's split.

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
