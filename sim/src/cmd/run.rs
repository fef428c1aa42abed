//! `sim run`: one mechanism on one trace.

use super::args_cache::CacheArgs;
use super::args_input::{emit, InputArgs};
use super::args_timing::TimingArgs;
use anyhow::Result;
use clap::Args;
use sim::runner::{self, RunConfig, RunReport};
use std::fmt::Write;
use std::path::PathBuf;

/// Arguments of `sim run`.
#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub input: InputArgs,

    #[arg(long, default_value = "e2", value_name = "SPEC",
          help = format!("Residency mechanism, one of: {}", policies::mechanisms::forms_help()))]
    pub policy: String,

    /// Print one JSON object (inputs echo and metric blocks) instead of the summary.
    #[arg(long)]
    pub json: bool,

    /// Write the output to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub timing: TimingArgs,
}

pub fn run(args: RunArgs) -> Result<()> {
    let workload = args.input.workload()?;
    let cfg = RunConfig {
        policy: args.policy.clone(),
        phase: args.input.phase,
        sizes: args.input.sizes(),
        retention: args.cache.for_run()?,
        timing: args.timing.for_run(args.cache.seed)?,
    };
    let report = runner::run(&cfg, &workload)?;
    print_notes(&report);
    let text = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        summary(&report)
            + &super::args_cache::retention_summary(&report)
            + &super::args_timing::timing_summary(&report)
    };
    emit(args.out.as_deref(), &text)
}

/// The human-readable summary of a run.
fn summary(r: &RunReport) -> String {
    let i = &r.inputs;
    let mut s = String::new();
    let dtype = i.dtype.map_or("--expert-mib".to_string(), |d| {
        format!("{d:?}").to_lowercase()
    });
    let _ = writeln!(s, "trace     {}", i.trace_text());
    let _ = writeln!(
        s,
        "policy    {}   expert {:.3} MiB ({})   granule {}   profile trace {}",
        i.policy,
        i.expert_mib,
        dtype,
        granule_text(i.granule_bytes),
        i.profile_trace
    );
    if let Some(m) = &r.streaming {
        s += &streaming_summary(m);
    }
    s
}

/// The streaming-regime section of a run summary: per MoE layer per step, then the whole model.
fn streaming_summary(m: &sim::streaming::StreamingMetrics) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nstreaming regime (nothing retained across steps), per MoE layer per step:"
    );
    let rows = [
        (
            "resident",
            format!("{:.3} MiB", m.resident_mib_per_layer_step),
            "committed bytes of the hot units",
        ),
        (
            "transfer",
            format!("{:.3} MiB", m.transfer_mib_per_layer_step),
            "useful bytes of the hot units (H2D)",
        ),
        (
            "resident experts",
            format!("{:.3}", m.resident_experts_per_layer_step),
            "experts inside the hot units",
        ),
        (
            "hot units",
            format!("{:.3}", m.hot_units_per_layer_step),
            "units holding a selected expert",
        ),
        (
            "selectivity",
            format!("{:.1} %", m.selectivity * 100.0),
            "resident experts / top-k",
        ),
    ];
    write_rows(&mut s, rows);
    let _ = writeln!(s, "whole model:");
    let rows = [
        (
            "units per layer",
            format!("{:.3}", m.units_per_layer),
            "commit units / MoE layers",
        ),
        (
            "always-on units",
            m.always_on_units.to_string(),
            "units hot in every step",
        ),
        (
            "waste factor",
            format!("{:.4}", m.waste_factor),
            "committed / useful bytes",
        ),
        (
            "committed",
            format!("{:.1} MiB", m.committed_mib_total),
            "all units",
        ),
        (
            "useful",
            format!("{:.1} MiB", m.useful_mib_total),
            "the expert bank",
        ),
    ];
    write_rows(&mut s, rows);
    s
}

/// Append summary rows `(name, value, note)` in the aligned layout every summary of `sim run`
/// uses: name left in 17 columns, value right in 12, then the note.
pub fn write_rows<'a>(s: &mut String, rows: impl IntoIterator<Item = (&'a str, String, &'a str)>) {
    for (k, v, note) in rows {
        let _ = writeln!(s, "  {k:<17} {v:>12}   {note}");
    }
}

/// Print a run's notes (files written, what was left out) to stderr, one line each.
pub fn print_notes(r: &RunReport) {
    for note in &r.notes {
        eprintln!("{note}");
    }
}

/// A granule or page size in the unit that reads best: `2 MiB`, `64 KiB`.
pub fn granule_text(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes as f64 / 1024.0)
    }
}
