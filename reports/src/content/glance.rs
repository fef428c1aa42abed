//! The report's opening: the question it answers, and the answer in brief — per trace an
//! at-a-glance table of the best figure of each mechanism, then the findings in words.

use super::{
    belady_of, bytes_per_token, cmp_f64, distinct, expert_mib, is_belady, own, profile_name,
    resident_mib, run_label, tokens_per_s,
};
use crate::doc::{Cell, Doc};
use crate::metrics::{self, best, fmt, Better};
use crate::results::{Results, RunEntry, TraceInfo};
use crate::run::TimingReport;
use crate::sizes::{budget_text, size_text, BudgetSize};

/// What the report answers, and whether this is only one shard of it.
pub(super) fn question(doc: &mut Doc, res: &Results) {
    doc.h(2, "The question");
    let hw = profile_name(res)
        .map(|n| format!("what each costs in decode-step time on `{n}`"))
        .unwrap_or_else(|| "(no hardware profile was given, so time is not simulated)".into());
    doc.p(format!(
        "A Mixture-of-Experts model routes every token, in every MoE layer, to its top-k experts. When the experts do not all fit in GPU memory, something must decide how expert weights are committed and paged in. This report replays recorded router selections and answers: which paging mechanism holds the least GPU memory per layer and decode step, which retention policy moves the fewest bytes over PCIe per token under a VRAM budget, how far each is from the bound (the ideal of holding exactly the selected experts; Belady/MIN, the offline optimum, for retention), and {hw}."
    ));
    if let Some(s) = res.shard {
        doc.p(format!(
            "**Partial result:** this directory holds shard {}/{} ({} of {} runs). Merge all shards with `sim report --merge DIR... --out DIR` for the full comparison.",
            s.index,
            s.count,
            res.runs.len(),
            res.total_runs
        ));
    }
}

/// The one-line answer the report opens with: per evaluated trace, the fastest online run
/// (on a hardware profile), else the online run that moves the fewest bytes per token, with
/// its budget in bytes, units and experts.
pub(super) fn answer(doc: &mut Doc, res: &Results) {
    let hw = profile_name(res);
    let parts: Vec<String> = res
        .traces
        .iter()
        .filter_map(|t| trace_answer(res, t))
        .collect();
    let line = if parts.is_empty() {
        "these results hold no retention or timed run to recommend; see the streaming regime below"
            .to_string()
    } else {
        parts.join("; ")
    };
    let tail = match hw {
        Some(h) => {
            format!(" (simulated on `{h}`; Belady/MIN, the offline bound, is never recommended).")
        }
        None => " (no hardware profile was given, so time was not simulated).".into(),
    };
    doc.p(format!("**Answer:** {line}{tail}"));
}

/// The run recommended on trace `t`: with a hardware profile its fastest online run (and
/// `true`), else (or without a timed run) the online run that moves the fewest bytes per
/// token (and `false`).
pub(super) fn recommended<'a>(res: &'a Results, t: &TraceInfo) -> Option<(&'a RunEntry, bool)> {
    let online = || own(res, &t.name).filter(|r| !is_belady(r));
    if profile_name(res).is_some() {
        if let Some((r, _)) = online()
            .filter_map(|r| Some((r, tokens_per_s(r)?)))
            .max_by(|a, b| cmp_f64(a.1, b.1))
        {
            return Some((r, true));
        }
    }
    online()
        .filter_map(|r| Some((r, bytes_per_token(r)?)))
        .min_by(|a, b| cmp_f64(a.1, b.1))
        .map(|(r, _)| (r, false))
}

/// The answer for trace `t`: its recommended run ([`recommended`]) in words.
fn trace_answer(res: &Results, t: &TraceInfo) -> Option<String> {
    let (r, timed) = recommended(res, t)?;
    if timed {
        return Some(format!(
            "on `{}`, use `{}`{}{}: {} tokens/s",
            t.name,
            run_label(r),
            budget_words(r),
            r.grid
                .batch
                .map(|b| format!(" at batch {b}"))
                .unwrap_or_default(),
            fmt(tokens_per_s(r)?)
        ));
    }
    Some(format!(
        "on `{}`, `{}`{} moves the fewest bytes: {} MiB per token",
        t.name,
        run_label(r),
        budget_words(r),
        fmt(bytes_per_token(r)? * metrics::MIB)
    ))
}

