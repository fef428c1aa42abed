//! The text of `sim curve`: a table of page-ins and miss ratio at chosen budgets and at each
//! curve's knee, and, with both LRU and MIN, the budget LRU needs to match MIN's page-ins.

use super::{budget_reaching, CurveReport};
use policies::PolicyKind;
use std::fmt::Write;

/// One row of the table: its label (the budget as written, or `knee (lru)`) and its budget
/// in units.
pub struct Row {
    pub label: String,
    pub units: usize,
}

/// The table of `r` at `rows` (then the knees), one column pair per curve.
pub fn table(r: &CurveReport, rows: &[Row]) -> String {
    let mut out = format!(
        "{}: {} units ({}), {} tokens, {} accesses; split {}, semantics {}\n",
        r.trace,
        r.units,
        r.mechanism,
        r.tokens,
        r.accesses,
        r.split.name(),
        r.semantics.name(),
    );
    let both = r.curve(PolicyKind::Lru).zip(r.curve(PolicyKind::Belady));
    let _ = write!(out, "{:<16} {:>7}", "budget", "units");
    for c in &r.curves {
        let _ = write!(
            out,
            " {:>16} {:>10}",
            format!("{} page-ins", c.evict),
            "miss ratio"
        );
    }
    if both.is_some() {
        let _ = write!(out, " {:>18}", "lru = belady at");
    }
    out.push('\n');
    let knees = r.curves.iter().filter_map(|c| {
        c.knee.map(|k| Row {
            label: format!("knee ({})", c.evict),
            units: k,
        })
    });
    let knees: Vec<Row> = knees.collect();
    for row in rows.iter().chain(&knees) {
        let _ = write!(out, "{:<16} {:>7}", row.label, row.units);
        for c in &r.curves {
            let p = c.at(row.units);
            let _ = write!(out, " {:>16} {:>10.4}", p, ratio(p, r.accesses));
        }
        if let Some((lru, min)) = both {
            let at = budget_reaching(lru, min.at(row.units));
            let at = at.map_or("-".to_string(), |b| b.to_string());
            let _ = write!(out, " {at:>18}");
        }
        out.push('\n');
    }
    out
}

/// Page-ins per access (0 for no access).
fn ratio(page_ins: u64, accesses: u64) -> f64 {
    if accesses == 0 {
        0.0
    } else {
        page_ins as f64 / accesses as f64
    }
}
