//! `sim sweep`: many mechanisms on one trace or several, one row each (per trace), run in
//! parallel.
//!
//! The grid comes from `sim::grid`: one [`RunConfig`] per mechanism spec, times the retention
//! lists (`--evict`, `--budget`, `--split`, `--batch`), nested with the spec outermost, then
//! the stepping axis (`--verify` x `--acceptance`), so rows stay deterministic.

use super::args_cache::CacheArgs;
use super::args_input::{emit, EmbeddedFile, InputArgs};
use super::args_steps::StepArgs;
use super::args_timing::TimingArgs;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use policies::mechanisms::ChunkOrder;
use policies::PolicyKind;
use rayon::prelude::*;
use reports::text::grid as grid_text;
use reports::text::prefetch as prefetch_text;
use sim::bounded::cells::{self, Cell};
use sim::engine::Admission;
use sim::grid;
use sim::runner::{RunConfig, RunReport};
use std::path::{Path, PathBuf};

/// Output format of `sim sweep`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for reading.
    #[default]
    Table,
    /// One header row and one row per run (column names = the JSON keys).
    Csv,
    /// A JSON array with one `sim run --json` object per run.
    Json,
}

/// Arguments of `sim sweep`.
#[derive(Args)]
#[command(mut_arg("budget", |a| a.visible_alias("budgets")))]
#[command(mut_arg("trace", |a| a.help("Trace file (the `sim trace` binary format); repeat the flag for several traces, whose rows follow one another in the order given. Default: the bundled granite-3.0-1b-a400m prose trace, embedded in the binary")))]
pub struct SweepArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Comma-separated mechanism specs, e.g. e1,e2:index,e2:hot,e4:coact,region:64,os4k
    /// (same forms as `sim run --policy`). Conflicts with --e/--orders.
    #[arg(long, value_delimiter = ',', value_name = "SPECS", conflicts_with_all = ["e", "orders"])]
    pub policies: Vec<String>,

    /// Comma-separated chunk sizes N for eN specs, crossed with --orders.
    /// Default (with neither --policies nor --e): 1,2,3,4,6,8,16,32 in the streaming regime,
    /// and e1 alone with --evict.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub e: Vec<u32>,

    /// Comma-separated chunk orders for --e: index, hot, coact. Default: index,hot,coact.
    #[arg(long, value_delimiter = ',', value_name = "ORDERS")]
    pub orders: Vec<String>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Print the JSON array (`--format json`).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,

    /// Write the output to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub timing: TimingArgs,

    #[command(flatten)]
    pub steps: StepArgs,

    #[command(flatten)]
    pub threads: super::args_threads::ThreadsArgs,

    #[command(flatten)]
    pub progress: super::args_progress::ProgressArgs,
}

/// The mechanism specs asked for, canonical and without repeats (`e1:index` and `e1:hot` are
/// both `e1`; the first occurrence keeps its place).
pub fn specs(args: &SweepArgs) -> Result<Vec<String>> {
    let (raw, flag) = if !args.policies.is_empty() {
        (args.policies.clone(), "--policies")
    } else {
        let mut orders = Vec::new();
        for o in &args.orders {
            let Some(order) = ChunkOrder::parse(o.trim()) else {
                bail!("bad --orders value `{o}`; accepted: index, hot, coact");
            };
            orders.push(order);
        }
        if orders.is_empty() {
            orders = grid::DEFAULT_CHUNK_ORDERS.to_vec();
        }
        let sizes = if args.e.is_empty() {
            &grid::DEFAULT_CHUNK_SIZES[..]
        } else {
            &args.e[..]
        };
        (
            grid::chunk_specs(sizes, &orders).map_err(|e| super::errors::grid_error(e, "--e"))?,
            "--e/--orders",
        )
    };
    grid::canonical_specs(&raw).map_err(|e| super::errors::grid_error(e, flag))
}

/// The run configurations of the sweep, in output order.
pub fn run_grid(args: &SweepArgs) -> Result<Vec<RunConfig>> {
    let base = RunConfig {
        phase: args.input.phase,
        sizes: args.input.sizes(),
        ..RunConfig::default()
    };
    // With retention and no mechanism given, the grid is over e1 (one expert per unit) only.
    let retention = args.cache.for_sweep()?;
    let specs = match &retention {
        Some(_) if args.policies.is_empty() && args.e.is_empty() => vec!["e1".to_string()],
        _ => specs(args)?,
    };
    let configs = grid::sweep_grid(&base, specs, retention.as_deref());
    let steps = args.steps.points(args.input.phase, args.cache.seed)?;
    Ok(grid::with_steps(configs, &steps))
}

