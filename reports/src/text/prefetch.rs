//! The prefetch table `sim sweep` prints when its grid has a predictor: one row per run with
//! a `prefetch` block.

use super::MIB;
use crate::run::RunReport;
use std::fmt::Write;

/// The prefetch table of a sweep: per run its retention setting, predictor, window and
/// source, the fate of its prefetches, precision, recall and the stall hidden (empty when no
/// run has a `prefetch` block). A `cancel` column (prefetches dropped before they started;
/// `-` under `legacy`) follows `wasted` when any run queues its prefetches, so tables of
/// legacy runs read as before the issue policies.
pub fn prefetch_table(reports: &[RunReport]) -> String {
    let mut s = String::new();
    if reports.iter().all(|r| r.prefetch.is_none()) {
        return s;
    }
    let _ = writeln!(
        s,
        "\nprefetch (stall hidden against the same plan without prefetch; % of the oracle's at the same window):"
    );
    let queued = reports
        .iter()
        .any(|r| r.prefetch.as_ref().is_some_and(|p| p.cancelled.is_some()));
    let cancel = |c: &str| {
        if queued {
            format!(" {c:>7}")
        } else {
            String::new()
        }
    };
    let _ = writeln!(
        s,
        "{:<30} {:<10} {:>3} {:<7} {:>7} {:>7} {:>7} {:>7}{} {:>6} {:>6} {:>9} {:>8} {:>9} {:>7}",
        "mechanism / retention",
        "predictor",
        "w",
        "learns",
        "issued",
        "used",
        "late",
        "wasted",
        cancel("cancel"),
        "prec%",
        "rec%",
        "MiB w/tok",
        "stall ms",
        "hidden ms",
        "%oracle"
    );
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.1}", v * 100.0));
    for r in reports {
        let Some(p) = &r.prefetch else { continue };
        let setting = r.retention.as_ref().map_or("streaming".to_string(), |x| {
            format!(
                "{} {} {} x{}",
                x.evict.name(),
                x.budget,
                x.split.name(),
                x.batch
            )
        });
        let _ = writeln!(
            s,
            "{:<30} {:<10} {:>3} {:<7} {:>7} {:>7} {:>7} {:>7}{} {:>6} {:>6} {:>9.3} {:>8.3} {:>9.3} {:>7}",
            format!("{} {setting}", r.inputs.policy),
            p.predictor,
            p.window,
            p.learns_from,
            p.issued,
            p.used,
            p.late,
            p.wasted,
            cancel(&p.cancelled.map_or("-".to_string(), |c| c.to_string())),
            pct(p.precision),
            pct(p.recall),
            p.wasted_bytes_per_token / MIB,
            p.stall_ms_per_step,
            p.stall_hidden_ms_per_step,
            pct(p.stall_hidden_of_oracle)
        );
    }
    s
}
