//! `sim validate`: replay a trace for real on the local GPU and compare with the simulator.
//!
//! Status: the GPU check is in place; the real-GPU replay itself is not built yet (see
//! BENCHMARKS.md, issue 7), so on a GPU machine the command says so instead of printing numbers.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

/// Arguments of `sim validate`.
#[derive(Args)]
pub struct ValidateArgs {
    /// Trace to replay (the project's trace format).
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    /// Mechanism to replay, e.g. `e1`, `e4`, `region:256`, `os4k`.
    #[arg(long, value_name = "SPEC")]
    pub policy: String,
    /// Hardware profile for the prediction: a shipped name or a JSON file from `sim calibrate`.
    #[arg(long, value_name = "FILE.json")]
    pub hw: String,
    /// Print the `validation` block as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ValidateArgs) -> anyhow::Result<()> {
    kernels::check_cuda_libraries()
        .context("`sim validate` replays on a GPU and needs an NVIDIA GPU")?;
    anyhow::bail!(
        "the real-GPU replay of `sim validate` is not implemented yet (trace {}, policy {}, profile {}); \
         `sim calibrate` works on this machine",
        args.trace.display(),
        args.policy,
        args.hw
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_gpu_validate_fails_at_once() {
        if kernels::check_cuda_libraries().is_ok() {
            return; // a GPU machine: nothing to check here
        }
        let args = ValidateArgs {
            trace: "t.trace".into(),
            policy: "e1".into(),
            hw: "h200-linux".into(),
            json: true,
        };
        let err = format!("{:#}", run(args).unwrap_err());
        assert!(
            err.contains("needs an NVIDIA GPU") && err.contains("driver"),
            "{err}"
        );
    }
}
