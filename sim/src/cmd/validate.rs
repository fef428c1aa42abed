//! `sim validate`.

use clap::Args;

/// Arguments of `sim validate`.
#[derive(Args)]
pub struct ValidateArgs {}

pub fn run(_args: ValidateArgs) -> anyhow::Result<()> {
    anyhow::bail!("`sim validate` is not built yet")
}
