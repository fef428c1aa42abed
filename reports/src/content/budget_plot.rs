//! The report's first screen after the answer: per trace, tokens/s (or, untimed, page-ins per
//! token) against the VRAM budget in GiB, one line per policy, for the mechanism and batch of
//! the recommendation, with the recommended run marked. Where `sim compare` recorded the exact
//! curves of the stack policies (untimed grids), their lines cover every budget of the bank,
//! not only the grid's.

use super::glance::recommended;
use super::{figure, is_offline, own, slug, tokens_per_s};
use crate::doc::Doc;
use crate::plots::{self, LineChart, Mark, Scale, Series};
use crate::results::{Results, RunEntry, TraceInfo};
use crate::sizes::BudgetSize;

/// Bytes per GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// One figure per trace with a recommended retention run.
pub(super) fn budget_plots(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    for t in &res.traces {
        budget_plot(doc, res, t)?;
    }
    Ok(())
}

/// The runs drawn beside `rec`: the same trace, mechanism and coordinates, every policy and
/// budget.
fn peers<'a>(res: &'a Results, t: &TraceInfo, rec: &RunEntry) -> Vec<&'a RunEntry> {
    let g = &rec.grid;
    own(res, &t.name)
        .filter(|r| {
            let h = &r.grid;
            h.evict.is_some()
                && (&h.mechanism, &h.split, h.batch, &h.predictor, h.window)
                    == (&g.mechanism, &g.split, g.batch, &g.predictor, g.window)
                && (
                    h.verify,
                    &h.acceptance,
                    h.prefill_chunk,
                    &h.cpu_experts,
                    &h.dtype,
                ) == (
                    g.verify,
                    &g.acceptance,
                    g.prefill_chunk,
                    &g.cpu_experts,
                    &g.dtype,
                )
        })
        .collect()
}

/// The y value of a run: tokens/s when timed, else page-ins per token.
fn y_of(r: &RunEntry, timed: bool) -> Option<f64> {
    if timed {
        tokens_per_s(r)
    } else {
        Some(r.cache()?.page_ins_per_token)
    }
}

/// A run's budget in GiB.
fn x_of(r: &RunEntry) -> Option<f64> {
    Some(BudgetSize::of_run(&r.result)?.bytes / GIB)
}

/// The figure of trace `t`, when it has a recommended retention run.
fn budget_plot(doc: &mut Doc, res: &Results, t: &TraceInfo) -> anyhow::Result<()> {
    let Some((rec, timed)) = recommended(res, t) else {
        return Ok(());
    };
    let (Some(_), Some(mx), Some(my)) = (rec.grid.evict.as_ref(), x_of(rec), y_of(rec, timed))
    else {
        return Ok(());
    };
    let runs = peers(res, t, rec);
    let policies = super::distinct(runs.iter().filter_map(|r| r.grid.evict.clone()));
    let mut series = Vec::new();
    for p in &policies {
        let exact = (!timed).then(|| exact_points(res, rec, p)).flatten();
        let mut pts: Vec<(f64, f64)> = match exact {
            Some(e) => e,
            None => runs
                .iter()
                .filter(|r| r.grid.evict.as_deref() == Some(p.as_str()))
                .filter_map(|r| Some((x_of(r)?, y_of(r, timed)?)))
                .collect(),
        };
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push(if is_offline(p) {
            Series::new("belady (bound)", pts).dashed()
        } else {
            Series::new(p.clone(), pts)
        });
    }
    let mech = &rec.grid.mechanism;
    let batch = rec
        .grid
        .batch
        .map(|b| format!(", batch {b}"))
        .unwrap_or_default();
    let (title, y_label, what) = if timed {
        (
            format!("Tokens/s vs budget, {} / {mech}{batch}", t.name),
            "tokens/s",
            "Tokens per second",
        )
    } else {
        (
            format!("Page-ins per token vs budget, {} / {mech}{batch}", t.name),
            "page-ins per token",
            "Page-ins per token",
        )
    };
    let exact_note = if res
        .curves
        .iter()
        .any(|c| c.trace == t.name && &c.mechanism == mech)
    {
        " The lru and belady lines are their exact curves over every budget of the bank (one pass over the trace each, `sim curve`'s method); the other policies' points are the grid's budgets."
    } else {
        ""
    };
    let mark = Mark {
        x: mx,
        y: my,
        label: "recommended".into(),
    };
    figure(
        doc,
        format!(
            "answer_{}_{}{}.svg",
            slug(&t.name),
            slug(mech),
            rec.grid.batch.map(|b| format!("_b{b}")).unwrap_or_default()
        ),
        plots::line_chart_marked(
            &LineChart {
                title: &title,
                x_label: "VRAM budget (GiB)",
                y_label,
                x_scale: Scale::Linear,
                y_from_zero: true,
            },
            &series,
            Some(&mark),
        ),
        format!(
            "{what} against the VRAM budget on `{}` with `{mech}`{batch}, one line per policy (Belady/MIN, the offline bound, dashed black); the ring marks the recommendation, `{}`.{exact_note}",
            t.name,
            super::run_label(rec)
        ),
    )
}

/// The exact curve of policy `p` for `rec`'s trace, mechanism and split, as (GiB, page-ins
/// per token) points; `None` when the results hold none.
fn exact_points(res: &Results, rec: &RunEntry, p: &str) -> Option<Vec<(f64, f64)>> {
    let split = rec.grid.split.as_deref().unwrap_or("global");
    let c = res.curves.iter().find(|c| {
        c.trace == rec.grid.trace
            && c.mechanism == rec.grid.mechanism
            && c.split == split
            && c.evict == p
    })?;
    let tokens = rec.cache()?.tokens;
    if tokens == 0 {
        return None;
    }
    c.points
        .iter()
        .map(|&(u, pi)| {
            let z = BudgetSize::of(&rec.result, u)?;
            Some((z.bytes / GIB, pi as f64 / tokens as f64))
        })
        .collect()
}
