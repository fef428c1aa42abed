//! Byte sizes, counts and budgets as people read them: `6 GiB = 1,536 units = 1,536 experts`
//! rather than `6442450944 B`. Every summary, table and report header that names a budget
//! words it here, so that a budget reads the same in `sim run`, `sim sweep`, `sim plan` and
//! the comparison report. The JSON keeps the exact forms (`budget`, `cache.budget_units`).

use crate::metrics::fmt;
use crate::run::RunReport;
use policies::Budget;

/// Bytes per MiB (2^20) and per GiB (2^30): the binary units every size prints in.
const MIB: f64 = (1u64 << 20) as f64;
const GIB: f64 = (1u64 << 30) as f64;

/// A byte size for reading: GiB from 1 GiB up, else MiB, else KiB, with 3 to 4 significant
/// digits (`6 GiB`, `6.40 GiB`, `768 MiB`, `4 KiB`).
pub fn size_text(bytes: f64) -> String {
    if bytes >= GIB {
        format!("{} GiB", fmt(bytes / GIB))
    } else if bytes >= MIB {
        format!("{} MiB", fmt(bytes / MIB))
    } else {
        format!("{} KiB", fmt(bytes / 1024.0))
    }
}

/// An integer with thousands separators: 6144 -> `6,144`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count that may be fractional (experts inside OS pages or packed regions): a whole
/// number with thousands separators, otherwise 3 to 4 significant digits.
pub fn count_text(x: f64) -> String {
    // within a millionth of a whole number: the division of whole bank sizes, not a fraction
    if (x - x.round()).abs() < 1e-6 && (0.0..1e15).contains(&x) {
        thousands(x.round() as u64)
    } else {
        fmt(x)
    }
}

/// A grid coordinate's budget (`results.json`'s `grid.budget`: `25%`, `192`, or bytes as
/// `3221225472 B`) with bytes in GiB/MiB (`3 GiB`); anything else as it is.
pub fn grid_budget_text(b: &str) -> String {
    match b.strip_suffix(" B").and_then(|n| n.parse::<u64>().ok()) {
        Some(n) => size_text(n as f64),
        None => b.to_string(),
    }
}

/// The budget as the user wrote it, bytes in GiB/MiB: `25%`, `192 units`, `6 GiB`.
pub fn given_text(b: &Budget) -> String {
    match *b {
        Budget::Bytes(n) => size_text(n as f64),
        Budget::Units(1) => "1 unit".into(),
        Budget::Units(n) => format!("{} units", thousands(n)),
        Budget::Fraction { .. } => b.to_string(),
    }
}

/// What a budget of some units of a run's mechanism holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetSize {
    /// Units of the budget (the resolved `cache.budget_units`).
    pub units: u64,
    /// Committed bytes of that many units (the bank's mean unit size x units).
    pub bytes: f64,
    /// Experts inside them (the bank's mean experts per unit x units; fractional for OS
    /// pages and regions that split an expert).
    pub experts: f64,
}

impl BudgetSize {
    /// The size of `units` units of `r`'s bank, from its streaming block (committed and
    /// useful MiB of all units, units per MoE layer) and its expert size; `None` without a
    /// streaming block or with an empty bank.
    pub fn of(r: &RunReport, units: u64) -> Option<BudgetSize> {
        let s = r.streaming.as_ref()?;
        let bank_units = (s.units_per_layer * r.inputs.moe_layers as f64).round();
        if bank_units <= 0.0 || r.inputs.expert_bytes == 0 {
            return None;
        }
        let share = units as f64 / bank_units;
        Some(BudgetSize {
            units,
            bytes: s.committed_mib_total * MIB * share,
            experts: s.useful_mib_total * MIB / r.inputs.expert_bytes as f64 * share,
        })
    }

    /// The size of `r`'s resolved budget (`cache.budget_units`).
    pub fn of_run(r: &RunReport) -> Option<BudgetSize> {
        BudgetSize::of(r, r.cache.as_ref()?.budget_units)
    }

