//! Retention under a VRAM budget: per trace, mechanism, batch and split, the MiB each policy
//! moves per token at each budget against Belady/MIN, and the bytes-per-token-vs-budget chart.

use super::{belady_of, budget_units, bytes_per_token, distinct, figure, is_offline, slug};
use crate::doc::{Cell, Doc};
use crate::metrics::{self, best, fmt, Better};
use crate::plots::{self, LineChart, Scale, Series};
use crate::results::{Results, RunEntry, TraceInfo};
use crate::sizes::{size_text, BudgetSize};

/// Budget given as a percentage (`25%`), as a number.
fn percent(b: &str) -> Option<f64> {
    b.strip_suffix('%')?.trim().parse().ok()
}

/// The runs of one table: a trace, mechanism, batch and split, every policy at every budget.
struct Group<'a> {
    trace: &'a TraceInfo,
    mech: &'a str,
    batch: Option<u32>,
    /// The split unless it is `global`: headings and file names name only the others.
    split_note: Option<&'a str>,
    runs: Vec<&'a RunEntry>,
    /// The table's columns, in first-appearance order.
    budgets: Vec<Option<String>>,
    /// The table's rows, in first-appearance order.
    policies: Vec<String>,
}

impl Group<'_> {
    /// The run of policy `p` at budget `b`.
    fn find(&self, p: &str, b: &Option<String>) -> Option<&RunEntry> {
        self.runs
            .iter()
            .find(|r| r.grid.evict.as_deref() == Some(p) && &r.grid.budget == b)
            .cloned()
    }
}

/// The retention section: per trace, mechanism, batch and split a policy x budget table.
pub(super) fn retention(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    doc.h(2, "Retention under a VRAM budget");
    let cache_runs: Vec<&RunEntry> = res
        .runs
        .iter()
        .filter(|r| !r.grid.is_cross() && r.grid.evict.is_some() && r.cache().is_some())
        .collect();
    if cache_runs.is_empty() {
        doc.p("No run in these results has a `cache` block: retention was not compared (give `--evict` and `--budgets` to `sim compare`).");
        return Ok(());
    }
    doc.p("Each cell is MiB moved per token (page-ins x useful bytes per unit / tokens) and, in brackets, its ratio to Belady/MIN (the offline optimum) on the same trace, mechanism, budget and batch. The best online policy of each budget column is highlighted; Belady is the bound, not a contender. Page-ins, miss rates and evictions of every run are in `results.csv`.");
    for t in &res.traces {
        let tr: Vec<&RunEntry> = cache_runs
            .iter()
            .filter(|r| r.grid.trace == t.name)
            .cloned()
            .collect();
        // a dtype axis (`--dtype int4,bf16`) makes one group per mechanism and dtype, named
        // by both
        let mechs = distinct(
            tr.iter()
                .map(|r| (r.grid.mechanism.clone(), r.grid.dtype.clone())),
        );
        for (m, dtype) in mechs {
            let mech = match &dtype {
                Some(d) => format!("{m} {d}"),
                None => m.clone(),
            };
            let groups = distinct(tr.iter().map(|r| (r.grid.batch, r.grid.split.clone())));
            for (batch, split) in groups {
                let runs: Vec<&RunEntry> = tr
                    .iter()
                    .filter(|r| {
                        r.grid.mechanism == m
                            && r.grid.dtype == dtype
                            && r.grid.batch == batch
                            && r.grid.split == split
                    })
                    .cloned()
                    .collect();
                if runs.is_empty() {
                    continue;
                }
                let group = Group {
                    trace: t,
                    mech: &mech,
                    batch,
                    split_note: split.as_deref().filter(|&s| s != "global"),
                    budgets: distinct(runs.iter().map(|r| r.grid.budget.clone())),
                    policies: distinct(runs.iter().filter_map(|r| r.grid.evict.clone())),
                    runs,
                };
                group_table(doc, res, &group);
                budget_chart(doc, &group)?;
            }
        }
    }
    Ok(())
}

