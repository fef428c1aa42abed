//! `sim profile list|show|check-churn`.

use anyhow::Result;
use clap::{Args, Subcommand};
use profile::{ConstantName, Provenance};
use reports::metrics::{count, fmt};
use sim::engine::{churn, TimingConfig};
use std::fmt::Write;
use std::sync::Arc;

#[derive(Subcommand)]
pub enum ProfileCommand {
    /// List the shipped hardware profiles.
    List(ListArgs),
    /// Print a profile: device, OS-paging capabilities and every constant with its provenance.
    Show(ShowArgs),
    /// Replay the published RTX 4060 per-expert paging churn (32 experts, top-8, 200 steps,
    /// budget 8, e1 + LRU, paging only) on a profile and compare with the measured table.
    CheckChurn(ChurnArgs),
}

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON (name and description of each profile).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    /// A shipped profile name or the path of a profile JSON.
    pub name: String,
    /// Print the profile's JSON document.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ChurnArgs {
    /// Hardware profile to check (shipped name or JSON path).
    #[arg(long, default_value = "rtx4060-laptop-wddm", value_name = "PROFILE")]
    pub hw: String,
    /// Seed of the generated routing (PCG).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Let VMM calls overlap the previous copy (default: one loader thread, as in the harness).
    #[arg(long)]
    pub overlap: bool,
    /// Eviction semantics of the replay: access (evict after every access, as the harness
    /// did: it reproduces the measured page-in counts) or group.
    #[arg(long, default_value = "access", value_parser = ["access", "group"])]
    pub semantics: String,
    /// Print JSON rows.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: ProfileCommand) -> Result<()> {
    match cmd {
        ProfileCommand::List(a) => list(a),
        ProfileCommand::Show(a) => show(a),
        ProfileCommand::CheckChurn(a) => check_churn(a),
    }
}

fn list(a: ListArgs) -> Result<()> {
    let mut rows = Vec::new();
    for name in profile::shipped_names() {
        let p = profile::load(name)?;
        rows.push((name, p.description));
    }
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(n, d)| serde_json::json!({"name": n, "description": d}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (n, d) in rows {
            println!("{n:<22} {d}");
        }
    }
    Ok(())
}

fn provenance_text(p: &Provenance) -> String {
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

fn show(a: ShowArgs) -> Result<()> {
    let p = profile::load(&a.name)?;
    if a.json {
        println!("{}", p.to_json());
        return Ok(());
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} (schema {}): {}",
        p.name, p.schema_version, p.description
    );
    let d = &p.device;
    let _ = writeln!(
        s,
        "device    {} | {} | driver {} | CUDA {}{}",
        d.gpu,
        d.os,
        d.driver,
        d.cuda,
        d.link
            .as_ref()
            .map(|l| format!(" | {l}"))
            .unwrap_or_default()
    );
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
    print!("{s}");
    Ok(())
}

fn check_churn(a: ChurnArgs) -> Result<()> {
    let semantics = if a.semantics == "group" {
        sim::cache::Semantics::Group
    } else {
        sim::cache::Semantics::Access
    };
    let hw = TimingConfig::new(a.hw.clone(), Arc::new(profile::load(&a.hw)?));
    let rows = churn::check_churn(&hw, a.seed, !a.overlap, semantics)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let err = |p: f64, m: f64| 100.0 * (p - m) / m;
    println!(
        "churn check on {} (seed {}, {} loader): predicted / measured (error)",
        a.hw,
        a.seed,
        if a.overlap { "overlapping" } else { "serial" }
    );
    println!(
        "{:>4} {:<8} {:>18} {:>24} {:>24} {:>24}",
        "MiB", "routing", "page-ins", "H2D ms/step", "map/unmap ms/step", "wall ms/step"
    );
    for r in &rows {
        println!(
            "{:>4} {:<8} {:>6} / {:<5} {:>+5.0}% {:>7.2} / {:<5.2} {:>+6.1}% {:>7.2} / {:<5.2} {:>+6.1}% {:>7.2} / {:<5.2} {:>+6.1}%",
            r.expert_mib,
            format!("{:?}", r.routing).to_lowercase(),
            r.page_ins, r.page_ins_measured, err(r.page_ins as f64, r.page_ins_measured as f64),
            r.h2d_ms, r.h2d_ms_measured, err(r.h2d_ms, r.h2d_ms_measured),
            r.map_unmap_ms, r.map_unmap_ms_measured, err(r.map_unmap_ms, r.map_unmap_ms_measured),
            r.wall_ms, r.wall_ms_measured, err(r.wall_ms, r.wall_ms_measured),
        );
    }
    println!("(the VMM constants of rtx4060-laptop-wddm were fitted on the 2 and 3 MiB rows; the 16 MiB rows are out of sample)");
    Ok(())
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
