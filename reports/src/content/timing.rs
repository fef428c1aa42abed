//! Time per decode step on the given hardware profile: per trace, batch and budget the timing
//! table against Belady/MIN, where a step's time goes, the step-latency CDF, and tokens per
//! second against batch size.

use super::{
    belady_of, by_metric, distinct, figure, is_belady, metric_table, profile_name, run_label, slug,
    step_p50, tokens_per_s,
};
use crate::doc::Doc;
use crate::metrics::{self, fmt};
use crate::plots::{self, LineChart, Scale, Series};
use crate::results::{Results, RunEntry, TraceInfo};
use crate::sizes::{size_text, BudgetSize};
use crate::step_latency::{LatencyForm, StepLatencies, MAX_EVERY_STEP, QUANTILES};
use serde_json::Value;

/// The timing section: per trace, batch and budget a table, time split and latency CDF.
pub(super) fn timing(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    doc.h(2, "Time per decode step");
    let timed: Vec<&RunEntry> = res
        .runs
        .iter()
        .filter(|r| !r.grid.is_cross() && r.timing().is_some())
        .collect();
    let over_cap = does_not_fit(doc, res);
    if timed.is_empty() && over_cap {
        return Ok(());
    }
    if timed.is_empty() {
        doc.p("No run in these results has a `timing` block, so time was not simulated. Give a hardware profile (`--hw rtx4060-laptop-wddm`) to `sim compare` to see step latency, tokens per second and where the time goes.");
        return Ok(());
    }
    let hw = profile_name(res).unwrap_or_default();
    doc.p(format!("Simulated on `{hw}`. Lower is better except tokens/s; the best online cell of each column is highlighted (Belady/MIN, the offline bound, never is). `vs Belady` is the step p50 divided by that of the Belady/MIN run of the same mechanism and budget."));
    outside_range(doc, &timed);
    for t in &res.traces {
        let tr: Vec<&RunEntry> = timed
            .iter()
            .filter(|r| r.grid.trace == t.name)
            .cloned()
            .collect();
        let batches = distinct(tr.iter().map(|r| r.grid.batch));
        for &batch in &batches {
            batch_section(doc, res, t, &tr, batch, &hw)?;
        }
        if batches.iter().flatten().count() >= 2 {
            tokens_vs_batch(doc, res, t, &tr, &hw)?;
        } else {
            doc.p(format!("No tokens-per-second-against-batch plot for `{}`: the runs have one batch size; give `--batch 1,4,16` to `sim compare` to draw it.", t.name));
        }
    }
    Ok(())
}

/// The runs whose price used a constant outside its measured range, each with the constant,
/// distance and share (nothing when every price lay inside).
fn outside_range(doc: &mut Doc, timed: &[&RunEntry]) {
    let items: Vec<String> = timed
        .iter()
        .filter_map(|r| {
            let d = r.result.timing_detail.as_ref()?;
            if d.outside_range.is_empty() {
                return None;
            }
            let lines: Vec<String> = d.outside_range.iter().map(|o| o.line()).collect();
            Some(format!(
                "`{}` on `{}`: {}",
                run_label(r),
                r.grid.trace,
                lines.join("; ")
            ))
        })
        .collect();
    if !items.is_empty() {
        doc.p("Priced outside the measured range: these runs used a constant past the range its fit was measured over, so their figures depend on `--outside-range` (docs/DESIGN.md, \"Outside the measured range\"):");
        doc.list(items);
    }
}

/// The cells that do not fit under the admission cap, each with its reason (they have no
/// timing, so the tables below leave them out); whether there were any.
fn does_not_fit(doc: &mut Doc, res: &Results) -> bool {
    let items: Vec<String> = res
        .runs
        .iter()
        .filter_map(|r| {
            let why = r.does_not_fit.as_deref()?;
            Some(format!(
                "`{}` on `{}`: does not fit: {why}",
                run_label(r),
                r.grid.trace
            ))
        })
        .collect();
    if items.is_empty() {
        return false;
    }
    doc.p("These cells do not fit under the admission cap: not even one sequence is admitted, so they have no timing and the timing tables leave them out.");
    doc.list(items);
    true
}

