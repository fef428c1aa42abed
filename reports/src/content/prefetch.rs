//! Prefetch predictors: per evaluated trace, profile trace and retention setting, each
//! predictor's accuracy and the stall it hid (a table), and the stall hidden against the
//! window, one line per predictor (a figure). Left out when no run has a `prefetch` block.

use super::{distinct, figure, metric_table, profile_name, slug};
use crate::doc::Doc;
use crate::metrics::{Better, Metric};
use crate::plots::{self, LineChart, Scale, Series};
use crate::results::{Results, RunEntry};
use crate::run::{PrefetchReport, RunReport};

/// A metric of the `prefetch` block.
const fn pm(get: fn(&RunReport) -> Option<f64>, label: &'static str, better: Better) -> Metric {
    Metric {
        get,
        label,
        better,
        scale: 1.0,
    }
}

fn block(r: &RunReport) -> Option<&PrefetchReport> {
    r.prefetch.as_ref()
}

/// The columns of a predictor table.
const PREFETCH: &[Metric] = &[
    pm(|r| Some(block(r)?.issued as f64), "issued", Better::Neither),
    pm(|r| Some(block(r)?.used as f64), "used", Better::Higher),
    pm(|r| Some(block(r)?.late as f64), "late", Better::Lower),
    pm(|r| Some(block(r)?.wasted as f64), "wasted", Better::Lower),
    pm(
        |r| Some(block(r)?.precision? * 100.0),
        "precision %",
        Better::Higher,
    ),
    pm(
        |r| Some(block(r)?.recall? * 100.0),
        "recall %",
        Better::Higher,
    ),
    Metric {
        get: |r| Some(block(r)?.wasted_bytes_per_token),
        label: "wasted MiB/token",
        better: Better::Lower,
        scale: crate::metrics::MIB,
    },
    pm(
        |r| Some(block(r)?.stall_ms_per_step),
        "stall ms",
        Better::Lower,
    ),
    pm(
        |r| Some(block(r)?.stall_hidden_ms_per_step),
        "hidden ms",
        Better::Higher,
    ),
    pm(
        |r| Some(block(r)?.stall_hidden_of_oracle? * 100.0),
        "% of oracle",
        Better::Higher,
    ),
    pm(
        |r| Some(r.timing.as_ref()?.tokens_per_s),
        "tokens/s",
        Better::Higher,
    ),
];

/// The prefetch section; nothing when no run has a `prefetch` block.
pub(super) fn prefetch(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    let runs: Vec<&RunEntry> = res
        .runs
        .iter()
        .filter(|r| r.result.prefetch.is_some())
        .collect();
    if runs.is_empty() {
        return Ok(());
    }
    doc.h(2, "Prefetch predictors");
    doc.p(format!(
        "Simulated on `{}`. Each predictor names, at a group's router, the units of the group `window` MoE layers ahead; all but `oracle` (the bound) learn only from the profile trace, or, when a run's profile trace is its own trace, online from its earlier tokens. Used: paged in by a group and resident by its router; late: still in flight then; wasted: unmapped unused. Precision = (used + late) / issued; recall = (used + late) / the page-ins of the same plan without prefetch. Hidden = the stall without prefetch minus this run's (negative when prefetches delay demand page-ins); % of oracle = hidden / the oracle's at the same window.",
        profile_name(res).unwrap_or_default()
    ));
    let key = |r: &RunEntry| {
        let g = &r.grid;
        (
            g.trace.clone(),
            g.profile_trace.clone(),
            g.mechanism.clone(),
            g.evict.clone(),
            g.budget.clone(),
            g.split.clone(),
            g.batch,
        )
    };
    let is_oracle = |r: &RunEntry| block(&r.result).is_some_and(|b| b.predictor == "oracle");
    for k in distinct(runs.iter().map(|r| key(r))) {
        // a group learning from another trace shows the bound of its own trace beside it
        // (the oracle learns nothing, so it has no cross-trace run)
        let bound = |r: &RunEntry| {
            let mut own = k.clone();
            own.1 = own.0.clone();
            k.0 != k.1 && is_oracle(r) && key(r) == own
        };
        let group: Vec<&RunEntry> = runs
            .iter()
            .filter(|r| key(r) == k || bound(r))
            .cloned()
            .collect();
        let (trace, profile) = (&k.0, &k.1);
        let source = if trace == profile {
            "online".to_string()
        } else {
            format!("profile `{profile}`")
        };
        let setting = super::run_label(group[0]);
        let setting = setting.split(" + ").next().unwrap_or(&setting).to_string();
        doc.h(3, format!("`{trace}`, {setting}, learning from {source}"));
        metric_table(doc, &group, PREFETCH, None);
        doc.p(verdict(&group));
        hidden_vs_window(doc, &group, trace, &setting, &source)?;
    }
    Ok(())
}

