//! The placement table `sim sweep` prints when its grid has a `--cpu-experts` placement: one
//! row per run with a `cpu` block, beside the GPU-only runs of the same sweep.

use crate::run::RunReport;
use std::fmt::Write;

/// The placement table of a sweep: per timed run its mechanism and retention setting, the
/// placement (`none` for a run without a `cpu` block), tokens/s, experts computed on the CPU
/// per token, the CPU lane's busy time and the GPU's wait for it (empty when no run has a
/// `cpu` block).
pub fn placement_table(reports: &[RunReport]) -> String {
    let mut s = String::new();
    if reports.iter().all(|r| r.cpu.is_none()) {
        return s;
    }
    let _ = writeln!(
        s,
        "\nexecution placement (--cpu-experts; the CPU lane runs beside the GPU's experts):"
    );
    let _ = writeln!(
        s,
        "{:<30} {:<10} {:>10} {:>11} {:>12} {:>12}",
        "mechanism / retention",
        "placement",
        "tokens/s",
        "cpu exp/tok",
        "cpu ms/step",
        "wait ms/step"
    );
    for r in reports {
        let Some(t) = &r.timing else { continue };
        let setting = r.retention.as_ref().map_or("streaming".to_string(), |x| {
            format!(
                "{} {} {} x{}",
                x.evict.name(),
                x.budget,
                x.split.name(),
                x.batch
            )
        });
        let (placement, per_tok, busy, wait) = match &r.cpu {
            Some(c) => (
                c.placement.clone(),
                c.experts_on_cpu_per_token,
                c.cpu_lane_ms_per_step,
                c.cpu_wait_ms_per_step,
            ),
            None => ("none".to_string(), 0.0, 0.0, 0.0),
        };
        let _ = writeln!(
            s,
            "{:<30} {:<10} {:>10.2} {:>11.2} {:>12.3} {:>12.3}",
            format!("{} {setting}", r.inputs.policy),
            placement,
            t.tokens_per_s,
            per_tok,
            busy,
            wait
        );
    }
    s
}
