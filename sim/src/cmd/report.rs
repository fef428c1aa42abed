//! `sim report`: regenerate a report directory from its `results.json`, or merge the
//! directories of `sim compare --shard i/n` into the report of the whole grid.

use super::args_input::emit_json;
use anyhow::{bail, Context, Result};
use clap::Args;
use reports::{Results, RunCoords, RunEntry, Shard};
use serde::Serialize;
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

    /// Print what was written as one JSON object on stdout: the directory (`out`), its
    /// files, whether an earlier report was replaced, the run counts and shard, and per run
    /// its grid coordinates and key figures (`runs`, as in `sim compare --json`).
    #[arg(long)]
    pub json: bool,
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
    let replaced = is_report_dir(&out);
    reports::write_report(&results, &out)?;
    eprintln!(
        "wrote the report of {} runs to {}",
        results.runs.len(),
        out.display()
    );
    if args.json {
        print_summary(&results, &out, replaced)?;
    }
    Ok(())
}

/// Whether `dir` holds a report already (writing there replaces it).
pub(super) fn is_report_dir(dir: &Path) -> bool {
    dir.join(reports::output::RESULTS_JSON).is_file()
}

/// What `--json` of `sim compare` and `sim report` prints once a report directory is written.
#[derive(Serialize)]
struct ReportSummary<'a> {
    /// The report directory, as given.
    out: String,
    /// Its files, relative to `out`: the four fixed ones, then `plots/*.svg` in name order.
    files: Vec<String>,
    /// Whether an earlier report in `out` was replaced.
    replaced: bool,
    /// Runs in this directory (those of its shard, for `sim compare --shard`).
    runs_written: usize,
    /// Runs of the whole grid.
    total_runs: usize,
    /// The slice of the grid this directory holds; absent for a whole grid.
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<Shard>,
    /// One entry per run, in results.json order.
    runs: Vec<RunSummary<'a>>,
}

/// One run of a [`ReportSummary`]: where it sits in the grid and its key figures, each
/// copied from the run's block in results.json (absent when the run has no such block).
#[derive(Serialize)]
struct RunSummary<'a> {
    /// The run's index in the grid.
    run: usize,
    /// Its coordinates (`grid` in results.json).
    grid: &'a RunCoords,
    /// Why the cell does not fit under the admission cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    does_not_fit: Option<&'a str>,
    /// `streaming.resident_mib_per_layer_step`: committed MiB of the hot units per layer step.
    #[serde(skip_serializing_if = "Option::is_none")]
    resident_mib_per_layer_step: Option<f64>,
    /// `cache.page_ins_per_token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    page_ins_per_token: Option<f64>,
    /// `cache.miss_rate`: page-ins / accesses.
    #[serde(skip_serializing_if = "Option::is_none")]
    miss_rate: Option<f64>,
    /// `cache.bytes_per_token`: useful bytes paged in per token.
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_per_token: Option<f64>,
    /// `timing.tokens_per_s`, simulated.
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_per_s: Option<f64>,
    /// `timing.step_ms_p50`, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    step_ms_p50: Option<f64>,
    /// `timing.peak_mapped_mib`: largest mapped physical memory, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_mapped_mib: Option<f64>,
}

impl<'a> RunSummary<'a> {
    fn of(r: &'a RunEntry) -> Self {
        let (cache, timing) = (r.cache(), r.timing());
        RunSummary {
            run: r.run,
            grid: &r.grid,
            does_not_fit: r.does_not_fit.as_deref(),
            resident_mib_per_layer_step: r.streaming().map(|s| s.resident_mib_per_layer_step),
            page_ins_per_token: cache.map(|c| c.page_ins_per_token),
            miss_rate: cache.map(|c| c.miss_rate),
            bytes_per_token: cache.map(|c| c.bytes_per_token),
            tokens_per_s: timing.map(|t| t.tokens_per_s),
            step_ms_p50: timing.map(|t| t.step_ms_p50),
            peak_mapped_mib: timing.map(|t| t.peak_mapped_mib),
        }
    }
}

/// Print the `--json` summary of the report directory `out` just written from `results`.
pub(super) fn print_summary(results: &Results, out: &Path, replaced: bool) -> Result<()> {
    use reports::output::{PLOTS_DIR, REPORT_HTML, REPORT_MD, RESULTS_CSV, RESULTS_JSON};
    let mut files: Vec<String> = [REPORT_MD, REPORT_HTML, RESULTS_JSON, RESULTS_CSV]
        .map(String::from)
        .to_vec();
    let plots = out.join(PLOTS_DIR);
    let mut svgs = Vec::new();
    for e in std::fs::read_dir(&plots).with_context(|| format!("listing {}", plots.display()))? {
        svgs.push(format!("{PLOTS_DIR}/{}", e?.file_name().to_string_lossy()));
    }
    svgs.sort();
    files.extend(svgs);
    let summary = ReportSummary {
        out: out.display().to_string(),
        files,
        replaced,
        runs_written: results.runs.len(),
        total_runs: results.total_runs,
        shard: results.shard,
        runs: results.runs.iter().map(RunSummary::of).collect(),
    };
    emit_json(&summary)?;
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
