//! The tables `sim sweep` prints, one row per run: the streaming regime, the cache regime, and
//! tokens per second against the batch size; and the sweep's CSV.

use super::MIB;
use crate::run::RunReport;
use crate::sizes::{count_text, given_text, size_text, BudgetSize};
use policies::Split;
use std::fmt::Write;

/// The `sim sweep` table of a retention grid: one row per (mechanism, policy, budget,
/// split, batch), Belady's bound first within each mechanism.
pub fn retention_table(reports: &[RunReport]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if let Some(r) = reports.first() {
        let i = &r.inputs;
        let _ = writeln!(
            s,
            "{}, expert {:.3} MiB; cache regime, semantics {}",
            i.trace_text(),
            i.expert_mib,
            r.retention.as_ref().map_or("", |x| x.semantics.name())
        );
    }
    let tiers = reports.iter().any(|r| r.tiers.is_some());
    let sched = reports.iter().any(|r| r.schedule.is_some());
    s += &retention_table_header(tiers, sched);
    for r in reports {
        if let Some(row) = retention_table_row(r) {
            let _ = writeln!(s, "{row}");
        }
    }
    s
}

/// The header line of [`retention_table`], with the tier and schedule columns when any row
/// has them.
pub fn retention_table_header(tiers: bool, sched: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = write!(
        s,
        "{:<10} {:<10} {:>8} {:<9} {:>5} {:>6} {:>7} {:>10} {:>9} {:>8} {:>11} {:>9} {:>9}",
        "mechanism",
        "evict",
        "budget",
        "split",
        "batch",
        "units",
        "experts",
        "size",
        "pgin/tok",
        "miss %",
        "MiB/token",
        "evictions",
        "peak MiB"
    );
    if tiers {
        let _ = write!(s, " {:>9} {:>9} {:>9}", "dram hit", "ssd comp", "ssd cap");
    }
    if sched {
        let _ = write!(
            s,
            " {:>9} {:>5} {:>5} {:>5}",
            "union/tok", "d p50", "d p99", "d max"
        );
    }
    let _ = writeln!(s);
    s
}

/// One row of [`retention_table`] (without its newline); `None` in the streaming regime.
pub fn retention_table_row(r: &RunReport) -> Option<String> {
    use std::fmt::Write;
    let (Some(i), Some(c)) = (&r.retention, &r.cache) else {
        return None;
    };
    let size = BudgetSize::of_run(r);
    let mut s = format!(
        "{:<10} {:<10} {:>8} {:<9} {:>5} {:>6} {:>7} {:>10} {:>9.3} {:>8.2} {:>11.3} {:>9} {:>9.1}",
        r.inputs.policy,
        i.evict.name(),
        given_text(&i.budget),
        match i.split {
            Split::Global => "global",
            Split::PerLayer => "per-layer",
        },
        i.batch,
        c.budget_units,
        size.map_or("-".into(), |z| count_text(z.experts)),
        size.map_or("-".into(), |z| size_text(z.bytes)),
        c.page_ins_per_token,
        c.miss_rate * 100.0,
        c.bytes_per_token / MIB,
        c.evictions,
        c.peak_resident_mib
    );
    if let Some(t) = &r.tiers {
        let _ = write!(
            s,
            " {:>9} {:>9} {:>9}",
            t.dram_hits, t.ssd_compulsory, t.ssd_capacity
        );
    }
    if let Some(q) = &r.schedule {
        let _ = write!(
            s,
            " {:>9.3} {:>5} {:>5} {:>5}",
            q.unions_per_token, q.delay_p50, q.delay_p99, q.delay_max
        );
    }
    Some(s)
}

