//! What the results were computed from: the traces and their provenance, the model
//! geometry, the hardware profile with every constant's provenance, the resolved grid, and the
//! traces' concentration and per-layer skew.

use super::{distinct, expert_mib, figure, slug, trace_of};
use crate::doc::{Cell, Doc};
use crate::metrics::fmt;
use crate::plots::{self, LineChart, Scale, Series};
use crate::results::{Results, TraceInfo};
use serde_json::Value;

/// The hardware profile: device, every constant with value, unit and provenance, notes.
fn profile_section(doc: &mut Doc, p: &Value) {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    doc.p(format!(
        "`{}`: {}",
        s(p.get("name")),
        s(p.get("description"))
    ));
    if let Some(dev) = p.get("device").and_then(Value::as_object) {
        doc.p(format!(
            "Device: {}.",
            dev.iter()
                .map(|(k, v)| format!("{k} {}", crate::flatten::cell(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(note) = p.pointer("/os_paging/note").and_then(Value::as_str) {
        doc.p(format!("OS paging: {note}"));
    }
    if let Some(cs) = p.get("constants").and_then(Value::as_object) {
        let rows = cs
            .iter()
            .map(|(k, c)| {
                let pv = c.get("provenance");
                let kind = s(pv.and_then(|x| x.get("kind")));
                let how = [&["method", "reason"][..], &["date"][..]]
                    .iter()
                    .filter_map(|keys| {
                        keys.iter()
                            .find_map(|k| pv.and_then(|x| x.get(*k)).and_then(Value::as_str))
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                vec![
                    Cell::plain(format!("`{k}`")),
                    Cell::plain(c.get("value").map(crate::flatten::cell).unwrap_or_default()),
                    Cell::plain(s(c.get("unit"))),
                    Cell::plain(kind),
                    Cell::plain(how),
                ]
            })
            .collect();
        doc.table(
            ["constant", "value", "unit", "provenance", "how / when"]
                .map(String::from)
                .to_vec(),
            rows,
        );
    }
    if let Some(notes) = p.get("notes").and_then(Value::as_array) {
        doc.list(
            notes
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        );
    }
}

/// The inputs section: the traces and their provenance, the model geometry, the hardware
/// profile and the resolved grid.
pub(super) fn inputs(doc: &mut Doc, res: &Results) {
    doc.h(2, "Inputs");
    trace_table(doc, res);
    provenance(doc, res);
    model_geometry(doc, res);
    hardware_and_grid(doc, res);
}

/// One row per trace: model, phase, sizes, distinct keys, recorded or synthetic.
fn trace_table(doc: &mut Doc, res: &Results) {
    doc.h(3, "Traces");
    let rows = res
        .traces
        .iter()
        .map(|t| {
            let p = &t.provenance;
            vec![
                Cell::plain(format!("`{}`", t.name)),
                Cell::plain(t.model.name.clone()),
                Cell::plain(t.phase.clone()),
                Cell::plain(t.sequences.len().to_string()),
                Cell::plain(t.tokens.to_string()),
                Cell::plain(t.accesses.to_string()),
                Cell::plain(
                    t.expert_counts
                        .iter()
                        .flatten()
                        .filter(|&&c| c > 0)
                        .count()
                        .to_string(),
                ),
                Cell::plain(if p.synthetic { "synthetic" } else { "recorded" }.to_string()),
            ]
        })
        .collect();
    doc.table(
        [
            "trace",
            "model",
            "phase",
            "sequences",
            "tokens",
            "accesses",
            "distinct keys",
            "kind",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    );
}

/// Where each trace came from: file, tool, date, prompts, generator, source, licence.
fn provenance(doc: &mut Doc, res: &Results) {
    let mut prov = Vec::new();
    for t in &res.traces {
        let p = &t.provenance;
        let mut s = format!(
            "`{}` (`{}`): recorded with {}",
            t.name,
            t.file,
            if p.tool.is_empty() {
                "an unnamed tool"
            } else {
                &p.tool
            }
        );
        if !p.date.is_empty() && p.date != "unknown" {
            s.push_str(&format!(" on {}", p.date));
        }
        if !p.prompt_labels.is_empty() {
            s.push_str(&format!("; prompts: {}", p.prompt_labels.join(", ")));
        }
        if let Some(g) = &p.generator {
            s.push_str(&format!("; generator: {g}"));
        }
        if !p.source.is_empty() {
            s.push_str(&format!("; source: {}", p.source));
        }
        if let Some(l) = &p.licence {
            s.push_str(&format!("; licence: {l}"));
        }
        prov.push(s);
    }
    doc.list(prov);
}

/// Layers, experts, top-k and sizes of each distinct model, and the expert size the runs used.
fn model_geometry(doc: &mut Doc, res: &Results) {
    doc.h(3, "Model geometry");
    let geo = distinct(res.traces.iter().map(|t| &t.model));
    for m in geo {
        let moe: Vec<_> = m.layers.iter().filter(|l| l.is_moe()).collect();
        let experts = distinct(moe.iter().map(|l| l.experts));
        let topk = distinct(moe.iter().map(|l| l.top_k));
        let shared = distinct(moe.iter().map(|l| l.shared_experts));
        let join = |v: Vec<u16>| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("/")
        };
        doc.p(format!(
            "`{}`: {} layers ({} MoE), {} experts per MoE layer, top-{}, {} shared; hidden size {}, expert FFN size {}.",
            m.name,
            m.layers.len(),
            moe.len(),
            join(experts),
            join(topk),
            join(shared),
            m.hidden_size.map(|x| x.to_string()).unwrap_or("unknown".into()),
            m.expert_ffn.map(|x| x.to_string()).unwrap_or("unknown".into()),
        ));
    }
    if let Some(r) = res.runs.iter().find(|r| r.streaming().is_some()) {
        let t = trace_of(res, &r.grid.trace);
        if let Some(e) = expert_mib(r, t) {
            doc.p(format!(
                "Expert size used by the runs: {} MiB per expert (bank of {} keys).",
                fmt(e),
                t.num_keys()
            ));
        }
    }
}

/// The hardware profile (or why there is none) and the grid as `sim compare` resolved it.
fn hardware_and_grid(doc: &mut Doc, res: &Results) {
    doc.h(3, "Hardware profile");
    match &res.profile {
        Some(p) => profile_section(doc, p),
        None => doc.p("None given: no time was simulated. Add `--hw rtx4060-laptop-wddm` (or another profile) to see step latency and tokens per second."),
    }
    doc.h(3, "Grid");
    doc.p(format!(
        "{} runs. Parameters as resolved by `sim compare`:",
        res.total_runs
    ));
    doc.list(
        crate::flatten::leaves(&res.grid)
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("`{k}`: {}", grid_value(&k, v)))
            .collect(),
    );
}

/// A grid parameter's value as the report prints it: the budgets with bytes in GiB/MiB
/// (`["25%", "1 GiB"]`), anything else as [`crate::flatten::cell`] writes it.
fn grid_value(key: &str, v: &serde_json::Value) -> String {
    match v.as_array() {
        Some(items) if key == "budgets" => {
            let texts: Vec<String> = items
                .iter()
                .map(|b| match b.as_str() {
                    Some(b) => format!("\"{}\"", crate::sizes::grid_budget_text(b)),
                    None => b.to_string(),
                })
                .collect();
            format!("[{}]", texts.join(","))
        }
        _ => crate::flatten::cell(v),
    }
}

/// The traces section: the concentration curve, then per trace its skew map and statistics.
pub(super) fn traces(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    doc.h(2, "The traces");
    concentration(doc, res)?;
    for t in &res.traces {
        skew(doc, t)?;
        trace_stats(doc, t);
    }
    Ok(())
}

/// Share of accesses taken by the hottest keys, one curve per trace.
fn concentration(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    let curves: Vec<Series> = res
        .traces
        .iter()
        .map(|t| {
            let mut c: Vec<u64> = t.expert_counts.iter().flatten().cloned().collect();
            c.sort_unstable_by(|a, b| b.cmp(a));
            let total: u64 = c.iter().sum();
            let n = c.len();
            let mut pts = vec![(0.0, 0.0)];
            let mut acc = 0u64;
            for (i, x) in c.iter().enumerate() {
                acc += x;
                pts.push((
                    (i + 1) as f64 / n as f64 * 100.0,
                    if total > 0 {
                        acc as f64 / total as f64 * 100.0
                    } else {
                        0.0
                    },
                ));
            }
            Series::new(t.name.clone(), pts)
        })
        .chain(std::iter::once(
            Series::new(
                "uniform routing (diagonal)",
                vec![(0.0, 0.0), (100.0, 100.0)],
            )
            .dashed(),
        ))
        .collect();
    figure(
        doc,
        "concentration.svg".into(),
        plots::line_chart(
            &LineChart {
                title: "Concentration: share of accesses taken by the hottest keys",
                x_label: "hottest keys (% of all (layer, expert) keys)",
                y_label: "share of accesses (%)",
                x_scale: Scale::Linear,
                y_from_zero: true,
            },
            &curves,
        ),
        "Concentration curve: the hottest x% of (layer, expert) keys take y% of all expert accesses. The dashed diagonal is uniform routing (every key taken equally often); the further a curve lies above it, the more a small pinned set can serve.".into(),
    )?;
    Ok(())
}

/// Per MoE layer of `t`, each expert's share of the layer's selections, sorted by rank.
fn skew(doc: &mut Doc, t: &TraceInfo) -> anyhow::Result<()> {
    let rows: Vec<Vec<f64>> = t
        .expert_counts
        .iter()
        .map(|l| {
            let total: u64 = l.iter().sum();
            let mut v: Vec<f64> = l
                .iter()
                .map(|&c| {
                    if total > 0 {
                        c as f64 / total as f64 * 100.0
                    } else {
                        0.0
                    }
                })
                .collect();
            v.sort_by(|a, b| b.total_cmp(a));
            v
        })
        .collect();
    let title = format!(
        "Per-layer skew of `{}`: share of the layer's selections by expert rank",
        t.name
    );
    figure(
        doc,
        format!("skew_{}.svg", slug(&t.name)),
        plots::heat_map(&title.replace('`', ""), "expert rank in its layer (0 = most selected)", "MoE layer", "% of layer", &rows),
        format!("{title}. Each row is one MoE layer, its experts sorted by selection count; dark cells on the left mean a few experts dominate the layer; the colour scale on the right gives the share in percent."),
    )?;
    Ok(())
}

/// The scalar statistics `sim trace stats --json` gives for `t`, if the results carry them.
fn trace_stats(doc: &mut Doc, t: &TraceInfo) {
    if let Some(stats) = t.stats.as_ref().and_then(Value::as_object) {
        let items: Vec<String> = stats
            .iter()
            .filter_map(|(k, v)| match v {
                // statistics to 3-4 significant digits; counts stay whole
                Value::Number(n) => Some(format!(
                    "`{k}`: {}",
                    n.as_f64().map_or_else(|| n.to_string(), fmt)
                )),
                Value::String(_) | Value::Bool(_) => {
                    Some(format!("`{k}`: {}", crate::flatten::cell(v)))
                }
                Value::Array(a) if k == "always_on_keys" => {
                    Some(format!("`always_on_keys`: {} keys, {}", a.len(), v))
                }
                _ => None,
            })
            .collect();
        doc.p(format!(
            "Statistics of `{}` (`sim trace stats --json`):",
            t.name
        ));
        doc.list(items);
    }
}
