//! `sim run`.

use clap::Args;

/// Arguments of `sim run`.
#[derive(Args)]
pub struct RunArgs {}

pub fn run(_args: RunArgs) -> anyhow::Result<()> {
    anyhow::bail!("`sim run` is not built yet")
}