    /// `768 MiB = 192 units = 192 experts`.
    pub fn text(&self) -> String {
        format!(
            "{} = {} = {}",
            size_text(self.bytes),
            self.units_text(),
            self.experts_text()
        )
    }

    /// `192 units`, `1 unit`.
    pub fn units_text(&self) -> String {
        given_text(&Budget::Units(self.units))
    }

    /// `192 experts`, `0.33 experts`.
    pub fn experts_text(&self) -> String {
        let n = count_text(self.experts);
        if n == "1" {
            "1 expert".into()
        } else {
            format!("{n} experts")
        }
    }
}

/// A run's budget for a summary line: the budget as given, then what it resolved to
/// (`25% = 768 MiB = 192 units = 192 experts`, `6 GiB = 1,536 units = 1,536 experts`,
/// `768 MiB = 192 units = 192 experts` for a unit count); a unit count the per-layer split
/// resolved to other pools says so (`10 units, pools hold 96 MiB = 24 units = 24 experts`).
/// Without a streaming block, the budget as given and its units.
pub fn budget_text(given: &Budget, size: Option<&BudgetSize>) -> String {
    let Some(z) = size else {
        return given_text(given);
    };
    match *given {
        Budget::Units(n) if n == z.units => z.text(),
        Budget::Units(_) => format!("{}, pools hold {}", given_text(given), z.text()),
        Budget::Bytes(_) => format!(
            "{} = {} = {}",
            given_text(given),
            z.units_text(),
            z.experts_text()
        ),
        Budget::Fraction { .. } => format!("{} = {}", given_text(given), z.text()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts_read_as_people_write_them() {
        assert_eq!(thousands(6144), "6,144");
        assert_eq!(thousands(1_638), "1,638");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(size_text((6u64 << 30) as f64), "6 GiB");
        assert_eq!(size_text(6.4 * GIB), "6.40 GiB");
        assert_eq!(size_text((512u64 << 20) as f64), "512 MiB");
        assert_eq!(size_text((3u64 << 20) as f64), "3 MiB");
        assert_eq!(size_text(4096.0), "4 KiB");
        assert_eq!(count_text(1536.0), "1,536");
        assert_eq!(count_text(1.0 / 3.0), "0.333");
    }

    #[test]
    fn grid_budgets_print_bytes_in_gib() {
        assert_eq!(grid_budget_text("3221225472 B"), size_text(3221225472.0));
        assert_eq!(grid_budget_text("3221225472 B"), "3 GiB");
        assert_eq!(grid_budget_text("25%"), "25%");
        assert_eq!(grid_budget_text("192"), "192");
    }

    #[test]
    fn budgets_name_bytes_units_and_experts() {
        // 1,536 units of 4 MiB holding one expert each: 6 GiB
        let z = BudgetSize {
            units: 1536,
            bytes: 1536.0 * 4.0 * MIB,
            experts: 1536.0,
        };
        assert_eq!(
            budget_text(&Budget::Bytes(6 << 30), Some(&z)),
            "6 GiB = 1,536 units = 1,536 experts"
        );
        assert_eq!(
            budget_text(&Budget::parse("25%").unwrap(), Some(&z)),
            "25% = 6 GiB = 1,536 units = 1,536 experts"
        );
        assert_eq!(
            budget_text(&Budget::Units(1536), Some(&z)),
            "6 GiB = 1,536 units = 1,536 experts"
        );
        assert_eq!(
            budget_text(&Budget::Units(10), Some(&z)),
            "10 units, pools hold 6 GiB = 1,536 units = 1,536 experts"
        );
        assert_eq!(budget_text(&Budget::Units(1), None), "1 unit");
        assert_eq!(budget_text(&Budget::Bytes(3 << 29), None), "1.50 GiB");
    }
}
