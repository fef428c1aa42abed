//! The text of the union-curve table (`sim profile union-curve`, and the curve section of
//! `sim profile show`).

use crate::union_curve::UnionCurve;
use std::fmt::Write;

/// The table: per distinct-expert count, the per-slot and union kernel times (the surface's,
/// with the measured value where the profile has it) and the DRAM rates the per-slot time
/// implies if only the distinct experts' bytes, or every slot's, reached DRAM.
pub fn union_curve_text(c: &UnionCurve) -> String {
    let mut s = String::new();
    let kernels = if c.per_slot_kernel.is_empty() {
        String::new()
    } else {
        format!(
            "; per-slot kernel {}, union kernel {}",
            c.per_slot_kernel,
            if c.union_kernel.is_empty() {
                "-"
            } else {
                &c.union_kernel
            }
        )
    };
    let _ = writeln!(
        s,
        "expert kernels on {} at {} slots of {} B experts{kernels}:",
        c.profile, c.slots, c.expert_bytes
    );
    let ceiling = c
        .stream_read_bytes_per_us
        .map_or("absent".to_string(), |b| format!("{:.0} GB/s", b / 1e3));
    let _ = writeln!(
        s,
        "(µs: the fitted surface, measured in brackets; GB/s: distinct or all slots' bytes / per-slot time; streaming read {ceiling})"
    );
    let _ = writeln!(
        s,
        "{:>8} {:>20} {:>20} {:>16} {:>16}   physically possible",
        "distinct", "per-slot µs", "union µs", "distinct GB/s", "all-slot GB/s"
    );
    for r in &c.rows {
        let t = |fit: Option<f64>, m: Option<f64>| match (fit, m) {
            (Some(f), Some(m)) => format!("{f:.1} [{m:.1}]"),
            (Some(f), None) => format!("{f:.1}"),
            (None, Some(m)) => format!("[{m:.1}]"),
            (None, None) => "-".into(),
        };
        let possible = match (r.distinct_possible, r.slot_possible) {
            (Some(true), Some(true)) => "both",
            (Some(true), Some(false)) => "distinct only (the L2 serves the repeats)",
            (Some(false), _) => "neither (below the kernel's fixed part?)",
            _ => "unknown (no stream_read_bandwidth)",
        };
        let _ = writeln!(
            s,
            "{:>8} {:>20} {:>20} {:>16.0} {:>16.0}   {possible}",
            r.distinct,
            t(Some(r.per_slot_us), r.per_slot_measured_us),
            t(r.union_us, r.union_measured_us),
            r.distinct_bytes_per_us / 1e3,
            r.slot_bytes_per_us / 1e3
        );
    }
    s
}
