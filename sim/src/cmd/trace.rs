//! `sim trace ...`: import, export, stats, gen.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum TraceCommand {
    /// Convert a trace from another format (onnx-genai JSON, CSV, JSONL, vLLM, SGLang, llama.cpp)
    /// into trace files.
    Import(Box<super::trace_io::ImportArgs>),
    /// Export a trace to CSV rows or to libCacheSim's oracleGeneral binary format.
    Export(super::trace_io::ExportArgs),
    /// Statistics of a trace: popularity skew, concentration, always-on keys, temporal reuse,
    /// next-layer predictability (one streaming pass; --json for machine-readable output).
    Stats(super::trace_stats::StatsArgs),
    /// Write a labelled synthetic trace: model presets or custom geometry, Zipf popularity
    /// skew, temporal locality, cross-layer correlation, or skew/locality fitted to a real trace.
    Gen(super::trace_gen::GenArgs),
}

pub fn run(cmd: TraceCommand) -> anyhow::Result<()> {
    match cmd {
        TraceCommand::Import(a) => super::trace_io::run_import(*a),
        TraceCommand::Export(a) => super::trace_io::run_export(a),
        TraceCommand::Stats(a) => super::trace_stats::run_stats(a),
        TraceCommand::Gen(a) => super::trace_gen::run_gen(a),
    }
}