/// Selections (tokens x the layers' top-k) up to which a trace is small: a sweep whose traces
/// are all small runs them side by side on the worker threads instead of one after another.
/// A grid over such a trace takes a few MiB and milliseconds, so one trace at a time leaves a
/// core idle during its serial passes (the onnx-genai table of three granite prompts takes
/// 0.89 of the wall time side by side, BENCHMARKS.md); larger traces keep one grid's memory
/// at a time. 1 Mi: about 2,260 DeepSeek-V3 tokens, 53 times a granite prompt.
const SMALL_TRACE_SELECTIONS: u64 = 1 << 20;

/// Whether the trace at `path` (the embedded prose trace for `None`) is small
/// ([`SMALL_TRACE_SELECTIONS`]) by its header; a header that cannot be read is not (its run
/// reports the error).
fn is_small(path: Option<&Path>) -> bool {
    let Some(p) = path else {
        return true;
    };
    traces::read_header(p).is_ok_and(|h| selections(&h) <= SMALL_TRACE_SELECTIONS)
}

/// The router selections a trace's header declares: its tokens (both phases) times the
/// selections of one token (the MoE layers' top-k summed).
fn selections(h: &traces::Header) -> u64 {
    // saturating: a header may declare any counts
    let tokens = h.sequences.iter().fold(0u64, |n, s| {
        n.saturating_add(s.prefill_tokens)
            .saturating_add(s.decode_tokens)
    });
    let per_token = traces::KeySpace::new(&h.model).ids_per_token() as u64;
    tokens.saturating_mul(per_token)
}

/// Whether a run failed because a per-layer split was asked of units spanning layers.
fn spans_layers(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<sim::cache::CacheError>(),
            Some(sim::cache::CacheError::SplitSpansLayers { .. })
        )
    })
}

pub fn run(args: SweepArgs) -> Result<()> {
    args.timing.refuse_timeline("sweep")?;
    let configs = super::args_timing::with_timing(run_grid(&args)?, &args.timing, args.cache.seed)?;
    let traces = args.input.traces();
    let bar = args
        .progress
        .bar("sim sweep", (configs.len() * traces.len()) as u64, "runs");
    let tick = |n: u64| bar.inc(n);
    let per_trace = trace_cells(&args, &configs, &traces, &tick)?;
    let mut rows: Vec<TraceRows> = Vec::with_capacity(traces.len());
    for cells in per_trace {
        rows.push(trace_rows(&args, &configs, cells)?);
    }
    bar.finish();
    let all: Vec<RunReport> = rows.iter().flat_map(|t| t.reports.clone()).collect();
    super::args_timing::warn_over_vram(&all, args.timing.admission_cap);
    let format = if args.json { Format::Json } else { args.format };
    let text = match format {
        Format::Json => serde_json::to_string_pretty(&all)? + "\n",
        Format::Csv if rows.len() == 1 => grid_text::sweep_csv(&all)?,
        Format::Csv => with_trace_column(&grid_text::sweep_csv(&all)?, &all)?,
        // each trace's tables open with a line naming it
        Format::Table => rows
            .iter()
            .map(TraceRows::table)
            .collect::<Vec<_>>()
            .join("\n"),
    };
    emit(args.out.as_deref(), &text)
}

