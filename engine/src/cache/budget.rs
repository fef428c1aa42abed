//! Budgets: `--budget 25%` (a fraction of the bank), `--budget 192` (units) or
//! `--budget 3GiB` (bytes), resolved to unit counts for the global pool or per layer.

use super::CacheError;

/// The budget as the user wrote it, its parsing, text form and resolution to a unit count;
/// defined in `policies` so that reports can read it back from a results file.
pub use policies::regime::{round_half_even, Budget, BudgetError};

impl From<BudgetError> for CacheError {
    fn from(e: BudgetError) -> CacheError {
        CacheError::Budget(e.0)
    }
}

/// Per-layer equal split: each pool of `pool_units[i]` units gets
/// `max(1, round-half-even(r x pool_units[i]))` slots, where r is the budget's fraction of the
/// whole bank (`total_units`), exactly: `global_units / total_units` for unit and byte budgets.
pub fn split_per_layer(
    budget: &Budget,
    global_units: usize,
    total_units: usize,
    pool_units: &[usize],
) -> Vec<usize> {
    let (num, den) = match *budget {
        Budget::Fraction { num, den } => (num, den),
        _ => (global_units as u128, total_units as u128),
    };
    pool_units
        .iter()
        .map(|&n| (round_half_even(num * n as u128, den).max(1) as usize).min(n.max(1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_layer_split_rounds_each_layer() {
        // 10% of 32 = 3.2 -> 3 per layer; 90% -> 28.8 -> 29; a unit budget of 77 of 768
        // is r = 77/768, 77/768 x 32 = 3.208 -> 3.
        let f = Budget::parse("10%").unwrap();
        assert_eq!(split_per_layer(&f, 77, 768, &[32, 32]), vec![3, 3]);
        let f = Budget::parse("90%").unwrap();
        assert_eq!(split_per_layer(&f, 691, 768, &[32]), vec![29]);
        assert_eq!(split_per_layer(&Budget::Units(77), 77, 768, &[32]), vec![3]);
        assert_eq!(Budget::parse("12.5%").unwrap().to_string(), "12.5%");
    }
}
