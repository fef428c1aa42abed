//! The report's closing sections: generic tables of the blocks not tabulated elsewhere
//! (`tiers`, `schedule`, `admission`), cross-trace stability of static choices, and the list
//! of files.

use super::{bytes_per_token, resident_mib, run_label};
use crate::doc::{Cell, Doc};
use crate::metrics::{self, best, fmt, Better};
use crate::results::{Results, RunEntry};
use crate::run::RunReport;

/// A column of a generic block table: its header (the block's JSON key) and its value.
type BlockColumn = (&'static str, fn(&RunReport) -> Option<f64>);

/// A block shown as a generic table: its name, whether a run has it, its columns, and which
/// direction is better in every column.
type BlockTable = (
    &'static str,
    fn(&RunReport) -> bool,
    &'static [BlockColumn],
    Better,
);

/// The `tiers` block's keys, in JSON order.
const TIERS_COLUMNS: &[BlockColumn] = &[
    ("dram_hits", |r| Some(r.tiers.as_ref()?.dram_hits as f64)),
    ("ssd_compulsory", |r| {
        Some(r.tiers.as_ref()?.ssd_compulsory as f64)
    }),
    ("ssd_capacity", |r| {
        Some(r.tiers.as_ref()?.ssd_capacity as f64)
    }),
];

/// The `schedule` block's keys, in JSON order.
const SCHEDULE_COLUMNS: &[BlockColumn] = &[
    ("unions_per_token", |r| {
        Some(r.schedule.as_ref()?.unions_per_token)
    }),
    ("delay_p50", |r| Some(r.schedule.as_ref()?.delay_p50 as f64)),
    ("delay_p99", |r| Some(r.schedule.as_ref()?.delay_p99 as f64)),
    ("delay_max", |r| Some(r.schedule.as_ref()?.delay_max as f64)),
];

/// The `admission` block's keys, in JSON order (`cap` and `limit_mib` are empty without a cap).
const ADMISSION_COLUMNS: &[BlockColumn] = &[
    ("requested", |r| {
        Some(r.admission.as_ref()?.requested as f64)
    }),
    ("admitted", |r| Some(r.admission.as_ref()?.admitted as f64)),
    ("cap", |r| r.admission.as_ref()?.cap),
    ("limit_mib", |r| r.admission.as_ref()?.limit_mib),
];

/// Blocks the report does not tabulate specially (`tiers`, `schedule`, `admission`): one
/// generic table each, a column per key of the block.
pub(super) fn other_blocks(doc: &mut Doc, res: &Results) {
    // tiers and schedule count costs (lower is better); admission is descriptive
    let blocks: [BlockTable; 3] = [
        ("tiers", |r| r.tiers.is_some(), TIERS_COLUMNS, Better::Lower),
        (
            "schedule",
            |r| r.schedule.is_some(),
            SCHEDULE_COLUMNS,
            Better::Lower,
        ),
        (
            "admission",
            |r| r.admission.is_some(),
            ADMISSION_COLUMNS,
            Better::Neither,
        ),
    ];
    for (block, has, columns, better) in blocks {
        let runs: Vec<&RunEntry> = res.runs.iter().filter(|r| has(&r.result)).collect();
        if runs.is_empty() {
            continue;
        }
        doc.h(2, format!("`{block}` results"));
        let mut header = vec!["trace".to_string(), "run".to_string()];
        header.extend(columns.iter().map(|(k, _)| k.to_string()));
        let cols: Vec<Vec<Cell>> = columns
            .iter()
            .map(|(_, get)| {
                let vals: Vec<Option<f64>> = runs.iter().map(|r| get(&r.result)).collect();
                let marks = best(&vals, better);
                vals.iter()
                    .zip(marks)
                    .map(|(v, b)| Cell {
                        text: v.map(fmt).unwrap_or("–".into()),
                        best: b,
                    })
                    .collect()
            })
            .collect();
        let rows = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut row = vec![Cell::plain(r.grid.trace.clone()), Cell::plain(run_label(r))];
                row.extend(cols.iter().map(|c| c[i].clone()));
                row
            })
            .collect();
        doc.table(header, rows);
    }
}

/// Per kind of static choice, packing (streaming) then pinning (retention): the largest
/// relative loss and the run that has it.
type Worst = [Option<(f64, String)>; 2];

