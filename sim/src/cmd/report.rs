//! `sim report`.

use clap::Args;

/// Arguments of `sim report`.
#[derive(Args)]
pub struct ReportArgs {}

pub fn run(_args: ReportArgs) -> anyhow::Result<()> {
    anyhow::bail!("`sim report` is not built yet")
}
