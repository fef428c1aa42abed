//! What the report says: builds the [`Doc`] (text, tables, figures) from [`Results`]. A pure
//! function of its input, so regenerating from `results.json` reproduces the same bytes.
//!
//! [`build`] lays the sections out in reading order; each section is rendered by its own
//! module, and this one holds what several share: run labels, metric getters, the Belady
//! lookup and the table and figure helpers.
//!
//! Bounds used for "distance from the bound":
//! - streaming regime: the ideal holds and moves exactly the selected experts, top-k x expert
//!   MiB per layer step (expert MiB = `streaming.useful_mib_total` / number of keys);
//! - cache regime and timing: the Belady/MIN run of the same trace, mechanism, budget and batch.

mod budget_plot;
mod glance;
mod inputs;
mod placement;
mod prefetch;
mod retention;
mod stability;
mod steps;
mod streaming;
mod timing;

use crate::doc::{Block, Cell, Doc};
use crate::metrics::{best, fmt, Metric};
use crate::results::{Results, RunCoords, RunEntry, TraceInfo};
use serde_json::Value;

/// Title of every report.
pub const TITLE: &str = "MoE expert paging: mechanism and policy comparison";

/// Readable label of a run: `e2:hot`, `e2:hot / lru @ 25%`, `e1 / belady (bound) @ 25%`, with
/// ` + static w2` for a prefetch predictor at window 2.
pub fn run_label(r: &RunEntry) -> String {
    run_label_of(&r.grid)
}

/// [`run_label`] from grid coordinates alone.
pub fn run_label_of(g: &RunCoords) -> String {
    let mut s = g.mechanism.clone();
    if let Some(e) = &g.evict {
        s.push_str(" / ");
        s.push_str(e);
        // the offline policy is the bound runs are measured against, never a contender
        if is_offline(e) {
            s.push_str(" (bound)");
        }
    }
    if let Some(b) = &g.budget {
        s.push_str(" @ ");
        s.push_str(&crate::sizes::grid_budget_text(b));
    }
    if let Some(sp) = g.split.as_deref().filter(|&sp| sp != "global") {
        s.push(' ');
        s.push_str(sp);
    }
    if let (Some(p), Some(w)) = (&g.predictor, g.window) {
        s.push_str(&format!(" + {p} w{w}"));
    }
    s.push_str(&stepping_label_of(g));
    if let Some(c) = &g.cpu_experts {
        s.push_str(&format!(" cpu {c}"));
    }
    if let Some(d) = &g.dtype {
        s.push_str(&format!(" {d}"));
    }
    s
}

/// The stepping part of a run label: ` K2 P0.7`, ` K2 N=1`, ` K0`, ` chunk 64`; empty
/// without a stepping axis.
fn stepping_label_of(g: &RunCoords) -> String {
    let mut s = String::new();
    if let Some(k) = g.verify {
        s.push_str(&format!(" K{k}"));
        match g.acceptance.as_deref() {
            Some(a) if a.starts_with("N=") => s.push_str(&format!(" {a}")),
            Some(a) => s.push_str(&format!(" P{a}")),
            None => {}
        }
    }
    if let Some(c) = g.prefill_chunk {
        s.push_str(&format!(" chunk {c}"));
    }
    s
}