/// Cross-trace stability: the loss of each static choice made on another trace.
pub(super) fn stability(doc: &mut Doc, res: &Results) {
    let cross: Vec<&RunEntry> = res.runs.iter().filter(|r| r.grid.is_cross()).collect();
    if cross.is_empty() {
        return;
    }
    doc.h(2, "Cross-trace stability");
    doc.p("A static packing or pin set is chosen on one trace (the profile trace) and evaluated on another. The loss is the extra memory held (streaming) or bytes moved per token (retention) compared with choosing on the evaluated trace itself; 0% means the choice transfers perfectly.");
    let mut worst: Worst = [None, None];
    let mut rows = Vec::new();
    for r in cross {
        rows.push(stability_row(res, r, &mut worst));
    }
    let mut items = Vec::new();
    if let Some((l, what)) = &worst[0] {
        items.push(format!(
            "largest packing loss: {what}, {:+.1}% memory held",
            l * 100.0
        ));
    }
    if let Some((l, what)) = &worst[1] {
        items.push(format!(
            "largest pinning loss: {what}, {:+.1}% bytes per token",
            l * 100.0
        ));
    }
    doc.p(stability_summary(&worst, rows.len()));
    doc.list(items);
    doc.table(
        [
            "run",
            "chosen on",
            "evaluated on",
            "metric",
            "value",
            "chosen on itself",
            "loss",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    );
}
/// The paragraph over the cross-trace table: how many choices were carried over, and whether
/// the worst of them lost much. A loss within 5% is called small: below the spread the
/// retention tables show between neighbouring policies of one budget, a reading aid, not
/// a measured threshold.
fn stability_summary(worst: &Worst, runs: usize) -> String {
    const SMALL: f64 = 0.05;
    let losses: Vec<f64> = worst.iter().flatten().map(|w| w.0).collect();
    let verdict = match losses.iter().cloned().reduce(f64::max) {
        None => "No choice has a run on its own trace to compare with, so no loss is computed.".to_string(),
        Some(l) if l <= SMALL => format!("Every choice transfers well: the worst loses {:+.1}% against choosing on the evaluated trace itself, so a packing or pin set profiled on one of these traces can serve the others.", l * 100.0),
        Some(l) => format!("The worst choice loses {:+.1}% against choosing on the evaluated trace itself: profile the packing or pin set on traces like the ones the model will serve.", l * 100.0),
    };
    format!(
        "In short: {} carried from one trace to another. {verdict}",
        match runs {
            1 => "1 static choice was".to_string(),
            n => format!("{n} static choices were"),
        }
    )
}

/// The row of cross run `r` against the run chosen on its own trace; a larger relative loss
/// than the worst so far replaces it.
fn stability_row(res: &Results, r: &RunEntry, worst: &mut Worst) -> Vec<Cell> {
    let own = res.runs.iter().find(|x| {
        !x.grid.is_cross()
            && x.grid.trace == r.grid.trace
            && x.grid.mechanism == r.grid.mechanism
            && x.grid.evict == r.grid.evict
            && x.grid.budget == r.grid.budget
            && x.grid.split == r.grid.split
            && x.grid.batch == r.grid.batch
    });
    let (get, unit, scale): (fn(&RunEntry) -> Option<f64>, _, _) = if r.grid.evict.is_some() {
        (bytes_per_token, "MiB/token", metrics::MIB)
    } else {
        (resident_mib, "resident MiB/layer step", 1.0)
    };
    let v = get(r);
    let o = own.and_then(get);
    if let (Some(v), Some(o)) = (v, o) {
        let slot = &mut worst[usize::from(r.grid.evict.is_some())];
        let beaten = !matches!(slot, Some((w, _)) if *w >= v / o - 1.0);
        if o > 0.0 && beaten {
            *slot = Some((
                v / o - 1.0,
                format!(
                    "`{}` chosen on `{}` and evaluated on `{}`",
                    run_label(r),
                    r.grid.profile_trace,
                    r.grid.trace
                ),
            ));
        }
    }
    let loss = match (v, o) {
        (Some(v), Some(o)) if o > 0.0 => format!("{:+.1}%", (v / o - 1.0) * 100.0),
        (Some(v), Some(o)) => format!("{:+}", fmt((v - o) * scale)),
        _ => "–".into(),
    };
    vec![
        Cell::plain(run_label(r)),
        Cell::plain(format!("`{}`", r.grid.profile_trace)),
        Cell::plain(format!("`{}`", r.grid.trace)),
        Cell::plain(unit),
        Cell::plain(v.map(|v| fmt(v * scale)).unwrap_or("–".into())),
        Cell::plain(o.map(|v| fmt(v * scale)).unwrap_or("–".into())),
        Cell::plain(loss),
    ]
}

/// What the output files hold.
pub(super) fn files(doc: &mut Doc, res: &Results) {
    doc.h(2, "Files");
    doc.p(format!(
        "`results.json` holds every run's full `sim run --json` object with its grid coordinates ({} runs); `results.csv` has one row per run and one column per metric, headed by the metric's dotted JSON path (`streaming.resident_mib_per_layer_step`, `grid.mechanism`, ...). `sim report DIR` regenerates this report from `results.json` without rerunning.",
        res.runs.len()
    ));
}
