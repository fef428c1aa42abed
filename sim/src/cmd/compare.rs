//! `sim compare`.

use clap::Args;

/// Arguments of `sim compare`.
#[derive(Args)]
pub struct CompareArgs {}

pub fn run(_args: CompareArgs) -> anyhow::Result<()> {
    anyhow::bail!("`sim compare` is not built yet")
}
