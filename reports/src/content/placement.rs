//! Execution placement (`--cpu-experts`): per setting (trace, mechanism, eviction, split,
//! batch, prefetch, stepping), a table with one row per budget and one tokens/s column per
//! placement, the fastest marked and named; and, when the grid has `layers:N` placements, a
//! figure of tokens/s against N, one line per budget (`none` is N = 0). Left out when the
//! grid had no placement axis.

use super::{distinct, figure, is_belady, profile_name, slug};
use crate::doc::{Cell, Doc};
use crate::metrics::fmt;
use crate::plots::{self, LineChart, Scale, Series};
use crate::results::{Results, RunCoords, RunEntry};
use crate::sizes::given_text;

/// The placement section; nothing without a placement axis.
pub(super) fn placement(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    let all: Vec<&RunEntry> = res
        .runs
        .iter()
        .filter(|r| r.grid.cpu_experts.is_some() && r.result.timing.is_some())
        .collect();
    // the offline bound reads the future: compare placements on online policies when any
    let online: Vec<&RunEntry> = all.iter().filter(|r| !is_belady(r)).cloned().collect();
    let runs = if online.is_empty() { all } else { online };
    if runs.is_empty() {
        return Ok(());
    }
    doc.h(
        2,
        "Execution placement: page the experts, or run them on the CPU",
    );
    doc.p(format!(
        "Each column places the routed experts differently (`--cpu-experts`): `none` pages them onto the GPU; `all` runs every expert on the CPU (llama.cpp `--cpu-moe`); `layers:N` runs the first N MoE layers' experts on the CPU and pages the rest under the budget, which then counts only GPU units (llama.cpp `--n-cpu-moe N`); `misses` runs a non-resident expert on the CPU and pages it in off the critical path (ktransformers); `cheaper` takes per missed unit the faster of paging it in and the CPU (Fiddler). CPU expert calls are priced from the host profile, the activations cross PCIe both ways per MoE layer, and a layer ends when both the GPU and the CPU are done. Cells: tokens/s{}; the fastest placement per budget is marked.",
        profile_name(res).map_or(String::new(), |p| format!(" on `{p}`"))
    ));
    let key = |r: &RunEntry| RunCoords {
        budget: None,
        cpu_experts: None,
        ..r.grid.clone()
    };
    for k in distinct(runs.iter().map(|r| key(r))) {
        let group: Vec<&RunEntry> = runs.iter().filter(|r| key(r) == k).cloned().collect();
        let setting = super::run_label_of(&k);
        doc.h(3, format!("`{}`, {setting}", k.trace));
        table(doc, &group);
        tokens_vs_layers(doc, &group, &k.trace, &setting)?;
    }
    Ok(())
}

fn tokens_per_s(r: &RunEntry) -> Option<f64> {
    Some(r.result.timing.as_ref()?.tokens_per_s)
}

/// One row per budget of `group` (one setting), one tokens/s column per placement, and the
/// fastest placement's name.
fn table(doc: &mut Doc, group: &[&RunEntry]) {
    let placements = distinct(group.iter().filter_map(|r| r.grid.cpu_experts.clone()));
    let budgets = distinct(group.iter().map(|r| r.grid.budget.clone()));
    let mut header = vec!["budget".to_string()];
    header.extend(placements.iter().cloned());
    header.push("fastest".into());
    let rows = budgets
        .iter()
        .map(|b| {
            let vals: Vec<Option<f64>> = placements
                .iter()
                .map(|p| {
                    group
                        .iter()
                        .find(|r| &r.grid.budget == b && r.grid.cpu_experts.as_ref() == Some(p))
                        .and_then(|r| tokens_per_s(r))
                })
                .collect();
            let best = vals
                .iter()
                .enumerate()
                .filter_map(|(i, v)| Some((i, (*v)?)))
                .fold(None, |acc: Option<(usize, f64)>, (i, v)| match acc {
                    Some((_, w)) if w >= v => acc,
                    _ => Some((i, v)),
                });
            let mut row = vec![Cell::plain(budget_label(group, b))];
            row.extend(vals.iter().enumerate().map(|(i, v)| Cell {
                text: v.map(fmt).unwrap_or_else(|| "–".into()),
                best: best.is_some_and(|(j, _)| j == i),
            }));
            row.push(Cell::plain(
                best.map_or("–".to_string(), |(i, _)| placements[i].clone()),
            ));
            row
        })
        .collect();
    doc.table(header, rows);
}

/// A row's budget as the user gave it, bytes in GiB/MiB (`3 GiB`, `25%`); `streaming`
/// without one. Not what it resolved to: `layers:N` counts only the GPU's units, so one
/// budget holds different units per placement.
fn budget_label(group: &[&RunEntry], b: &Option<String>) -> String {
    group
        .iter()
        .filter(|r| &r.grid.budget == b)
        .find_map(|r| r.result.retention.as_ref())
        .map_or_else(
            || b.clone().unwrap_or_else(|| "streaming".into()),
            |i| given_text(&i.budget),
        )
}

/// N of a `layers:N` placement, 0 for `none`.
fn layers_n(p: &str) -> Option<f64> {
    match p {
        "none" => Some(0.0),
        _ => p.strip_prefix("layers:")?.parse::<f64>().ok(),
    }
}

/// Tokens/s against N for the `layers:N` runs of `group` (and `none` as N = 0), one line per
/// budget; nothing without a `layers:N` run.
fn tokens_vs_layers(
    doc: &mut Doc,
    group: &[&RunEntry],
    trace: &str,
    setting: &str,
) -> anyhow::Result<()> {
    if !group.iter().any(|r| {
        r.grid
            .cpu_experts
            .as_deref()
            .is_some_and(|p| p.starts_with("layers:"))
    }) {
        return Ok(());
    }
    let budgets = distinct(group.iter().map(|r| r.grid.budget.clone()));
    let series: Vec<Series> = budgets
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut pts: Vec<(f64, f64)> = group
                .iter()
                .filter(|r| &r.grid.budget == b)
                .filter_map(|r| Some((layers_n(r.grid.cpu_experts.as_deref()?)?, tokens_per_s(r)?)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let name = match b {
                Some(_) => format!("budget {}", budget_label(group, b)),
                None => "streaming".into(),
            };
            Series::new(name, pts).color(i)
        })
        .collect();
    let title = format!("Tokens/s vs MoE layers on the CPU, {trace}, {setting}");
    figure(
        doc,
        format!("placement_layers_{}_{}.svg", slug(trace), slug(setting)),
        plots::line_chart(
            &LineChart {
                title: &title,
                x_label: "MoE layers whose experts run on the CPU (N of layers:N)",
                y_label: "tokens/s",
                x_scale: Scale::Linear,
                y_from_zero: true,
            },
            &series,
        ),
        format!("Tokens per second against N, the MoE layers whose experts live and run on the CPU (`--cpu-experts layers:N`, llama.cpp `--n-cpu-moe N`) on `{trace}` ({setting}), one line per budget; N = 0 is `none` (every expert paged on the GPU)."),
    )
}
