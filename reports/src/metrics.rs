//! The metrics a report tabulates: how to read each from a run report, a readable label with
//! its unit, and which direction is better (for marking the best cell of a column).

use crate::run::{RunReport, TimingReport};

/// Which value of a column is the best one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
    /// Descriptive column: nothing is marked.
    Neither,
}

/// One tabulated metric.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// The value in a run, `None` when the run lacks its block.
    pub get: fn(&RunReport) -> Option<f64>,
    /// Column header, with unit.
    pub label: &'static str,
    pub better: Better,
    /// Multiply the value by this before display (bytes -> MiB: 1/2^20).
    pub scale: f64,
}

const fn m(get: fn(&RunReport) -> Option<f64>, label: &'static str, better: Better) -> Metric {
    Metric {
        get,
        label,
        better,
        scale: 1.0,
    }
}

/// Bytes to MiB.
pub const MIB: f64 = 1.0 / (1024.0 * 1024.0);

/// Streaming-regime columns (the run's `streaming` block, docs/guide/run.md).
pub const STREAMING: &[Metric] = &[
    m(
        |r| Some(r.streaming.as_ref()?.resident_mib_per_layer_step),
        "resident MiB / layer step",
        Better::Lower,
    ),
    m(
        |r| Some(r.streaming.as_ref()?.transfer_mib_per_layer_step),
        "transfer MiB / layer step",
        Better::Lower,
    ),
    m(
        |r| Some(r.streaming.as_ref()?.resident_experts_per_layer_step),
        "resident experts / layer step",
        Better::Lower,
    ),
    m(
        |r| Some(r.streaming.as_ref()?.hot_units_per_layer_step),
        "hot units / layer step",
        Better::Lower,
    ),
    m(
        |r| Some(r.streaming.as_ref()?.waste_factor),
        "waste factor",
        Better::Lower,
    ),
    m(
        |r| Some(r.streaming.as_ref()?.selectivity),
        "selectivity",
        Better::Lower,
    ),
    m(
        |r| Some(r.streaming.as_ref()?.always_on_units as f64),
        "always-on units",
        Better::Neither,
    ),
    m(
        |r| Some(r.streaming.as_ref()?.units_per_layer),
        "units / layer",
        Better::Neither,
    ),
    m(
        |r| Some(r.streaming.as_ref()?.committed_mib_total),
        "committed MiB (bank)",
        Better::Lower,
    ),
];

/// Cache-regime bytes per token, the retention comparison's headline metric, in MiB.
pub const BYTES_PER_TOKEN: Metric = Metric {
    get: |r| Some(r.cache.as_ref()?.bytes_per_token),
    label: "MiB / token",
    better: Better::Lower,
    scale: MIB,
};

/// Cache-regime columns of the detail table (the run's `cache` block).
pub const CACHE: &[Metric] = &[
    BYTES_PER_TOKEN,
    m(
        |r| Some(r.cache.as_ref()?.page_ins_per_token),
        "page-ins / token",
        Better::Lower,
    ),
    m(
        |r| Some(r.cache.as_ref()?.miss_rate),
        "miss rate",
        Better::Lower,
    ),
    m(
        |r| Some(r.cache.as_ref()?.evictions as f64),
        "evictions",
        Better::Lower,
    ),
    m(
        |r| Some(r.cache.as_ref()?.budget_units as f64),
        "budget (units)",
        Better::Neither,
    ),
    m(
        |r| Some(r.cache.as_ref()?.peak_resident_mib),
        "peak resident MiB",
        Better::Neither,
    ),
];

/// Timing columns (the run's `timing` block).
pub const TIMING: &[Metric] = &[
    m(
        |r| Some(r.timing.as_ref()?.step_ms_p50),
        "step p50 ms",
        Better::Lower,
    ),
    m(
        |r| Some(r.timing.as_ref()?.step_ms_p99),
        "step p99 ms",
        Better::Lower,
    ),
    m(
        |r| Some(r.timing.as_ref()?.tokens_per_s),
        "tokens/s",
        Better::Higher,
    ),
    m(
        |r| Some(r.timing.as_ref()?.compute_ms_per_step),
        "compute ms",
        Better::Lower,
    ),
    m(
        |r| Some(r.timing.as_ref()?.h2d_ms_per_step),
        "H2D ms",
        Better::Lower,
    ),
    m(
        |r| Some(r.timing.as_ref()?.vmm_ms_per_step),
        "VMM ms",
        Better::Lower,
    ),
    m(
        |r| Some(r.timing.as_ref()?.fault_ms_per_step),
        "fault ms",
        Better::Lower,
    ),
    m(
        |r| Some(r.timing.as_ref()?.stall_ms_per_step),
        "stall ms",
        Better::Lower,
    ),
    m(
        |r| Some(r.timing.as_ref()?.peak_mapped_mib),
        "peak mapped MiB",
        Better::Lower,
    ),
];