/// ` (budget 25% = 768 MiB = 192 units = 192 experts)`, empty for a streaming run.
pub(super) fn budget_words(r: &RunEntry) -> String {
    match &r.result.retention {
        Some(i) => format!(
            " (budget {})",
            budget_text(&i.budget, BudgetSize::of_run(&r.result).as_ref())
        ),
        None => String::new(),
    }
}

/// A cell of an at-a-glance table: the value the best is marked by, and its text.
type GlanceCell = (Option<f64>, String);

/// The at-a-glance tables, one per trace, and what their columns mean.
fn glance(doc: &mut Doc, res: &Results) {
    let mut below: Vec<String> = Vec::new();
    for t in &res.traces {
        for p in glance_table(doc, res, t) {
            if !below.contains(&p) {
                below.push(p);
            }
        }
    }
    doc.p(format!(
        "Resident MiB per layer step: memory each mechanism holds when nothing is retained (lower is better; the ideal holds exactly the selected experts). MiB per token: the least any online policy moves at that VRAM budget, with its ratio to Belady/MIN, the offline optimum, on the same mechanism and budget.{}{} The best cell of each column is highlighted; details follow in the sections below.",
        below_bound_words(&below),
        if res.runs.iter().any(|r| r.timing().is_some()) {
            format!(" Tokens per second: the best over the policies and budgets of that mechanism, simulated on `{}`.", profile_name(res).unwrap_or_default())
        } else {
            String::new()
        }
    ));
}

/// Whether `policy` (an `--evict` name) starts with units pinned from the profile trace's
/// statistics (its registry entry needs them), which it never counts as page-ins.
fn pins_from_profile(policy: &str) -> bool {
    policies::PolicyKind::parse(policy).is_ok_and(|k| k.entry().needs_profile)
}

/// Why a ratio below 1x in the at-a-glance tables is not a policy beating the optimum, for
/// the `policies` that had one; empty when none did. The bound is Belady/MIN's page-ins in the
/// cache regime (docs/DESIGN.md, "Cache regime"): from an empty budget, every unit it pages in
/// admitted, first touches included; a pinning policy's pins are resident from the start and
/// never page-ins, and static-pin streams the rest without admitting them.
fn below_bound_words(policies: &[String]) -> String {
    if policies.is_empty() {
        return String::new();
    }
    let names = policies
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let pinning = policies.iter().any(|p| pins_from_profile(p));
    let streams = policies.iter().any(|p| p == "static-pin") || !pinning;
    format!(
        " A ratio below 1x ({names}) does not beat the optimum: the bound is the fewest page-ins (for units of one size, the fewest bytes) of a policy that starts from an empty budget and admits every unit it pages in, first touches included.{}{}",
        if pinning {
            " A pinning policy is given the profile trace's access statistics (here the evaluated trace itself, so it knows in advance which units are hottest), and its pinned units are resident from the start and never counted as page-ins."
        } else {
            ""
        },
        if streams {
            " A policy that streams units past the budget without admitting them (static-pin streams every unit it did not pin) is outside the class the bound covers."
        } else {
            ""
        }
    )
}

