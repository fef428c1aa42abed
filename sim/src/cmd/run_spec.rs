//! `sim run --spec FILE` and `--dump-spec`: a run written as an `engine::RunSpec` (JSON). The
//! spec stands for the flags that describe the run (the mechanism, the phase, retention); the
//! input, output and progress flags go beside it, and a describing flag given with `--spec` is
//! refused rather than merged, so that a spec file alone says what ran.

use super::run::RunArgs;
use anyhow::{bail, Context, Result};
use sim::{RunConfig, RunSpec};

/// The run configuration of `args`: its `--spec` file's when given (refused beside a flag
/// that describes the run), else its flags'.
pub fn config(args: &RunArgs) -> Result<RunConfig> {
    let flags = super::run::config(args)?;
    let Some(path) = &args.spec else {
        return Ok(flags);
    };
    if flags != RunConfig::default() {
        bail!(
            "--spec {} describes the run: leave out the flags that set it (--policy, --phase, \
             --evict, --budget, --hw, ...); only the trace, output and progress flags go beside it",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--spec {}: reading the file", path.display()))?;
    let spec: RunSpec = serde_json::from_str(&text).with_context(|| {
        format!(
            "--spec {}: not a run spec (print one with --dump-spec)",
            path.display()
        )
    })?;
    Ok(spec.config())
}

/// The spec of `cfg` as `--dump-spec` prints it (pretty JSON); an error naming what of the
/// run a spec does not hold yet.
pub fn dump(cfg: &RunConfig) -> Result<String> {
    let spec = RunSpec::of(cfg).context("--dump-spec")?;
    Ok(serde_json::to_string_pretty(&spec)? + "\n")
}