/// One batch of trace `t`: its heading, then per budget a table and two figures.
fn batch_section(
    doc: &mut Doc,
    res: &Results,
    t: &TraceInfo,
    tr: &[&RunEntry],
    batch: Option<u32>,
    hw: &str,
) -> anyhow::Result<()> {
    let runs: Vec<&RunEntry> = tr
        .iter()
        .filter(|r| r.grid.batch == batch)
        .cloned()
        .collect();
    doc.h(
        3,
        format!(
            "`{}`{}",
            t.name,
            batch.map(|b| format!(", batch {b}")).unwrap_or_default()
        ),
    );
    let bsuffix = batch.map(|b| format!("_b{b}")).unwrap_or_default();
    for budget in distinct(runs.iter().map(|r| r.grid.budget.clone())) {
        let group: Vec<&RunEntry> = runs
            .iter()
            .filter(|r| r.grid.budget == budget)
            .cloned()
            .collect();
        let bname = budget.clone().unwrap_or_else(|| "streaming".into());
        doc.h(
            4,
            match &budget {
                Some(b) => format!(
                    "budget {}{}",
                    crate::sizes::grid_budget_text(b),
                    budget_sizes(&group)
                ),
                None => "streaming (nothing retained)".to_string(),
            },
        );
        budget_table(doc, res, &group);
        time_split(doc, t, &group, &bname, &bsuffix, hw)?;
        latency_cdf(doc, t, &group, &budget, &bname, &bsuffix)?;
    }
    Ok(())
}

/// What one budget holds for each mechanism of `group` (a fraction of the bank is a different
/// size per mechanism): ` (e1: 768 MiB = 192 experts; e2:hot: 576 MiB = 192 experts)`.
pub(super) fn budget_sizes(group: &[&RunEntry]) -> String {
    let mut seen = Vec::new();
    let parts: Vec<String> = group
        .iter()
        .filter(|r| {
            let new = !seen.contains(&&r.grid.mechanism);
            seen.push(&r.grid.mechanism);
            new
        })
        .filter_map(|r| {
            let z = BudgetSize::of_run(&r.result)?;
            Some(format!(
                "{}: {} = {}",
                r.grid.mechanism,
                size_text(z.bytes),
                z.experts_text()
            ))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join("; "))
    }
}

/// The timing metrics of one budget's runs, with each step p50 against Belady's.
fn budget_table(doc: &mut Doc, res: &Results, group: &[&RunEntry]) {
    let vs: Vec<String> = group
        .iter()
        .map(|r| {
            let b = belady_of(res, r).and_then(step_p50);
            match (step_p50(r), b) {
                (Some(v), Some(b)) if b > 0.0 && r.grid.evict.is_some() => {
                    format!("{}x", fmt(v / b))
                }
                _ => "–".into(),
            }
        })
        .collect();
    metric_table(doc, group, metrics::TIMING, Some(("vs Belady", vs)));
}

/// Where a step's time goes, one pair of stacked bars per run of the budget.
fn time_split(
    doc: &mut Doc,
    t: &TraceInfo,
    group: &[&RunEntry],
    bname: &str,
    bsuffix: &str,
    hw: &str,
) -> anyhow::Result<()> {
    let cats: Vec<String> = group
        .iter()
        .map(|r| {
            let l = run_label(r);
            l.split(" @ ").next().unwrap_or(&l).to_string()
        })
        .collect();
    let parts: Vec<plots::Part> = metrics::TIME_SPLIT
        .iter()
        .map(|(part, n, lane)| {
            (
                n.to_string(),
                *lane,
                group
                    .iter()
                    .map(|r| r.timing().map(part).unwrap_or(0.0))
                    .collect(),
            )
        })
        .collect();
    let btext = crate::sizes::grid_budget_text(bname);
    let title = format!("Time split per step, {} @ {btext}", t.name);
    figure(
        doc,
        format!("time_split_{}_{}{bsuffix}.svg", slug(&t.name), slug(bname)),
        plots::stacked_bars(&title, "ms per decode step", &cats, &parts),
        format!("Where a decode step's time goes on `{}` ({btext}) on `{hw}`, in ms per step. Upper bar of each run: the critical path, compute plus the stall waiting for paging, which adds up to the mean step time. Lower bar: how long each paging resource (copy engine, driver, fault handler) was busy; these overlap each other and compute, so the lower bar need not equal the stall.", t.name),
    )?;
    Ok(())
}