/// One row per mechanism of trace `t`: memory held (streaming), the fewest bytes per token of
/// any policy at each budget with its distance from Belady, and the best tokens/s. Returns
/// the policies whose cell fell below the Belady figure.
fn glance_table(doc: &mut Doc, res: &Results, t: &TraceInfo) -> Vec<String> {
    let runs: Vec<&RunEntry> = own(res, &t.name).collect();
    let mut below = Vec::new();
    if runs.is_empty() {
        return below;
    }
    // the smallest batch and the first split, so every cell compares like with like
    let batch = runs.iter().filter_map(|r| r.grid.batch).min();
    let split = runs.iter().find_map(|r| r.grid.split.clone());
    let runs: Vec<&RunEntry> = runs
        .into_iter()
        .filter(|r| r.grid.evict.is_none() || (r.grid.batch == batch && r.grid.split == split))
        .collect();
    let mechs = distinct(runs.iter().map(|r| r.grid.mechanism.clone()));
    let budgets: Vec<String> = distinct(runs.iter().filter_map(|r| r.grid.budget.clone()));
    let timed = runs.iter().any(|r| r.timing().is_some());
    let mut header = vec![
        "mechanism".to_string(),
        "memory held: MiB / layer step (x ideal)".to_string(),
    ];
    header.extend(budgets.iter().map(|b| {
        format!(
            "fewest MiB / token at {} (x Belady bound)",
            crate::sizes::grid_budget_text(b)
        )
    }));
    if timed {
        header.push("best tokens/s (policy @ budget)".into());
    }
    let mut cols: Vec<Vec<GlanceCell>> = vec![Vec::new(); header.len() - 1];
    for m in &mechs {
        let of_m: Vec<&RunEntry> = runs
            .iter()
            .filter(|r| &r.grid.mechanism == m)
            .cloned()
            .collect();
        cols[0].push(held_cell(t, &of_m));
        for (bi, b) in budgets.iter().enumerate() {
            cols[1 + bi].push(fewest_cell(res, &of_m, b, &mut below));
        }
        if timed {
            cols[1 + budgets.len()].push(fastest_cell(&of_m));
        }
    }
    let rows = marked_rows(&mechs, &cols, timed);
    doc.h(
        3,
        format!(
            "At a glance: `{}`{}",
            t.name,
            batch.map(|b| format!(", batch {b}")).unwrap_or_default()
        ),
    );
    doc.table(header, rows);
    below
}

/// Memory held by the streaming run of one mechanism, with its ratio to the ideal.
fn held_cell(t: &TraceInfo, of_m: &[&RunEntry]) -> GlanceCell {
    let stream = of_m.iter().find(|r| r.grid.evict.is_none());
    let v = stream.and_then(|r| resident_mib(r));
    let ideal = stream
        .and_then(|r| expert_mib(r, t))
        .zip(t.mean_top_k())
        .map(|(e, k)| e * k);
    let text = match (v, ideal) {
        (Some(v), Some(i)) if i > 0.0 => format!("{} ({}x)", fmt(v), fmt(v / i)),
        (Some(v), _) => fmt(v),
        _ => "–".into(),
    };
    (v, text)
}

/// The fewest bytes per token any online policy of one mechanism moves at budget `b`, with
/// the policy and its ratio to Belady; a ratio below 1 says why in the cell, and its policy
/// joins `below`.
fn fewest_cell(res: &Results, of_m: &[&RunEntry], b: &str, below: &mut Vec<String>) -> GlanceCell {
    let best = of_m
        .iter()
        .filter(|r| r.grid.budget.as_deref() == Some(b) && !is_belady(r))
        .filter_map(|r| Some((*r, bytes_per_token(r)?)))
        .min_by(|x, y| cmp_f64(x.1, y.1));
    match best {
        Some((r, v)) => {
            let policy = r.grid.evict.as_deref().unwrap_or("-");
            let bound = belady_of(res, r).and_then(bytes_per_token);
            let ratio = bound
                .filter(|&x| x > 0.0)
                .map(|x| ratio_words(policy, v / x, below))
                .unwrap_or_default();
            (
                Some(v),
                format!("{policy} {}{ratio}", fmt(v * metrics::MIB)),
            )
        }
        None => (None, "–".into()),
    }
}

/// ` (1.17x)`; below 1, ` (0.14x; not bounded by Belady: ...)` with the reason in brief
/// (the paragraph under the tables gives it in full), `policy` joining `below`.
fn ratio_words(policy: &str, ratio: f64, below: &mut Vec<String>) -> String {
    if ratio >= 1.0 {
        return format!(" ({}x)", fmt(ratio));
    }
    if !below.iter().any(|p| p == policy) {
        below.push(policy.to_string());
    }
    let why = if pins_from_profile(policy) {
        "its pins, chosen from the profile trace, are never page-ins"
    } else {
        "it streams units without admitting them"
    };
    format!(" ({}x; not bounded by Belady: {why})", fmt(ratio))
}

