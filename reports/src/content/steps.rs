//! Several tokens per step: per setting (trace, mechanism, retention, prefetch), a table of
//! the runs along the stepping axis (tokens per step, the union of experts per MoE layer, the
//! decode page-ins, tokens/s and the break-even acceptance) and, on a hardware profile, a
//! figure of tokens/s against K, one line per acceptance P (K = 0 starts every line). Left
//! out when the grid had no stepping axis (`--verify`, `--prefill-chunk`).

use super::{distinct, figure, metric_table, profile_name, slug};
use crate::doc::Doc;
use crate::metrics::{Better, Metric};
use crate::plots::{self, LineChart, Scale, Series};
use crate::results::{Results, RunCoords, RunEntry};
use crate::run::{RunReport, StepsReport};

fn block(r: &RunReport) -> Option<&StepsReport> {
    r.steps.as_ref()
}

const fn sm(get: fn(&RunReport) -> Option<f64>, label: &'static str, better: Better) -> Metric {
    Metric {
        get,
        label,
        better,
        scale: 1.0,
    }
}

/// The columns of a stepping table.
const STEPS: &[Metric] = &[
    sm(
        |r| Some(block(r)?.tokens_per_step),
        "tokens / step",
        Better::Higher,
    ),
    sm(
        |r| Some(block(r)?.union_mean),
        "union / layer",
        Better::Lower,
    ),
    sm(
        |r| Some(block(r)?.union_p50 as f64),
        "union p50",
        Better::Neither,
    ),
    sm(
        |r| Some(block(r)?.union_p99 as f64),
        "union p99",
        Better::Neither,
    ),
    sm(
        |r| Some(block(r)?.decode_page_ins_per_token),
        "decode page-ins / token",
        Better::Lower,
    ),
    sm(
        |r| Some(r.timing.as_ref()?.tokens_per_s),
        "tokens/s",
        Better::Higher,
    ),
    sm(|r| block(r)?.speedup, "speedup vs K=0", Better::Higher),
    sm(
        |r| block(r)?.break_even_acceptance,
        "break-even P",
        Better::Lower,
    ),
];

/// The stepping section; nothing without a stepping axis.
pub(super) fn steps(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    let runs: Vec<&RunEntry> = res
        .runs
        .iter()
        .filter(|r| r.grid.verify.is_some() || r.grid.prefill_chunk.is_some())
        .collect();
    if runs.is_empty() {
        return Ok(());
    }
    doc.h(2, "Several tokens per step");
    doc.p(format!(
        "Each decode step verifies K drafted tokens plus the current one: it reads, in every MoE layer, the union of the experts of the next K + 1 tokens of the trace (the routing of rejected drafts is approximated by the trace's next tokens) and advances by the accepted drafts + 1 (each accepted with probability P, independently; N = a fixed count). Union: distinct experts per MoE layer of a decode step. Speedup: tokens/s over the same run at K = 0. Break-even P: the smallest acceptance, to 1/128, at which runs of the same setting reach the tokens/s of K = 0 (a bisection over simulated runs; empty where verification does not pay even at P = 1){}.",
        profile_name(res).map_or(String::new(), |p| format!("; timing on `{p}`"))
    ));
    // a setting: every coordinate but K and P
    let key = |r: &RunEntry| RunCoords {
        verify: None,
        acceptance: None,
        ..r.grid.clone()
    };
    for k in distinct(runs.iter().map(|r| key(r))) {
        let group: Vec<&RunEntry> = runs.iter().filter(|r| key(r) == k).cloned().collect();
        let setting = super::run_label_of(&k);
        doc.h(3, format!("`{}`, {setting}", k.trace));
        metric_table(doc, &group, STEPS, None);
        if group.iter().any(|r| r.result.timing.is_some()) {
            tokens_vs_k(doc, &group, &k.trace, &setting)?;
        }
    }
    Ok(())
}

/// Tokens/s against K, one line per acceptance of `group` (one setting); the K = 0 run (no
/// acceptance) is every line's first point.
fn tokens_vs_k(
    doc: &mut Doc,
    group: &[&RunEntry],
    trace: &str,
    setting: &str,
) -> anyhow::Result<()> {
    let tps = |r: &RunEntry| {
        Some((
            r.grid.verify? as f64,
            r.result.timing.as_ref()?.tokens_per_s,
        ))
    };
    let base: Vec<(f64, f64)> = group
        .iter()
        .filter(|r| r.grid.verify == Some(0))
        .filter_map(|r| tps(r))
        .collect();
    let accepts = distinct(group.iter().filter_map(|r| r.grid.acceptance.clone()));
    let series: Vec<Series> = accepts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut pts: Vec<(f64, f64)> = base.clone();
            pts.extend(
                group
                    .iter()
                    .filter(|r| r.grid.acceptance.as_ref() == Some(a))
                    .filter_map(|r| tps(r)),
            );
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let name = if a.starts_with("N=") {
                a.clone()
            } else {
                format!("P = {a}")
            };
            Series::new(name, pts).color(i)
        })
        .collect();
    if series.is_empty() {
        return Ok(());
    }
    let title = format!("Tokens/s vs drafts verified, {trace}, {setting}");
    figure(
        doc,
        format!("steps_tokens_{}_{}.svg", slug(trace), slug(setting)),
        plots::line_chart(
            &LineChart {
                title: &title,
                x_label: "drafts verified per step (K)",
                y_label: "tokens/s",
                x_scale: Scale::Linear,
                y_from_zero: true,
            },
            &series,
        ),
        format!("Tokens per second against the drafts verified per decode step on `{trace}` ({setting}), one line per draft acceptance; K = 0 (one token per step) is every line's first point."),
    )
}