/// The cells of `configs` on each of `traces` (a file streamed, the untimed cells of a
/// mechanism sharing their passes; `None`: the embedded trace, loaded), in trace order; small
/// traces ([`is_small`]) side by side, the first error in trace order being the sweep's.
fn trace_cells(
    args: &SweepArgs,
    configs: &[RunConfig],
    traces: &[Option<&Path>],
    tick: &(dyn Fn(u64) + Sync),
) -> Result<Vec<Vec<Result<Cell>>>> {
    let profile = args.input.profile_trace.as_deref();
    let capped = args.timing.admission_cap.is_some();
    let cells_of = |path: &Option<&Path>| -> Result<Vec<Result<Cell>>> {
        // the trace's own steps: its recorded passes where it has them
        let mut configs = configs.to_vec();
        super::grid_passes::resolve(&mut configs, &args.cache, *path, capped)?;
        let configs = &configs[..];
        match (*path, profile) {
            (Some(trace), _) => {
                cells::run_cells(configs, &cells::Input::File { trace, profile }, tick)
            }
            // the embedded trace beside a profile file: both streamed
            (None, Some(p)) => {
                let embedded = EmbeddedFile::write(p)?;
                let trace = embedded.path();
                let mut cells =
                    cells::run_cells(configs, &cells::Input::File { trace, profile }, tick)?;
                for c in cells.iter_mut().flatten() {
                    embedded.relabel(&mut c.report);
                }
                Ok(cells)
            }
            (None, None) => {
                let workload = args.input.workload_of(None)?;
                cells::run_cells(configs, &cells::Input::Loaded(&workload), tick)
            }
        }
    };
    let side_by_side = traces.len() > 1 && traces.iter().all(|&t| is_small(t));
    args.threads.install(|| {
        if side_by_side {
            let all: Vec<_> = traces.par_iter().map(cells_of).collect();
            all.into_iter().collect()
        } else {
            traces.iter().map(cells_of).collect()
        }
    })?
}

/// The rows of one trace: every report, and whether each is at the first prefetch and
/// stepping point (the tables other than the prefetch and steps ones show those only).
struct TraceRows {
    reports: Vec<RunReport>,
    first_point: Vec<bool>,
}

impl TraceRows {
    /// The tables of these rows.
    fn table(&self) -> String {
        let shown: Vec<RunReport> = self
            .reports
            .iter()
            .zip(&self.first_point)
            .filter(|(_, &f)| f)
            .map(|(r, _)| r.clone())
            .collect();
        tables(&shown)
            + &prefetch_text::prefetch_table(&self.reports)
            + &reports::text::placement::placement_table(&self.reports)
            + &reports::text::steps::steps_table(&self.reports)
    }
}

/// The rows of one trace from its cells' `results` (in `configs` order); a cell over the
/// admission cap is a row without timing, 0 admitted, and a line on stderr saying why.
fn trace_rows(
    args: &SweepArgs,
    configs: &[RunConfig],
    results: Vec<Result<Cell>>,
) -> Result<TraceRows> {
    let mut reports = Vec::with_capacity(configs.len());
    // with a prefetch axis the tables other than the prefetch one show its first point only
    // (retention does not depend on the predictor)
    // so do they at the first stepping only (the `steps` table shows every one)
    let first = args.timing.prefetch_points()[0];
    let first_step = configs.first().map(|c| c.stepping);
    let mut first_point = Vec::with_capacity(configs.len());
    let mut skipped = std::collections::BTreeSet::new();
    let added = !args.cache.policies()?.contains(&PolicyKind::Belady);
    for (cfg, r) in configs.iter().zip(results) {
        let r = match r {
            // The default splits include per-layer, which a mechanism whose units span
            // layers cannot have: leave its per-layer rows out and say so once.
            Err(e) if args.cache.split.is_empty() && spans_layers(&e) => {
                if skipped.insert(cfg.policy.clone()) {
                    eprintln!("note: the units of `{}` span MoE layers, so its per-layer split is left out (its global split is in the table)", cfg.policy);
                }
                continue;
            }
            r => r.with_context(|| row_label(cfg, added))?,
        };
        if let Some(why) = &r.does_not_fit {
            eprintln!(
                "sweep row `{}` at batch {}: does not fit: {why}",
                grid_text::batch_key(&r.report),
                grid_text::batch_of(&r.report)
            );
        }
        let mut r = r.report;
        first_point.push(
            cfg.timing
                .as_ref()
                .is_none_or(|t| (t.predictor, t.window) == first)
                && Some(cfg.stepping) == first_step,
        );
        super::run::print_notes(&r);
        // With --admission-cap every configuration also runs without it: say so in its row.
        if args.timing.admission_cap.is_some() && r.timing.is_some() && r.admission.is_none() {
            let batch = cfg.retention.as_ref().map_or(1, |x| x.batching.batch);
            r.admission = Some(Admission::uncapped(batch));
        }
        reports.push(r);
    }
    Ok(TraceRows {
        reports,
        first_point,
    })
}