/// The most tokens per second of one mechanism over its policies and budgets, and where.
fn fastest_cell(of_m: &[&RunEntry]) -> GlanceCell {
    let best = of_m
        .iter()
        .filter(|r| !is_belady(r))
        .filter_map(|r| Some((*r, tokens_per_s(r)?)))
        .max_by(|x, y| cmp_f64(x.1, y.1));
    match best {
        Some((r, v)) => {
            let how = match (&r.grid.evict, &r.grid.budget) {
                // a budget given in bytes is its size already: `lru @ 5 GiB, 1,280 experts`
                (Some(e), Some(b)) => match BudgetSize::of_run(&r.result) {
                    Some(z) if crate::sizes::grid_budget_text(b) != *b => {
                        format!("{e} @ {}, {}", size_text(z.bytes), z.experts_text())
                    }
                    Some(z) => format!("{e} @ {b} = {}, {}", size_text(z.bytes), z.experts_text()),
                    None => format!("{e} @ {}", crate::sizes::grid_budget_text(b)),
                },
                _ => "streaming".into(),
            };
            (Some(v), format!("{} ({how})", fmt(v)))
        }
        None => (None, "–".into()),
    }
}

/// The table rows: per mechanism its cells, the best of each column marked (tokens/s is
/// better higher, every other column lower).
fn marked_rows(mechs: &[String], cols: &[Vec<GlanceCell>], timed: bool) -> Vec<Vec<Cell>> {
    let better: Vec<Better> = (0..cols.len())
        .map(|c| {
            if timed && c == cols.len() - 1 {
                Better::Higher
            } else {
                Better::Lower
            }
        })
        .collect();
    let marks: Vec<Vec<bool>> = cols
        .iter()
        .zip(&better)
        .map(|(c, b)| best(&c.iter().map(|x| x.0).collect::<Vec<_>>(), *b))
        .collect();
    mechs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut row = vec![Cell::plain(format!("`{m}`"))];
            row.extend(cols.iter().zip(&marks).map(|(c, mk)| Cell {
                text: c[i].1.clone(),
                best: mk[i],
            }));
            row
        })
        .collect()
}

/// The answer in brief: the at-a-glance tables, then the findings per trace in words.
pub(super) fn findings(doc: &mut Doc, res: &Results) {
    doc.h(2, "Answer in brief");
    glance(doc, res);
    doc.h(3, "In words");
    let mut items = Vec::new();
    for t in &res.traces {
        memory_findings(res, t, &mut items);
        retention_findings(res, t, &mut items);
        speed_findings(res, t, &mut items);
    }
    let absent = absent_blocks(res);
    if !absent.is_empty() {
        items.push(format!("Not in these results: {}.", absent.join("; ")));
    }
    doc.list(items);
}

/// Which mechanism of trace `t` holds the least memory streaming, against the ideal, and
/// which the most.
fn memory_findings(res: &Results, t: &TraceInfo, items: &mut Vec<String>) {
    let stream: Vec<(&RunEntry, f64)> = own(res, &t.name)
        .filter(|r| r.grid.evict.is_none())
        .filter_map(|r| Some((r, resident_mib(r)?)))
        .collect();
    let least = stream.iter().min_by(|a, b| cmp_f64(a.1, b.1));
    let most = stream.iter().max_by(|a, b| cmp_f64(a.1, b.1));
    if let (Some(&(b, res_mib)), Some(&(worst, worst_mib))) = (least, most) {
        let ideal = expert_mib(b, t).zip(t.mean_top_k()).map(|(e, k)| e * k);
        items.push(format!(
            "`{}`: least memory held is `{}` at {} MiB per layer step{} (most: `{}` at {} MiB).",
            t.name,
            b.grid.mechanism,
            fmt(res_mib),
            ideal
                .map(|i| format!(
                    ", {}x the ideal of {} MiB (top-k x expert size)",
                    fmt(res_mib / i),
                    fmt(i)
                ))
                .unwrap_or_default(),
            worst.grid.mechanism,
            fmt(worst_mib),
        ));
    }
}