/// The step-latency CDF: in the streaming group one line per mechanism; under a budget, the
/// policies of the mechanism with the most tokens/s (a readable number of lines).
fn latency_cdf(
    doc: &mut Doc,
    t: &TraceInfo,
    group: &[&RunEntry],
    budget: &Option<String>,
    bname: &str,
    bsuffix: &str,
) -> anyhow::Result<()> {
    let shown: Vec<&RunEntry> = if budget.is_none() {
        group.to_vec()
    } else {
        let best = group
            .iter()
            .filter(|r| !is_belady(r))
            .max_by(|a, b| by_metric(a, b, tokens_per_s))
            .map(|r| r.grid.mechanism.clone());
        group
            .iter()
            .filter(|r| Some(&r.grid.mechanism) == best.as_ref())
            .cloned()
            .collect()
    };
    let mut kept = Vec::with_capacity(shown.len());
    let series: Vec<Series> = shown
        .iter()
        .map(|r| {
            let (pts, k) = cdf_points(r);
            kept.push(k);
            let l = run_label(r);
            Series::new(l.split(" @ ").next().unwrap_or(&l).to_string(), pts).step()
        })
        .collect();
    let btext = crate::sizes::grid_budget_text(bname);
    let title = format!("Step latency CDF, {} @ {btext}", t.name);
    let which = if budget.is_none() {
        "one line per mechanism".to_string()
    } else {
        format!(
            "one line per policy of `{}`, the mechanism with the most tokens/s here",
            shown
                .first()
                .map(|r| r.grid.mechanism.as_str())
                .unwrap_or("-")
        )
    };
    figure(
        doc,
        format!("step_cdf_{}_{}{bsuffix}.svg", slug(&t.name), slug(bname)),
        plots::line_chart(
            &LineChart {
                title: &title,
                x_label: "decode step latency (ms)",
                y_label: "steps at or below (%)",
                x_scale: Scale::Linear,
                y_from_zero: true,
            },
            &series,
        ),
        format!(
            "Step-latency CDF on `{}` ({btext}), {which}, {}.",
            t.name,
            cdf_source(&kept)
        ),
    )?;
    Ok(())
}

/// The points of `r`'s step-latency CDF (ms, % of steps at or below), and the kept step
/// latencies they come from: the empirical CDF of every step when the run kept them, else
/// (results written before runs kept them) a staircase through the reported p50, p90, p99
/// and max.
pub(super) fn cdf_points(r: &RunEntry) -> (Vec<(f64, f64)>, Option<&StepLatencies>) {
    if let Some(s) = r.timing_detail().and_then(|d| d.step_latency.as_ref()) {
        let pts = s.cdf().into_iter().map(|(us, f)| (us / 1e3, f * 100.0));
        return (pts.collect(), Some(s));
    }
    let pts = metrics::LATENCY_QUANTILES
        .iter()
        .filter_map(|(at, q)| Some((at(r.timing()?), *q * 100.0)))
        .collect();
    (pts, None)
}

