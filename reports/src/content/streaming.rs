//! The streaming regime (nothing retained across decode steps): memory held and bytes moved
//! per mechanism against the ideal, and the granularity trade curve of the `eN` mechanisms.

use super::{distinct, expert_mib, figure, metric_table, own, resident_mib, slug, transfer_mib};
use crate::doc::Doc;
use crate::metrics::{self, fmt};
use crate::plots::{self, LineChart, Scale, Series};
use crate::results::{Results, RunEntry, TraceInfo};
use policies::MechanismSpec;

/// Experts per chunk and chunk order of an `eN` mechanism (plain `eN` is `hot`); `None` for
/// the other families.
fn chunk_spec(spec: &str) -> Option<(u32, String)> {
    let spec = MechanismSpec::parse(spec).ok()?;
    let p = spec.packing()?;
    Some((p.n, p.order.as_str().to_string()))
}

/// The streaming-regime section: per trace a metric table and the trade curve.
pub(super) fn streaming(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    doc.h(
        2,
        "Mechanisms: memory held and bytes moved (streaming regime)",
    );
    doc.p("Nothing is retained across decode steps: each step, every unit holding a selected expert is brought in. Lower is better in every marked column; the best cell of each column is highlighted. `x ideal` is resident MiB divided by the ideal (exactly the selected experts: top-k x expert size).");
    let mut any = false;
    for t in &res.traces {
        let runs: Vec<&RunEntry> = own(res, &t.name)
            .filter(|r| r.grid.evict.is_none() && r.streaming().is_some())
            .collect();
        if runs.is_empty() {
            continue;
        }
        any = true;
        doc.h(3, format!("Trace `{}`", t.name));
        let ratios: Vec<String> = runs
            .iter()
            .map(|r| {
                let ideal = expert_mib(r, t).zip(t.mean_top_k()).map(|(e, k)| e * k);
                match (resident_mib(r), ideal) {
                    (Some(v), Some(i)) if i > 0.0 => format!("{}x", fmt(v / i)),
                    _ => "–".into(),
                }
            })
            .collect();
        metric_table(doc, &runs, metrics::STREAMING, Some(("x ideal", ratios)));
        trade_curve(doc, t, &runs)?;
    }
    if !any {
        doc.p("No streaming results in this comparison.");
    }
    Ok(())
}

/// The granularity trade curve of trace `t`: resident and transferred MiB of the `eN`
/// mechanisms against E, one pair of lines per packing order, and the ideal; drawn when at
/// least two mechanisms are chunked.
fn trade_curve(doc: &mut Doc, t: &TraceInfo, runs: &[&RunEntry]) -> anyhow::Result<()> {
    let chunked: Vec<(u32, String, &RunEntry)> = runs
        .iter()
        .filter_map(|r| chunk_spec(&r.grid.mechanism).map(|(n, o)| (n, o, *r)))
        .collect();
    if chunked.len() < 2 {
        return Ok(());
    }
    let mut series = Vec::new();
    // e1 has no order: it starts every order's line
    let mut orders = distinct(chunked.iter().filter(|c| c.0 > 1).map(|c| c.1.clone()));
    if orders.is_empty() {
        orders.push("hot".to_string());
    }
    for (oi, o) in orders.iter().enumerate() {
        let mut pts: Vec<(f64, f64, f64)> = chunked
            .iter()
            .filter(|c| &c.1 == o || c.0 == 1)
            .filter_map(|c| Some((c.0 as f64, resident_mib(c.2)?, transfer_mib(c.2)?)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push(
            Series::new(
                format!("resident, {o}"),
                pts.iter().map(|p| (p.0, p.1)).collect(),
            )
            .color(oi),
        );
        series.push(
            Series::new(
                format!("transfer, {o}"),
                pts.iter().map(|p| (p.0, p.2)).collect(),
            )
            .color(oi)
            .dashed(),
        );
    }
    let xs = chunked.iter().map(|c| c.0);
    if let (Some(i), Some(lo), Some(hi)) = (
        expert_mib(chunked[0].2, t)
            .zip(t.mean_top_k())
            .map(|(e, k)| e * k),
        xs.clone().min(),
        xs.max(),
    ) {
        let (lo, hi) = (lo as f64, hi as f64);
        series.push(Series::new("ideal bound (top-k x expert)", vec![(lo, i), (hi, i)]).dashed());
    }
    let title = format!("Granularity trade curve, {}", t.name);
    figure(
        doc,
        format!("trade_curve_{}.svg", slug(&t.name)),
        plots::line_chart(
            &LineChart {
                title: &title,
                x_label: "experts per chunk E (log scale)",
                y_label: "MiB per layer per decode step",
                x_scale: Scale::Log2,
                y_from_zero: true,
            },
            &series,
        ),
        format!("Granularity trade curve on `{}`: resident (solid) and transferred (dashed) MiB per layer per step against E experts per chunk, one pair of lines per packing order; the black dashed line is the ideal.", t.name),
    )?;
    Ok(())
}