/// A value of the `timing` block.
pub type TimingValue = fn(&TimingReport) -> f64;

/// Parts of the time-split chart: (value, legend, lane). Lane 0 is the critical path and adds
/// up to the mean step time (compute + stall, the time compute waits for paging); lane 1 is
/// the busy time of each paging resource, which overlap each other and compute, so lane 1
/// need not equal the stall (the discrete-event engine gives each resource its own timeline).
pub const TIME_SPLIT: &[(TimingValue, &str, usize)] = &[
    (|t| t.compute_ms_per_step, "compute", 0),
    (|t| t.stall_ms_per_step, "stall (waiting for paging)", 0),
    (|t| t.h2d_ms_per_step, "H2D copy busy", 1),
    (|t| t.vmm_ms_per_step, "VMM calls busy", 1),
    (|t| t.fault_ms_per_step, "faults busy", 1),
];

/// Step-latency quantiles in the timing block, for CDFs: (value, cumulative probability).
pub const LATENCY_QUANTILES: &[(TimingValue, f64)] = &[
    (|t| t.step_ms_p50, 0.5),
    (|t| t.step_ms_p90, 0.9),
    (|t| t.step_ms_p99, 0.99),
    (|t| t.step_ms_max, 1.0),
];

/// A count with its noun, singular for 1: `count(1, "unit")` is `1 unit`, `count(3, "unit")`
/// `3 units` (the plural adds an `s`: pass nouns whose plural does).
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Display text of a value: integers as integers, otherwise 3 to 4 significant digits.
pub fn fmt(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if x == x.round() && a < 1e15 {
        format!("{}", x as i64)
    } else if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else if a >= 0.01 {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

/// Marks of the best values among `vals` (ties all marked); none for [`Better::Neither`],
/// for fewer than two values, or when all values are equal.
pub fn best(vals: &[Option<f64>], better: Better) -> Vec<bool> {
    let pick = match better {
        Better::Neither => return vec![false; vals.len()],
        Better::Lower => vals.iter().flatten().cloned().fold(f64::INFINITY, f64::min),
        Better::Higher => vals
            .iter()
            .flatten()
            .cloned()
            .fold(f64::NEG_INFINITY, f64::max),
    };
    // nothing stands out when fewer than two values are present or all are equal
    let present: Vec<f64> = vals.iter().flatten().cloned().collect();
    let all_equal = present.windows(2).all(|w| w[0] == w[1]);
    vals.iter()
        .map(|v| present.len() > 1 && !all_equal && *v == Some(pick))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1, "unit"), "1 unit");
        assert_eq!(count(0, "unit"), "0 units");
        assert_eq!(count(192, "unit"), "192 units");
    }

    #[test]
    fn formats() {
        assert_eq!(fmt(3.0), "3");
        assert_eq!(fmt(1234.56), "1235");
        assert_eq!(fmt(123.456), "123.5");
        assert_eq!(fmt(2.34567), "2.35");
        assert_eq!(fmt(0.123456), "0.123");
        assert_eq!(fmt(0.00123), "1.23e-3");
    }

    #[test]
    fn best_marks_ties_and_skips_missing() {
        let v = [Some(2.0), None, Some(1.0), Some(1.0)];
        assert_eq!(best(&v, Better::Lower), [false, false, true, true]);
        assert_eq!(best(&v, Better::Higher), [true, false, false, false]);
        assert_eq!(best(&v, Better::Neither), [false; 4]);
        // a single value is not "best of" anything
        assert_eq!(best(&[Some(1.0), None], Better::Lower), [false, false]);
        assert_eq!(best(&[Some(4.0), Some(4.0)], Better::Lower), [false, false]);
    }
}