/// Distinct values in first-appearance order.
fn distinct<T: PartialEq + Clone>(it: impl Iterator<Item = T>) -> Vec<T> {
    let mut v = Vec::new();
    for x in it {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// File-name-safe version of a label.
fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Orders two runs by the metric `get`, a run without it first (the order of
/// `Option<f64>`); JSON numbers are finite, so no two values are unordered.
fn by_metric(a: &RunEntry, b: &RunEntry, get: fn(&RunEntry) -> Option<f64>) -> std::cmp::Ordering {
    get(a)
        .partial_cmp(&get(b))
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// Orders two values as [`by_metric`] orders runs (unordered values compare equal).
fn cmp_f64(a: f64, b: f64) -> std::cmp::Ordering {
    a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
}

/// `streaming.resident_mib_per_layer_step`.
fn resident_mib(r: &RunEntry) -> Option<f64> {
    Some(r.streaming()?.resident_mib_per_layer_step)
}

/// `streaming.transfer_mib_per_layer_step`.
fn transfer_mib(r: &RunEntry) -> Option<f64> {
    Some(r.streaming()?.transfer_mib_per_layer_step)
}

/// `cache.bytes_per_token`.
fn bytes_per_token(r: &RunEntry) -> Option<f64> {
    Some(r.cache()?.bytes_per_token)
}

/// `cache.budget_units`.
fn budget_units(r: &RunEntry) -> Option<f64> {
    Some(r.cache()?.budget_units as f64)
}

/// `timing.step_ms_p50`.
fn step_p50(r: &RunEntry) -> Option<f64> {
    Some(r.timing()?.step_ms_p50)
}

/// `timing.tokens_per_s`.
fn tokens_per_s(r: &RunEntry) -> Option<f64> {
    Some(r.timing()?.tokens_per_s)
}

/// Whether run `r`'s eviction policy is the offline bound (Belady/MIN: it reads the future).
fn is_belady(r: &RunEntry) -> bool {
    r.grid.evict.as_deref().is_some_and(is_offline)
}

/// Whether policy `name` is an offline policy, by the retention registry.
fn is_offline(name: &str) -> bool {
    policies::PolicyKind::parse(name).is_ok_and(|k| k.is_offline())
}

/// Expert MiB derived from a streaming block and the trace's key count.
fn expert_mib(r: &RunEntry, t: &TraceInfo) -> Option<f64> {
    let k = t.num_keys();
    (k > 0).then_some(r.streaming()?.useful_mib_total / k as f64)
}

/// Cells of one metric column for `runs`, with the best online run marked (the offline
/// bound is shown but never marked best).
fn column(runs: &[&RunEntry], m: &Metric) -> Vec<Cell> {
    let vals: Vec<Option<f64>> = runs
        .iter()
        .map(|r| (m.get)(&r.result).map(|v| v * m.scale))
        .collect();
    let contenders: Vec<Option<f64>> = runs
        .iter()
        .zip(&vals)
        .map(|(r, v)| if is_belady(r) { None } else { *v })
        .collect();
    let marks = best(&contenders, m.better);
    vals.iter()
        .zip(marks)
        .map(|(v, b)| Cell {
            text: v.map(fmt).unwrap_or_else(|| "–".into()),
            best: b,
        })
        .collect()
}

/// A table with one row per run (first column its label) and one column per metric.
fn metric_table(
    doc: &mut Doc,
    runs: &[&RunEntry],
    ms: &[Metric],
    extra: Option<(&str, Vec<String>)>,
) {
    let ms: Vec<&Metric> = ms
        .iter()
        .filter(|m| runs.iter().any(|r| (m.get)(&r.result).is_some()))
        .collect();
    let mut header = vec!["run".to_string()];
    header.extend(ms.iter().map(|m| m.label.to_string()));
    let cols: Vec<Vec<Cell>> = ms.iter().map(|m| column(runs, m)).collect();
    if let Some((h, _)) = &extra {
        header.push(h.to_string());
    }
    let rows = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = vec![Cell::plain(run_label(r))];
            row.extend(cols.iter().map(|c| c[i].clone()));
            if let Some((_, e)) = &extra {
                row.push(Cell::plain(e[i].clone()));
            }
            row
        })
        .collect();
    doc.table(header, rows);
}

/// Push a figure (file name under `plots/`, its SVG, caption); a chart error fails the report.
fn figure(
    doc: &mut Doc,
    file: String,
    svg: anyhow::Result<String>,
    caption: String,
) -> anyhow::Result<()> {
    doc.blocks.push(Block::Figure {
        file,
        svg: svg?,
        caption,
    });
    Ok(())
}

/// Build the whole report.
pub fn build(res: &Results) -> anyhow::Result<Doc> {
    let mut doc = Doc::default();
    doc.h(1, TITLE);
    glance::answer(&mut doc, res);
    budget_plot::budget_plots(&mut doc, res)?;
    glance::question(&mut doc, res);
    glance::findings(&mut doc, res);
    inputs::inputs(&mut doc, res);
    inputs::traces(&mut doc, res)?;
    streaming::streaming(&mut doc, res)?;
    retention::retention(&mut doc, res)?;
    timing::timing(&mut doc, res)?;
    prefetch::prefetch(&mut doc, res)?;
    steps::steps(&mut doc, res)?;
    placement::placement(&mut doc, res)?;
    stability::other_blocks(&mut doc, res);
    stability::stability(&mut doc, res);
    stability::files(&mut doc, res);
    Ok(doc)
}

/// Name of the hardware profile the results were timed on, if any.
fn profile_name(res: &Results) -> Option<String> {
    let p = res.profile.as_ref()?;
    Some(
        p.get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| "the given hardware profile".into()),
    )
}

/// The trace named `name`; runs only name traces of the results.
fn trace_of<'a>(res: &'a Results, name: &str) -> &'a TraceInfo {
    res.traces
        .iter()
        .find(|t| t.name == name)
        .expect("checked: runs name known traces")
}

/// Runs of `trace` evaluated with a profile trace equal to itself.
fn own<'a>(res: &'a Results, trace: &str) -> impl Iterator<Item = &'a RunEntry> + 'a {
    let trace = trace.to_string();
    res.runs
        .iter()
        .filter(move |r| r.grid.trace == trace && !r.grid.is_cross())
}

/// The Belady/MIN run with `r`'s coordinates, the bound `r` is measured against.
fn belady_of<'a>(res: &'a Results, r: &RunEntry) -> Option<&'a RunEntry> {
    res.runs.iter().find(|x| {
        is_belady(x)
            && x.grid.trace == r.grid.trace
            && x.grid.profile_trace == r.grid.profile_trace
            && x.grid.mechanism == r.grid.mechanism
            && x.grid.budget == r.grid.budget
            && x.grid.split == r.grid.split
            && x.grid.batch == r.grid.batch
            && x.grid.predictor == r.grid.predictor
            && x.grid.window == r.grid.window
            && x.grid.verify == r.grid.verify
            && x.grid.acceptance == r.grid.acceptance
            && x.grid.prefill_chunk == r.grid.prefill_chunk
            && x.grid.cpu_experts == r.grid.cpu_experts
            && x.grid.dtype == r.grid.dtype
    })
}
