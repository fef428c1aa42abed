//! `sim profile show`'s text: a profile's device, OS-paging capabilities and every constant
//! with its unit, range, provenance and domain.

use crate::metrics::{count, fmt};
use profile::{ConstantName, Profile, Provenance};
use std::fmt::Write;

/// The device line: GPU, OS, and the driver, CUDA version and link where the profile records
/// them (a host profile has no driver or CUDA version, so they are left out, not printed
/// empty).
fn device_line(d: &profile::Device) -> String {
    let mut parts = vec![d.gpu.clone(), d.os.clone()];
    if !d.driver.is_empty() {
        parts.push(format!("driver {}", d.driver));
    }
    if !d.cuda.is_empty() {
        parts.push(format!("CUDA {}", d.cuda));
    }
    parts.extend(d.link.clone());
    format!("device    {}", parts.join(" | "))
}

/// The human-readable description of profile `p`: header, device, OS paging, every constant
/// in [`ConstantName::ALL`] order (`absent` where not measured; fractions rounded for
/// reading) and the notes.
pub fn profile_text(p: &Profile) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} (schema {}): {}",
        p.name, p.schema_version, p.description
    );
    let _ = writeln!(s, "{}", device_line(&p.device));
    if let Some(o) = &p.os_paging {
        let _ = writeln!(
            s,
            "os paging prefetch hints: {} ({})",
            if o.prefetch_hints { "yes" } else { "no" },
            o.note
        );
    }
    let _ = writeln!(
        s,
        "\nconstants (absent = not measured; fractions rounded for reading, --json has every digit):"
    );
    let width = ConstantName::ALL
        .iter()
        .map(|n| n.as_str().len())
        .max()
        .unwrap_or(0);
    for &n in ConstantName::ALL {
        match p.constant(n) {
            Some(c) => {
                let range = match (c.min, c.max) {
                    (Some(lo), Some(hi)) => {
                        format!(" [{}-{}]", fmt_like(lo, c.value), fmt_like(hi, c.value))
                    }
                    _ => String::new(),
                };
                let line = format!(
                    "  {:<width$} {:>10} {:<5}{range}",
                    n.as_str(),
                    fmt(c.value),
                    c.unit
                );
                let _ = writeln!(
                    s,
                    "{}\n      {}",
                    line.trim_end(),
                    provenance_text(&c.provenance)
                );
                if let Some(d) = &c.domain {
                    let _ = writeln!(s, "      domain: {}", domain_text(d));
                }
            }
            None => {
                let _ = writeln!(s, "  {:<width$} {:>10}", n.as_str(), "absent");
            }
        }
    }
    if !p.notes.is_empty() {
        let _ = writeln!(s, "\nnotes:");
        for n in &p.notes {
            let _ = writeln!(s, "  - {n}");
        }
    }
    s
}

/// A constant's domain in one line: each regressor's measured range, `unknown (why)`, or
/// `no regressor` for a constant measured as one figure (a size, a per-call time).
pub fn domain_text(d: &profile::Domain) -> String {
    match d.describe() {
        t if t.is_empty() => "no regressor (one figure, holds as measured)".to_string(),
        t => t,
    }
}

/// Where a constant came from, in one line.
pub fn provenance_text(p: &Provenance) -> String {
    match p {
        Provenance::Measured(m) => {
            let mut s = format!(
                "measured {} ({}, driver {}, CUDA {}): {}",
                m.date, m.gpu, m.driver, m.cuda, m.method
            );
            if let Some(r) = m.repetitions {
                let _ = write!(s, "; {}", count(u64::from(r), "repetition"));
            }
            if let Some(sp) = m.spread {
                let _ = write!(s, "; spread {:.0}%", sp * 100.0);
            }
            if let Some(st) = &m.statistic {
                let _ = write!(s, "; {st}");
            }
            s
        }
        Provenance::Derived { from, method } => format!("derived from {from}: {method}"),
        Provenance::Assumed { reason } => format!("assumed: {reason}"),
    }
}

/// A range end as [`fmt`] writes it, but with the value's decimals when `fmt` would drop them
/// for a whole number (`[5.20-6.00]` beside 5.60, not `[5.20-6]`).
fn fmt_like(x: f64, value: f64) -> String {
    let text = fmt(x);
    let shown = fmt(value);
    match shown.split_once('.') {
        Some((_, decimals)) if !text.contains(['.', 'e']) && !decimals.contains('e') => {
            format!("{x:.*}", decimals.len())
        }
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_line_leaves_out_what_the_profile_does_not_record() {
        let gpu = profile::load("h200-linux").unwrap();
        assert_eq!(
            device_line(&gpu.device),
            "device    NVIDIA H200 | linux | driver 580.159.04 | CUDA 13.0"
        );
        let host = profile::load("dev-box-host").unwrap();
        let line = device_line(&host.device);
        assert!(!line.contains("driver") && !line.contains("CUDA"), "{line}");
        assert!(
            line.starts_with("device    none (host profile) | linux"),
            "{line}"
        );
    }
}
