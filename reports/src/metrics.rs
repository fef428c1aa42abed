//! The metrics a report tabulates: their JSON path inside a run object, a readable label with
//! its unit, and which direction is better (for marking the best cell of a column). The keys
//! are the ones fixed by the run, retention and timing issues (`sim run --json`).

/// Which value of a column is the best one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
    /// Descriptive column: nothing is marked.
    Neither,
}

/// One tabulated metric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Metric {
    /// Dotted path inside the run object, e.g. `cache.bytes_per_token`.
    pub path: &'static str,
    /// Column header, with unit.
    pub label: &'static str,
    pub better: Better,
    /// Multiply the JSON value by this before display (bytes -> MiB: 1/2^20).
    pub scale: f64,
}

const fn m(path: &'static str, label: &'static str, better: Better) -> Metric {
    Metric {
        path,
        label,
        better,
        scale: 1.0,
    }
}

/// Bytes to MiB.
pub const MIB: f64 = 1.0 / (1024.0 * 1024.0);

/// Streaming-regime columns (issue 3's `streaming` block).
pub const STREAMING: &[Metric] = &[
    m(
        "streaming.resident_mib_per_layer_step",
        "resident MiB / layer step",
        Better::Lower,
    ),
    m(
        "streaming.transfer_mib_per_layer_step",
        "transfer MiB / layer step",
        Better::Lower,
    ),
    m(
        "streaming.resident_experts_per_layer_step",
        "resident experts / layer step",
        Better::Lower,
    ),
    m(
        "streaming.hot_units_per_layer_step",
        "hot units / layer step",
        Better::Lower,
    ),
    m("streaming.waste_factor", "waste factor", Better::Lower),
    m("streaming.selectivity", "selectivity", Better::Lower),
    m(
        "streaming.always_on_units",
        "always-on units",
        Better::Neither,
    ),
    m(
        "streaming.units_per_layer",
        "units / layer",
        Better::Neither,
    ),
    m(
        "streaming.committed_mib_total",
        "committed MiB (bank)",
        Better::Lower,
    ),
];

/// Cache-regime bytes per token, the retention comparison's headline metric, in MiB.
pub const BYTES_PER_TOKEN: Metric = Metric {
    path: "cache.bytes_per_token",
    label: "MiB / token",
    better: Better::Lower,
    scale: MIB,
};

/// Cache-regime columns of the detail table (issue 4's `cache` block).
pub const CACHE: &[Metric] = &[
    BYTES_PER_TOKEN,
    m(
        "cache.page_ins_per_token",
        "page-ins / token",
        Better::Lower,
    ),
    m("cache.miss_rate", "miss rate", Better::Lower),
    m("cache.evictions", "evictions", Better::Lower),
    m("cache.budget_units", "budget (units)", Better::Neither),
    m(
        "cache.peak_resident_mib",
        "peak resident MiB",
        Better::Neither,
    ),
];

/// Timing columns (issue 5's `timing` block).
pub const TIMING: &[Metric] = &[
    m("timing.step_ms_p50", "step p50 ms", Better::Lower),
    m("timing.step_ms_p99", "step p99 ms", Better::Lower),
    m("timing.tokens_per_s", "tokens/s", Better::Higher),
    m("timing.compute_ms_per_step", "compute ms", Better::Lower),
    m("timing.h2d_ms_per_step", "H2D ms", Better::Lower),
    m("timing.vmm_ms_per_step", "VMM ms", Better::Lower),
    m("timing.fault_ms_per_step", "fault ms", Better::Lower),
    m("timing.stall_ms_per_step", "stall ms", Better::Lower),
    m("timing.peak_mapped_mib", "peak mapped MiB", Better::Lower),
];

/// Parts of the time-split chart: (path, legend, lane). Lane 0 is the critical path and adds
/// up to the mean step time (compute + stall, the time compute waits for paging); lane 1 is
/// the busy time of each paging resource, which overlap each other and compute, so lane 1
/// need not equal the stall (issue 5's engine: resources have their own timelines).
pub const TIME_SPLIT: &[(&str, &str, usize)] = &[
    ("timing.compute_ms_per_step", "compute", 0),
    ("timing.stall_ms_per_step", "stall (waiting for paging)", 0),
    ("timing.h2d_ms_per_step", "H2D copy busy", 1),
    ("timing.vmm_ms_per_step", "VMM calls busy", 1),
    ("timing.fault_ms_per_step", "faults busy", 1),
];

/// Step-latency quantiles in the timing block, for CDFs: (path, cumulative probability).
pub const LATENCY_QUANTILES: &[(&str, f64)] = &[
    ("timing.step_ms_p50", 0.5),
    ("timing.step_ms_p90", 0.9),
    ("timing.step_ms_p99", 0.99),
    ("timing.step_ms_max", 1.0),
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