/// The policy x budget table of one group, and which runs came in below Belady/MIN.
fn group_table(doc: &mut Doc, res: &Results, g: &Group) {
    let (t, mech, batch, split_note) = (g.trace, g.mech, g.batch, g.split_note);
    doc.h(
        3,
        format!(
            "`{}`, mechanism `{mech}`{}{}",
            t.name,
            batch.map(|b| format!(", batch {b}")).unwrap_or_default(),
            split_note
                .map(|s| format!(", {s} split"))
                .unwrap_or_default()
        ),
    );
    let (budgets, policies) = (&g.budgets, &g.policies);
    let (cols, below) = budget_columns(res, g);
    let mut header = vec!["policy".to_string()];
    header.extend(budgets.iter().map(|b| {
        // one mechanism: a budget is one size, read off any of its runs
        let size = g
            .runs
            .iter()
            .find(|r| &r.grid.budget == b)
            .and_then(|r| BudgetSize::of_run(&r.result))
            .map(|z| format!(" = {} = {}", size_text(z.bytes), z.experts_text()))
            .unwrap_or_default();
        let given = b
            .as_deref()
            .map_or("-".into(), crate::sizes::grid_budget_text);
        // a budget given in bytes is its size already: `budget 1 GiB = 256 experts`
        match size.strip_prefix(&format!(" = {given}")) {
            Some(rest) => format!("budget {given}{rest}"),
            None => format!("budget {given}{size}"),
        }
    }));
    let rows = policies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut row = vec![Cell::plain(if is_offline(p) {
                "belady (bound)".to_string()
            } else {
                p.clone()
            })];
            row.extend(cols.iter().map(|c| c[i].clone()));
            row
        })
        .collect();
    doc.table(header, rows);
    if !below.is_empty() {
        doc.p(format!(
            "Below the Belady/MIN figure: {}. Belady is optimal among policies that admit every accessed unit into the budget; a policy that streams units past the cache without admitting them (static-pin streams everything it did not pin) is outside that class and can move fewer bytes.",
            below.join(", ")
        ));
    }
}

/// One column of cells per budget, the best online policy marked, and the runs (`policy @
/// budget`) that moved fewer bytes than Belady/MIN.
fn budget_columns(res: &Results, g: &Group) -> (Vec<Vec<Cell>>, Vec<String>) {
    let (budgets, policies) = (&g.budgets, &g.policies);
    let mut cols: Vec<Vec<Cell>> = Vec::new();
    let mut below: Vec<String> = Vec::new();
    for b in budgets {
        let vals: Vec<Option<f64>> = policies
            .iter()
            .map(|p| {
                if is_offline(p) {
                    None
                } else {
                    g.find(p, b).and_then(bytes_per_token)
                }
            })
            .collect();
        let marks = best(&vals, Better::Lower);
        cols.push(
            policies
                .iter()
                .zip(marks)
                .map(|(p, m)| {
                    let r = g.find(p, b);
                    let v = r.and_then(bytes_per_token);
                    let bound = r.and_then(|r| belady_of(res, r)).and_then(bytes_per_token);
                    if let (Some(v), Some(bd)) = (v, bound) {
                        if v < bd {
                            below.push(format!(
                                "`{p}` @ {}",
                                b.as_deref()
                                    .map_or("-".into(), crate::sizes::grid_budget_text)
                            ));
                        }
                    }
                    let text = match (v, bound) {
                        (Some(v), Some(bd)) if bd > 0.0 => {
                            format!("{} ({}x)", fmt(v * metrics::MIB), fmt(v / bd))
                        }
                        (Some(v), _) => fmt(v * metrics::MIB),
                        (None, _) => "–".into(),
                    };
                    Cell { text, best: m }
                })
                .collect(),
        );
    }
    (cols, below)
}

/// Bytes per token against the budget, one line per policy; Belady/MIN dashed.
fn budget_chart(doc: &mut Doc, g: &Group) -> anyhow::Result<()> {
    let (t, mech, batch, split_note) = (g.trace, g.mech, g.batch, g.split_note);
    let (runs, budgets, policies) = (&g.runs, &g.budgets, &g.policies);
    let by_percent = budgets
        .iter()
        .all(|b| b.as_deref().and_then(percent).is_some());
    let x_of = |r: &RunEntry| {
        if by_percent {
            r.grid.budget.as_deref().and_then(percent)
        } else {
            budget_units(r)
        }
    };
    let series: Vec<Series> = policies
        .iter()
        .map(|p| {
            let mut pts: Vec<(f64, f64)> = runs
                .iter()
                .filter(|r| r.grid.evict.as_deref() == Some(p.as_str()))
                .filter_map(|r| Some((x_of(r)?, bytes_per_token(r)? * metrics::MIB)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if is_offline(p) {
                Series::new("belady (lower bound)", pts).dashed()
            } else {
                Series::new(p.clone(), pts)
            }
        })
        .collect();
    let title = format!("Bytes per token vs budget, {} / {mech}", t.name);
    figure(
        doc,
        format!(
            "bytes_per_token_{}_{}{}{}.svg",
            slug(&t.name),
            slug(mech),
            batch.map(|b| format!("_b{b}")).unwrap_or_default(),
            split_note.map(|s| format!("_{}", slug(s))).unwrap_or_default()
        ),
        plots::line_chart(
            &LineChart {
                title: &title,
                x_label: if by_percent { "VRAM budget (% of the bank)" } else { "VRAM budget (units)" },
                y_label: "MiB per token",
                x_scale: Scale::Linear,
                y_from_zero: true,
            },
            &series,
        ),
        format!("MiB moved per token against the VRAM budget on `{}` with `{mech}`, one line per policy; Belady/MIN (dashed black) is the lower bound for every policy that admits each accessed unit into the budget.", t.name),
    )?;
    Ok(())
}