/// Which predictor and window of `group` (one setting) pay off (hide stall: the same plan's
/// stall without prefetch minus the run's is above 0), the best of them, and what the oracle
/// would gain at its best window.
fn verdict(group: &[&RunEntry]) -> String {
    let runs = || {
        group
            .iter()
            .filter_map(|r| Some((block(&r.result)?, &r.result)))
    };
    let best = |oracle: bool| {
        runs()
            .filter(|(b, _)| (b.predictor == "oracle") == oracle)
            .max_by(|a, b| {
                a.0.stall_hidden_ms_per_step
                    .total_cmp(&b.0.stall_hidden_ms_per_step)
            })
    };
    let tps = |r: &RunReport| {
        r.timing.as_ref().map_or(String::new(), |t| {
            format!(", {:.1} tokens/s", t.tokens_per_s)
        })
    };
    let mut s = String::new();
    let paying: Vec<String> = runs()
        .filter(|(b, _)| b.predictor != "oracle" && b.stall_hidden_ms_per_step > 0.0)
        .map(|(b, _)| format!("`{}` at window {}", b.predictor, b.window))
        .collect();
    match best(false) {
        None => {}
        Some((b, r)) if paying.is_empty() => s.push_str(&format!(
            "No learned predictor pays off here: the best, `{}` at window {}, hides {:.3} ms of the {:.3} ms stall per step without prefetch{}. ",
            b.predictor, b.window, b.stall_hidden_ms_per_step, b.stall_ms_per_step_none, tps(r)
        )),
        Some((b, r)) => s.push_str(&format!(
            "Pays off here: {}; the best, `{}` at window {}, hides {:.3} ms of the {:.3} ms stall per step without prefetch{}. ",
            paying.join(", "), b.predictor, b.window, b.stall_hidden_ms_per_step, b.stall_ms_per_step_none, tps(r)
        )),
    }
    if let Some((b, r)) = best(true) {
        s.push_str(&format!(
            "The oracle (the bound) would hide {:.3} ms per step at window {}{}.",
            b.stall_hidden_ms_per_step,
            b.window,
            tps(r)
        ));
    }
    s
}

/// Stall hidden against the window, one line per predictor of `group` (one setting).
fn hidden_vs_window(
    doc: &mut Doc,
    group: &[&RunEntry],
    trace: &str,
    setting: &str,
    source: &str,
) -> anyhow::Result<()> {
    let predictors = distinct(
        group
            .iter()
            .filter_map(|r| Some(block(&r.result)?.predictor.clone())),
    );
    let series: Vec<Series> = predictors
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut pts: Vec<(f64, f64)> = group
                .iter()
                .filter_map(|r| block(&r.result))
                .filter(|b| &b.predictor == p)
                .map(|b| (b.window as f64, b.stall_hidden_ms_per_step))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let s = Series::new(p.clone(), pts);
            if p == "oracle" {
                s.dashed()
            } else {
                s.color(i)
            }
        })
        .collect();
    let title = format!("Stall hidden vs window, {trace}, {setting}");
    figure(
        doc,
        format!("prefetch_hidden_{}_{}_{}.svg", slug(trace), slug(setting), slug(source)),
        plots::line_chart(
            &LineChart { title: &title, x_label: "prefetch window (MoE layers ahead)", y_label: "stall hidden (ms per step)", x_scale: Scale::Linear, y_from_zero: false },
            &series,
        ),
        format!("Stall hidden per decode step against the prefetch window on `{trace}` ({setting}, learning from {source}), one line per predictor; the oracle, dashed, is the bound at each window."),
    )
}