/// Per budget and batch of trace `t`, the online policy that moves the fewest bytes, against
/// Belady.
fn retention_findings(res: &Results, t: &TraceInfo, items: &mut Vec<String>) {
    let cache: Vec<(&RunEntry, f64)> = own(res, &t.name)
        .filter(|r| r.grid.evict.is_some())
        .filter_map(|r| Some((r, bytes_per_token(r)?)))
        .collect();
    for budget in distinct(cache.iter().map(|r| r.0.grid.budget.clone())) {
        for batch in distinct(cache.iter().map(|r| r.0.grid.batch)) {
            let Some(&(b, bpt)) = cache
                .iter()
                .filter(|(r, _)| r.grid.budget == budget && r.grid.batch == batch && !is_belady(r))
                .min_by(|a, b| cmp_f64(a.1, b.1))
            else {
                continue;
            };
            let v = bpt * metrics::MIB;
            let bound = belady_of(res, b)
                .and_then(bytes_per_token)
                .map(|x| x * metrics::MIB);
            items.push(format!(
                "`{}`, budget {}{}: fewest bytes moved by `{}`{} with {} MiB per token{}.",
                t.name,
                budget
                    .as_deref()
                    .map_or("-".to_string(), crate::sizes::grid_budget_text),
                batch.map(|b| format!(", batch {b}")).unwrap_or_default(),
                run_label(b),
                budget_words(b),
                fmt(v),
                match bound {
                    Some(x) if x > 0.0 && v < x => format!(
                        "; Belady/MIN needs {} MiB, which does not bound it ({}x: see why under the at-a-glance tables)",
                        fmt(x),
                        fmt(v / x)
                    ),
                    Some(x) if x > 0.0 => format!(
                        "; Belady/MIN needs {} MiB, so it is {}x the bound",
                        fmt(x),
                        fmt(v / x)
                    ),
                    Some(x) => format!("; Belady/MIN needs {} MiB", fmt(x)),
                    None => "; no Belady run to compare with".into(),
                }
            ));
        }
    }
}

/// Per batch of trace `t`, the fastest run and its step latency.
fn speed_findings(res: &Results, t: &TraceInfo, items: &mut Vec<String>) {
    let timed: Vec<(&RunEntry, &TimingReport)> = own(res, &t.name)
        .filter_map(|r| Some((r, r.timing()?)))
        .collect();
    for batch in distinct(timed.iter().map(|r| r.0.grid.batch)) {
        if let Some((b, tm)) = timed
            .iter()
            .filter(|(r, _)| r.grid.batch == batch && !is_belady(r))
            .max_by(|a, b| cmp_f64(a.1.tokens_per_s, b.1.tokens_per_s))
        {
            items.push(format!(
                "`{}`{}: fastest is `{}`{} at {} tokens/s (step p50 {} ms, p99 {} ms) on `{}`.",
                t.name,
                batch.map(|b| format!(", batch {b}")).unwrap_or_default(),
                run_label(b),
                budget_words(b),
                fmt(tm.tokens_per_s),
                fmt(tm.step_ms_p50),
                fmt(tm.step_ms_p99),
                profile_name(res).unwrap_or_default()
            ));
        }
    }
}

/// What the results lack, as sentences, so the reader knows what was not measured.
fn absent_blocks(res: &Results) -> Vec<String> {
    let mut v = Vec::new();
    let any = |has: fn(&RunEntry) -> bool| res.runs.iter().any(has);
    if !any(|r| r.streaming().is_some()) {
        v.push("the streaming regime (no run has a `streaming` block)".to_string());
    }
    if !any(|r| r.cache().is_some()) {
        v.push(
            "retention under a budget (no run has a `cache` block: give `--evict` and `--budgets`)"
                .to_string(),
        );
    }
    if !any(|r| r.timing().is_some()) {
        v.push(
            "time (no run has a `timing` block: give a hardware profile with `--hw`)".to_string(),
        );
    }
    v
}
