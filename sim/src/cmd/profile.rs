//! `sim profile list|show|check-churn`.

use anyhow::Result;
use clap::{Args, Subcommand};
use sim::engine::{churn, TimingConfig};
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

fn show(a: ShowArgs) -> Result<()> {
    let p = profile::load(&a.name)?;
    if a.json {
        println!("{}", p.to_json());
        return Ok(());
    }
    print!("{}", reports::text::profile::profile_text(&p));
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