/// What the CDF lines were drawn from, for the caption, given each line's kept latencies.
fn cdf_source(kept: &[Option<&StepLatencies>]) -> String {
    let from_steps = kept.iter().flatten().count();
    let quantiles = kept
        .iter()
        .flatten()
        .filter(|s| s.form == LatencyForm::Quantiles)
        .count();
    let staircase = "through the reported p50, p90, p99 and max";
    if from_steps == 0 {
        return format!("{staircase}: these results keep no per-step latencies (a `results.json` written before `sim compare` kept them; run it again to draw every step)");
    }
    let mut s = "drawn as the empirical CDF of every step's latency".to_string();
    if quantiles > 0 {
        s += &format!(" (lines of runs over {MAX_EVERY_STEP} steps from {QUANTILES} evenly spaced quantiles of their steps, within 1/{QUANTILES} of the exact CDF)");
    }
    if from_steps < kept.len() {
        s += &format!("; lines of runs that kept no per-step latencies go {staircase}");
    }
    s
}

/// Tokens per second against batch size. A readable number of lines: the middle budget, and
/// there the policies of the mechanism with the most tokens/s at the largest batch.
fn tokens_vs_batch(
    doc: &mut Doc,
    res: &Results,
    t: &TraceInfo,
    tr: &[&RunEntry],
    hw: &str,
) -> anyhow::Result<()> {
    let budgets = distinct(tr.iter().map(|r| r.grid.budget.clone()));
    let mid = budgets[budgets.len() / 2].clone();
    let at: Vec<&RunEntry> = tr
        .iter()
        .filter(|r| r.grid.budget == mid)
        .cloned()
        .collect();
    let top_batch = at.iter().filter_map(|r| r.grid.batch).max();
    let best = at
        .iter()
        .filter(|r| r.grid.batch == top_batch && !is_belady(r))
        .max_by(|a, b| by_metric(a, b, tokens_per_s))
        .map(|r| r.grid.mechanism.clone());
    let shown: Vec<&RunEntry> = at
        .into_iter()
        .filter(|r| Some(&r.grid.mechanism) == best.as_ref())
        .collect();
    let keys = distinct(shown.iter().map(|r| {
        (
            r.grid.mechanism.clone(),
            r.grid.evict.clone(),
            r.grid.budget.clone(),
        )
    }));
    let series: Vec<Series> = keys
        .iter()
        .map(|k| {
            let mut pts: Vec<(f64, f64)> = shown
                .iter()
                .filter(|r| {
                    (&r.grid.mechanism, &r.grid.evict, &r.grid.budget) == (&k.0, &k.1, &k.2)
                })
                .filter_map(|r| Some((r.grid.batch? as f64, tokens_per_s(r)?)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            // every key comes from a run of `shown`, so the find succeeds
            let label = shown
                .iter()
                .find(|r| (&r.grid.mechanism, &r.grid.evict, &r.grid.budget) == (&k.0, &k.1, &k.2))
                .map(|r| run_label(r))
                .unwrap_or_default();
            Series::new(label, pts)
        })
        .collect();
    let cap = res.grid.get("admission_cap").and_then(Value::as_f64);
    let title = format!("Tokens per second vs batch, {}", t.name);
    figure(
        doc,
        format!("tokens_per_s_vs_batch_{}.svg", slug(&t.name)),
        plots::line_chart(
            &LineChart { title: &title, x_label: "batch size (sequences, log scale)", y_label: "tokens per second", x_scale: Scale::Log2, y_from_zero: true },
            &series,
        ),
        format!(
            "Tokens per second against batch size on `{}` on `{hw}` for `{}`{}{}.",
            t.name,
            best.as_deref().unwrap_or("-"),
            mid.as_deref().map(|b| format!(" at budget {b}")).unwrap_or_default(),
            cap.map(|c| format!(", with the admission cap at {}% of usable VRAM (sequences that would push mapped memory past it are refused)", fmt(c * 100.0)))
                .unwrap_or_else(|| ", without an admission cap".into())
        ),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A timed run entry whose `timing_detail` carries `step_latency` when given.
    fn timed_run(step_latency: Option<Value>) -> RunEntry {
        let mut detail = json!({
            "profile": "hand", "steps": 4, "tokens": 4, "total_ms": 9.0, "page_ins": 0,
            "prefetch_wasted": 0, "bytes_in": 0, "oversubscribed_page_ins": 0, "usable_mib": 1.0
        });
        if let Some(s) = step_latency {
            detail["step_latency"] = s;
        }
        serde_json::from_value(json!({
            "run": 0,
            "grid": {"trace": "a", "profile_trace": "a", "mechanism": "e1", "evict": null,
                     "budget": null, "split": null, "batch": null},
            "inputs": {"policy": "e1", "trace": "a", "profile_trace": "a", "phase": "decode",
                       "model": "tiny", "moe_layers": 1, "tokens": 4, "dtype": null,
                       "expert_bytes": 1, "expert_mib": 1.0, "granule_bytes": 1},
            "timing": {"step_ms_p50": 2.0, "step_ms_p90": 3.0, "step_ms_p99": 3.0,
                       "step_ms_max": 3.0, "step_ms_mean": 2.25, "tokens_per_s": 444.4,
                       "compute_ms_per_step": 2.25, "h2d_ms_per_step": 0.0,
                       "vmm_ms_per_step": 0.0, "fault_ms_per_step": 0.0,
                       "stall_ms_per_step": 0.0, "peak_mapped_mib": 1.0, "map_calls": 0,
                       "unmap_calls": 0, "prefetch_issued": 0, "prefetch_used": 0},
            "timing_detail": detail
        }))
        .expect("a run entry")
    }

    #[test]
    fn a_run_of_known_step_times_draws_exactly_their_cdf() {
        // steps of 3, 1, 2 and 2 ms: a quarter at or below 1 ms, three quarters at or
        // below 2 ms, all at or below 3 ms
        let r = timed_run(Some(
            json!({"form": "every-step", "steps": 4, "us": [3000.0, 1000.0, 2000.0, 2000.0]}),
        ));
        let (pts, kept) = cdf_points(&r);
        assert_eq!(
            pts,
            vec![(1.0, 0.0), (1.0, 25.0), (2.0, 75.0), (3.0, 100.0)]
        );
        assert_eq!(
            cdf_source(&[kept]),
            "drawn as the empirical CDF of every step's latency"
        );
    }

    #[test]
    fn results_without_step_latencies_draw_the_percentile_staircase_and_say_so() {
        let r = timed_run(None);
        let (pts, kept) = cdf_points(&r);
        assert_eq!(
            pts,
            vec![(2.0, 50.0), (3.0, 90.0), (3.0, 99.0), (3.0, 100.0)]
        );
        assert!(kept.is_none());
        let caption = cdf_source(&[kept]);
        assert!(
            caption.starts_with("through the reported p50, p90, p99 and max: these results keep no per-step latencies"),
            "{caption}"
        );
        // a mix says which lines are which
        let with = timed_run(Some(json!({"form": "every-step", "steps": 1, "us": [5.0]})));
        let mixed = cdf_source(&[cdf_points(&with).1, kept]);
        assert!(
            mixed.ends_with("; lines of runs that kept no per-step latencies go through the reported p50, p90, p99 and max"),
            "{mixed}"
        );
    }

    #[test]
    fn quantiles_of_a_long_run_are_labelled_as_such() {
        let us: Vec<f64> = (0..=QUANTILES).map(|i| i as f64).collect();
        let r = timed_run(Some(
            json!({"form": "quantiles", "steps": 1_000_000, "us": us}),
        ));
        let (pts, kept) = cdf_points(&r);
        assert_eq!(pts.len(), QUANTILES + 1);
        assert_eq!(pts[0], (0.0, 0.0));
        assert_eq!(pts[1000], (1.0, 50.0));
        assert!(cdf_source(&[kept]).contains("from 2000 evenly spaced quantiles"));
    }
}
