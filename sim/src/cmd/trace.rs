//! `sim trace ...`: import, export, stats, gen.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum TraceCommand {
    /// Convert a trace from another format (onnx-genai JSON, CSV, JSONL) into trace files.
    Import(super::trace_io::ImportArgs),
}

pub fn run(cmd: TraceCommand) -> anyhow::Result<()> {
    match cmd {
        TraceCommand::Import(a) => super::trace_io::run_import(a),
    }
}
