//! `sim profile list|show`.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum ProfileCommand {}

pub fn run(cmd: ProfileCommand) -> anyhow::Result<()> {
    match cmd {}
}
