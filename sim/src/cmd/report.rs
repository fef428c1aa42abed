//! `sim report`: regenerate a report directory from its `results.json`, or merge the
//! directories of `sim compare --shard i/n` into the report of the whole grid.

use anyhow::{bail, Result};
use clap::Args;
use reports::Results;
use std::path::{Path, PathBuf};

/// Arguments of `sim report`.
#[derive(Args)]
pub struct ReportArgs {
    /// Report directory written by `sim compare` (it holds results.json). Its report.md,
    /// report.html, results.csv and plots/ are regenerated without rerunning any simulation.
    #[arg(
        value_name = "DIR",
        required_unless_present = "merge",
        conflicts_with = "merge"
    )]
    pub dir: Option<PathBuf>,

    /// Merge the directories of `sim compare --shard i/n` (every i from 0 to n-1, in any
    /// order) into one report; the result equals the unsharded run byte for byte. Needs --out.
    #[arg(long, value_name = "DIR", num_args = 1.., requires = "out")]
    pub merge: Vec<PathBuf>,

    /// Directory to write (default: DIR itself, regenerated in place). Replaced atomically.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(args: ReportArgs) -> Result<()> {
    let (results, out) = if args.merge.is_empty() {
        let Some(dir) = args.dir else {
            bail!("give a report directory (sim report DIR) or shards to merge (sim report --merge DIR... --out DIR)");
        };
        (load(&dir, "DIR")?, args.out.unwrap_or(dir))
    } else {
        let parts = args
            .merge
            .iter()
            .map(|d| load(d, "--merge"))
            .collect::<Result<Vec<_>>>()?;
        let out = args.out.expect("clap requires --out with --merge");
        (Results::merge(parts)?, out)
    };
    reports::write_report(&results, &out)?;
    eprintln!(
        "wrote the report of {} runs to {}",
        results.runs.len(),
        out.display()
    );
    Ok(())
}

/// The results of the report directory `dir` (given as `what`), with a hint when `dir` is not
/// one written by `sim compare`.
fn load(dir: &Path, what: &str) -> Result<Results> {
    let json = dir.join(reports::output::RESULTS_JSON);
    if !dir.is_dir() {
        bail!(
            "{what} {}: no such directory; give a report directory written by `sim compare --out DIR`",
            dir.display()
        );
    }
    if !json.is_file() {
        bail!(
            "{what} {}: holds no {}, so it is not a report directory; give a directory written by `sim compare --out DIR`",
            dir.display(),
            reports::output::RESULTS_JSON
        );
    }
    Ok(Results::load(&json)?)
}
