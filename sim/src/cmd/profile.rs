//! `sim profile list|show|union-curve|check-churn`.

use super::args_input::{emit, emit_json};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use sim::engine::{churn, TimingConfig};
use std::sync::Arc;

#[derive(Subcommand)]
pub enum ProfileCommand {
    /// List the shipped hardware profiles.
    List(ListArgs),
    /// Print a profile: device, OS-paging capabilities, every constant with its provenance, and
    /// the expert kernels' measured union curve beside the fitted surface (where calibrated).
    Show(ShowArgs),
    /// The expert kernels' time against distinct experts at one slot count (a verify chunk of
    /// t tokens x k experts routes t x k slots): per-slot and union kernel, and the DRAM rate
    /// if only the distinct experts' bytes or every slot's reached DRAM, against the
    /// profile's streaming read.
    UnionCurve(UnionCurveArgs),
    /// Replay the published RTX 4060 per-expert paging churn (32 experts, top-8, 200 steps,
    /// budget 8, e1 + LRU, paging only) on a profile and compare with the measured table.
    CheckChurn(ChurnArgs),
}

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON (name, kind `gpu` or `host`, and description of each profile).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    /// A shipped profile name or the path of a profile JSON.
    pub name: String,
    /// A host profile (shipped: dev-box-host; or a JSON path) to combine with it, as
    /// `--hw NAME --hw-host HOST` does: the combined profile is shown.
    #[arg(long, value_name = "PROFILE")]
    pub hw_host: Option<String>,
    /// Print the profile's JSON document.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct UnionCurveArgs {
    /// Hardware profile (shipped name or JSON path) holding the expert-kernel fit.
    #[arg(long, value_name = "PROFILE")]
    pub hw: String,
    /// Routed (token, expert) slots of the launch, e.g. 60 = 6 tokens x top-10.
    #[arg(long, value_name = "N")]
    pub slots: u32,
    /// Distinct-expert counts to tabulate, comma-separated (default: the calibration's
    /// sweep at these slots, else slots / 1, 2, 3, 4, 5, 6, 10 where it divides).
    #[arg(long, value_delimiter = ',', value_name = "D,...")]
    pub distinct: Vec<u32>,
    /// Size of one expert in MiB (default: the profile's calibrated expert).
    #[arg(long, value_name = "MIB", allow_negative_numbers = true)]
    pub expert_mib: Option<f64>,
    /// Print the table as JSON.
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
        ProfileCommand::UnionCurve(a) => union_curve(a),
        ProfileCommand::CheckChurn(a) => check_churn(a),
    }
}

fn list(a: ListArgs) -> Result<()> {
    let groups = [
        (
            "gpu",
            "GPU profiles (device constants, for --hw):\n",
            profile::shipped_names(),
        ),
        (
            "host",
            "\nhost profiles (CPU, DRAM and SSD constants, for --hw-host):\n",
            profile::shipped_host_names(),
        ),
    ];
    let (mut json, mut text) = (Vec::new(), String::new());
    for (kind, heading, names) in groups {
        text += heading;
        for name in names {
            let d = profile::load(name)?.description;
            text += &format!("{name:<22} {d}\n");
            json.push(serde_json::json!({"name": name, "kind": kind, "description": d}));
        }
    }
    if a.json {
        return emit_json(&json);
    }
    emit(None, &text)
}

fn show(a: ShowArgs) -> Result<()> {
    let mut p = profile::load(&a.name)?;
    if let Some(h) = &a.hw_host {
        let host = profile::load(h).with_context(|| format!("--hw-host {h}"))?;
        p = profile::with_host(&p, &host).with_context(|| format!("--hw-host {h}"))?;
    }
    if a.json {
        emit(None, &format!("{}\n", p.to_json()))?;
        return Ok(());
    }
    emit(None, &reports::text::profile::profile_text(&p))?;
    // the measured curve beside the surface fitted on it
    if let Some(c) = &p.expert_kernel_curve {
        let distinct: Vec<u32> = c.points.iter().map(|q| q.distinct).collect();
        if let Ok(t) = union_curve_table(&p, c.slots, &distinct, None) {
            emit(
                None,
                &format!("\n{}", reports::text::union_curve::union_curve_text(&t)),
            )?;
        }
    }
    Ok(())
}

/// The union-curve table of `p`; `expert_mib` overrides the calibrated expert size.
fn union_curve_table(
    p: &profile::Profile,
    slots: u32,
    distinct: &[u32],
    expert_mib: Option<f64>,
) -> Result<reports::union_curve::UnionCurve> {
    let bytes = match expert_mib {
        Some(m) if m.is_finite() && m > 0.0 => Some((m * sim::MIB).round() as u64),
        Some(m) => anyhow::bail!("--expert-mib {m}: give a positive size in MiB"),
        None => None,
    };
    sim::kernel_surface::union_curve(p, slots, distinct, bytes)
}

fn union_curve(a: UnionCurveArgs) -> Result<()> {
    let p = profile::load(&a.hw)?;
    let distinct = if a.distinct.is_empty() {
        sim::kernel_surface::default_distinct(&p, a.slots)
    } else {
        a.distinct.clone()
    };
    let t = union_curve_table(&p, a.slots, &distinct, a.expert_mib)?;
    if a.json {
        emit_json(&t)?;
    } else {
        emit(None, &reports::text::union_curve::union_curve_text(&t))?;
    }
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
        emit_json(&rows)?;
        return Ok(());
    }
    let err = |p: f64, m: f64| 100.0 * (p - m) / m;
    let mut text = format!(
        "churn check on {} (seed {}, {} loader): predicted / measured (error)\n",
        a.hw,
        a.seed,
        if a.overlap { "overlapping" } else { "serial" }
    );
    text += &format!(
        "{:>4} {:<8} {:>18} {:>24} {:>24} {:>24}\n",
        "MiB", "routing", "page-ins", "H2D ms/step", "map/unmap ms/step", "wall ms/step"
    );
    for r in &rows {
        text += &format!(
            "{:>4} {:<8} {:>6} / {:<5} {:>+5.0}% {:>7.2} / {:<5.2} {:>+6.1}% {:>7.2} / {:<5.2} {:>+6.1}% {:>7.2} / {:<5.2} {:>+6.1}%\n",
            r.expert_mib,
            format!("{:?}", r.routing).to_lowercase(),
            r.page_ins, r.page_ins_measured, err(r.page_ins as f64, r.page_ins_measured as f64),
            r.h2d_ms, r.h2d_ms_measured, err(r.h2d_ms, r.h2d_ms_measured),
            r.map_unmap_ms, r.map_unmap_ms_measured, err(r.map_unmap_ms, r.map_unmap_ms_measured),
            r.wall_ms, r.wall_ms_measured, err(r.wall_ms, r.wall_ms_measured),
        );
    }
    text += "(the VMM constants of rtx4060-laptop-wddm were fitted on the 2 and 3 MiB rows; the 16 MiB rows are out of sample)\n";
    emit(None, &text)
}