/// The context of a failed row's error: `sweep row `e1``, or with retention the cell, as the
/// tables name it (`sweep row `e1 belady 25% global``, ` at batch N` beyond 1), saying when the
/// cell is the Belady bound that sweep adds to a grid that did not ask for it (`added`).
fn row_label(cfg: &RunConfig, added: bool) -> String {
    let Some(r) = &cfg.retention else {
        return format!("sweep row `{}`", cfg.policy);
    };
    let c = &r.cache;
    let batch = match r.batching.batch {
        1 => String::new(),
        n => format!(" at batch {n}"),
    };
    let bound = if added && c.policy == PolicyKind::Belady {
        " (the Belady bound, which sweep adds to every retention grid)"
    } else {
        ""
    };
    format!(
        "sweep row `{} {} {} {}`{batch}{bound}",
        cfg.policy,
        c.policy,
        reports::sizes::given_text(&c.budget),
        c.split.name()
    )
}

/// `csv` (one header line, then one record per report of `reports`) with a first column
/// `trace` naming each record's trace, for a sweep over several traces.
fn with_trace_column(csv_text: &str, reports: &[RunReport]) -> Result<String> {
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(csv_text.as_bytes());
    let mut wr = csv::WriterBuilder::new()
        .flexible(true)
        .from_writer(Vec::new());
    let mut labels =
        std::iter::once("trace").chain(reports.iter().map(|r| r.inputs.trace.as_str()));
    for rec in rd.records() {
        let rec = rec.context("re-reading the sweep's CSV")?;
        let label = labels.next().context("more CSV records than sweep rows")?;
        wr.write_record(std::iter::once(label).chain(rec.iter()))?;
    }
    Ok(String::from_utf8(wr.into_inner()?)?)
}

/// The retention (or streaming) table and the batch table of `reports`.
fn tables(reports: &[RunReport]) -> String {
    if reports.iter().any(|r| r.cache.is_some()) {
        // The capped twin of a configuration has the same retention inputs: its cache row
        // would repeat the uncapped one; the batch table shows the two side by side.
        let once: Vec<RunReport> = reports
            .iter()
            .filter(|r| r.admission.as_ref().is_none_or(|a| a.cap.is_none()))
            .cloned()
            .collect();
        grid_text::retention_table(&once) + &grid_text::batch_table(reports)
    } else {
        grid_text::streaming_table(reports) + &grid_text::batch_table(reports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim::cache::{Batching, Budget, CacheConfig, RetentionConfig, Semantics, Split};

    fn cell(policy: PolicyKind, batch: usize) -> RunConfig {
        RunConfig {
            policy: "e2".into(),
            retention: Some(RetentionConfig {
                cache: CacheConfig {
                    policy,
                    budget: Budget::parse("25%").unwrap(),
                    split: Split::PerLayer,
                    semantics: Semantics::Group,
                    dram: None,
                    seed: 1,
                },
                batching: Batching {
                    batch,
                    ..Batching::default()
                },
                target: None,
            }),
            ..RunConfig::default()
        }
    }

    #[test]
    fn a_granite_prompt_is_small_and_a_missing_file_is_not() {
        let prose = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../traces/data/granite/prose.bin"
        );
        let h = traces::read_header(Path::new(prose)).unwrap();
        // 103 tokens (39 prompt, 64 decode) x 24 MoE layers x top-8 (`sim trace stats
        // --phase all`: 19,776 accesses)
        assert_eq!(selections(&h), 103 * 24 * 8);
        assert!(is_small(Some(Path::new(prose))));
        assert!(is_small(None));
        assert!(!is_small(Some(Path::new("/nonexistent/trace.bin"))));
    }

    #[test]
    fn a_failed_row_names_its_cell_and_the_added_bound() {
        let streaming = RunConfig {
            policy: "e2".into(),
            ..RunConfig::default()
        };
        assert_eq!(row_label(&streaming, true), "sweep row `e2`");
        assert_eq!(
            row_label(&cell(PolicyKind::Lru, 1), true),
            "sweep row `e2 lru 25% per-layer`"
        );
        assert_eq!(
            row_label(&cell(PolicyKind::Belady, 4), true),
            "sweep row `e2 belady 25% per-layer` at batch 4 (the Belady bound, which sweep \
             adds to every retention grid)"
        );
        // asked for: no remark
        assert_eq!(
            row_label(&cell(PolicyKind::Belady, 1), false),
            "sweep row `e2 belady 25% per-layer`"
        );
    }
}