/// The tokens-per-second-against-batch table of a timed sweep: per mechanism and retention
/// setting, one row per `--batch` N, without and (with `--admission-cap`) with the cap, and
/// N_max: the largest N whose sequences are all admitted under the cap (without a cap: the
/// largest N whose mapped memory stays within usable VRAM).
pub fn batch_table(reports: &[RunReport]) -> String {
    use std::fmt::Write;
    if reports.iter().all(|r| r.timing.is_none()) {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\ntokens/s against batch N (timing on {}):",
        reports
            .iter()
            .find_map(|r| r.timing_detail.as_ref().map(|d| d.profile.clone()))
            .unwrap_or_default()
    );
    let _ = writeln!(
        s,
        "{:<34} {:>4} {:>12} {:>12} {:>10} {:>12} {:>9}",
        "mechanism / retention", "N", "tokens/s", "peak MiB", "oversub", "capped t/s", "admitted"
    );
    let mut i = 0;
    while i < reports.len() {
        i = batch_group(&mut s, reports, i);
    }
    s
}

/// The key of a batch-table row: everything but the batch and the cap (the stepping of a
/// run with a `steps` block included).
pub fn batch_key(r: &RunReport) -> String {
    match &r.steps {
        Some(s) => format!("{} {}", batch_key_base(r), super::steps::stepping_label(s)),
        None => batch_key_base(r),
    }
}

/// The mechanism and retention of a run: `e1 lru 25% global`, `e2:hot streaming`.
pub fn batch_key_base(r: &RunReport) -> String {
    let ret = r
        .retention
        .as_ref()
        .map(|x| {
            format!(
                "{} {} {}",
                x.evict.name(),
                given_text(&x.budget),
                x.split.name()
            )
        })
        .unwrap_or_else(|| "streaming".into());
    format!("{} {}", r.inputs.policy, ret)
}

pub fn batch_of(r: &RunReport) -> usize {
    r.retention.as_ref().map_or(1, |x| x.batch)
}

/// Append the rows of the reports from `i` on that share its key, then their N_max line;
/// returns the index after them. A run is followed by its capped twin (same key and batch)
/// under `--admission-cap`: the two make one row.
pub fn batch_group(s: &mut String, reports: &[RunReport], mut i: usize) -> usize {
    use std::fmt::Write;
    let k = batch_key(&reports[i]);
    let mut n_max: Option<usize> = None;
    let mut capped_seen = false;
    while i < reports.len() && batch_key(&reports[i]) == k {
        let r = &reports[i];
        let next_is_capped = reports.get(i + 1).is_some_and(|x| {
            x.admission.as_ref().is_some_and(|a| a.cap.is_some())
                && batch_key(x) == k
                && batch_of(x) == batch_of(r)
        });
        let capped = if next_is_capped {
            Some(&reports[i + 1])
        } else if r.admission.as_ref().is_some_and(|a| a.cap.is_some()) {
            Some(r)
        } else {
            None
        };
        if let Some((row, fits, with_cap)) = batch_row(&k, r, capped) {
            capped_seen |= with_cap;
            if fits {
                let n = batch_of(r);
                n_max = Some(n_max.map_or(n, |m: usize| m.max(n)));
            }
            let _ = writeln!(s, "{row}");
            i += if next_is_capped { 2 } else { 1 };
        } else {
            i += 1;
        }
    }
    let what = if capped_seen {
        "the largest N tried with every sequence admitted under the cap"
    } else {
        "the largest N tried with mapped memory within usable VRAM"
    };
    let _ = match n_max {
        Some(n) => writeln!(s, "  N_max = {n} ({what})"),
        None => writeln!(s, "  N_max: none of the batches tried ({what})"),
    };
    i
}

