//! `sim sweep`.

use clap::Args;

/// Arguments of `sim sweep`.
#[derive(Args)]
pub struct SweepArgs {}

pub fn run(_args: SweepArgs) -> anyhow::Result<()> {
    anyhow::bail!("`sim sweep` is not built yet")
}
