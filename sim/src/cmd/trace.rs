//! `sim trace ...`: import, export, stats, gen.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum TraceCommand {}

pub fn run(cmd: TraceCommand) -> anyhow::Result<()> {
    match cmd {}
}