/// One row of the batch table from the uncapped run `free` and its capped twin, if any:
/// `(row, whether N fits, whether the cap was applied)`; `None` for an untimed run. N fits when
/// every sequence was admitted under the cap, or (without one) mapped memory stayed within
/// usable VRAM; a capped twin without timing (no sequence admitted) reads "does not fit".
pub fn batch_row(
    k: &str,
    free: &RunReport,
    capped: Option<&RunReport>,
) -> Option<(String, bool, bool)> {
    use std::fmt::Write;
    let (Some(t), Some(d)) = (&free.timing, &free.timing_detail) else {
        return None;
    };
    let mut row = format!(
        "{:<34} {:>4} {:>12.1} {:>12.1} {:>10}",
        k,
        batch_of(free),
        t.tokens_per_s,
        t.peak_mapped_mib,
        d.oversubscribed_page_ins
    );
    // a capped twin without timing admitted no sequence: it does not fit
    let over_cap = capped.filter(|c| c.timing.is_none());
    if let Some(a) = over_cap.and_then(|c| c.admission.as_ref()) {
        let _ = write!(
            row,
            " {:>12} {:>6}/{:<2}",
            "does not fit", a.admitted, a.requested
        );
        return Some((row, false, true));
    }
    Some(
        match capped.and_then(|c| c.timing.as_ref().zip(c.admission.as_ref())) {
            Some((ct, a)) => {
                let _ = write!(
                    row,
                    " {:>12.1} {:>6}/{:<2}",
                    ct.tokens_per_s, a.admitted, a.requested
                );
                (row, a.admitted == a.requested, true)
            }
            None => (row, t.peak_mapped_mib <= d.usable_mib, false),
        },
    )
}

/// CSV: column `policy`, then every scalar of every metric block, named by its JSON key
/// (`streaming` keys bare, keys of other blocks as `block.key`), in JSON order. Rows may carry
/// different blocks (the capped rows of `--admission-cap` add `admission`), so the header is
/// the union of all rows' columns in first-seen order, and a row lacking a column (or holding
/// null there) has an empty cell.
pub fn sweep_csv(reports: &[RunReport]) -> anyhow::Result<String> {
    let mut header: Vec<String> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = Default::default();
    let mut rows: Vec<Vec<(usize, String)>> = Vec::with_capacity(reports.len());
    for r in reports {
        let mut cols: Vec<(String, String)> = vec![("policy".into(), r.inputs.policy.clone())];
        if let serde_json::Value::Object(blocks) = serde_json::to_value(r)? {
            for (block, v) in blocks.iter().filter(|(k, _)| *k != "inputs") {
                if let serde_json::Value::Object(fields) = v {
                    for (k, x) in fields
                        .iter()
                        .filter(|(_, x)| !x.is_object() && !x.is_array())
                    {
                        let name = if block == "streaming" {
                            k.clone()
                        } else {
                            format!("{block}.{k}")
                        };
                        cols.push((name, crate::flatten::cell(x)));
                    }
                }
            }
        }
        rows.push(
            cols.into_iter()
                .map(|(name, text)| {
                    let next = header.len();
                    let i = *index.entry(name.clone()).or_insert(next);
                    if i == next {
                        header.push(name);
                    }
                    (i, text)
                })
                .collect(),
        );
    }
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header)?;
    for cells in rows {
        let mut row = vec![String::new(); header.len()];
        for (i, text) in cells {
            row[i] = text;
        }
        w.write_record(&row)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

pub fn streaming_table(reports: &[RunReport]) -> String {
    let mut s = String::new();
    if let Some(r) = reports.first() {
        let i = &r.inputs;
        let _ = writeln!(
            s,
            "{}, expert {:.3} MiB, granule {}",
            i.trace_text(),
            i.expert_mib,
            super::run::granule_text(i.granule_bytes)
        );
        let _ = writeln!(s, "streaming regime, per MoE layer per step:");
    }
    let _ = writeln!(
        s,
        "{:<16} {:>10} {:>13} {:>13} {:>9} {:>9} {:>11} {:>7} {:>9}",
        "policy",
        "units/lay",
        "resident MiB",
        "transfer MiB",
        "experts",
        "hot units",
        "selectivity",
        "waste",
        "always-on"
    );
    for r in reports {
        if let Some(m) = &r.streaming {
            let _ = writeln!(
                s,
                "{:<16} {:>10.2} {:>13.3} {:>13.3} {:>9.3} {:>9.3} {:>10.1}% {:>7.4} {:>9}",
                r.inputs.policy,
                m.units_per_layer,
                m.resident_mib_per_layer_step,
                m.transfer_mib_per_layer_step,
                m.resident_experts_per_layer_step,
                m.hot_units_per_layer_step,
                m.selectivity * 100.0,
                m.waste_factor,
                m.always_on_units
            );
        }
    }
    s
}
