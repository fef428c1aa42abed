//! `sim calibrate`.

use clap::Args;

/// Arguments of `sim calibrate`.
#[derive(Args)]
pub struct CalibrateArgs {}

pub fn run(_args: CalibrateArgs) -> anyhow::Result<()> {
    anyhow::bail!("`sim calibrate` is not built yet")
}
