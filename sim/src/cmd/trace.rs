//! `sim trace ...`: import, export, stats, gen.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum TraceCommand {
    /// Convert a trace from another format (onnx-genai JSON, CSV, JSONL) into trace files.
    Import(super::trace_io::ImportArgs),
    /// Statistics of a trace: popularity skew, concentration, always-on keys, temporal reuse,
    /// next-layer predictability (one streaming pass; --json for machine-readable output).
    Stats(super::trace_stats::StatsArgs),
}

pub fn run(cmd: TraceCommand) -> anyhow::Result<()> {
    match cmd {
        TraceCommand::Import(a) => super::trace_io::run_import(a),
        TraceCommand::Stats(a) => super::trace_stats::run_stats(a),
    }
}
