//! `sim sweep`: many mechanisms on one trace, one row each, run in parallel.
//!
//! The grid comes from `sim::grid`: one [`RunConfig`] per mechanism spec, times the retention
//! lists (`--evict`, `--budget`, `--split`, `--batch`), nested with the spec outermost, so rows
//! stay deterministic.

use super::args_cache::CacheArgs;
use super::args_input::{emit, InputArgs};
use super::args_timing::TimingArgs;
use super::run::granule_text;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use policies::mechanisms::ChunkOrder;
use sim::engine::Admission;
use sim::grid::{self, GridError};
use sim::runner::{self, RunConfig, RunReport};
use std::fmt::Write;
use std::path::PathBuf;

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
pub struct SweepArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Comma-separated mechanism specs, e.g. e1,e2:index,e2:hot,e4:coact,region:64,os4k
    /// (same forms as `sim run --policy`). Conflicts with --e/--orders.
    #[arg(long, value_delimiter = ',', value_name = "SPECS", conflicts_with_all = ["e", "orders"])]
    pub policies: Vec<String>,

    /// Comma-separated chunk sizes N for eN specs, crossed with --orders.
    /// Default (with neither --policies nor --e): 1,2,3,4,6,8,16,32.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub e: Vec<u32>,

    /// Comma-separated chunk orders for --e: index, hot, coact. Default: index,hot,coact.
    #[arg(long, value_delimiter = ',', value_name = "ORDERS")]
    pub orders: Vec<String>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Write the output to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub timing: TimingArgs,
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
            grid::chunk_specs(sizes, &orders).map_err(|e| grid_error(e, "--e"))?,
            "--e/--orders",
        )
    };
    grid::canonical_specs(&raw).map_err(|e| grid_error(e, flag))
}

/// A grid error in the words of the flag that gave the axis.
pub fn grid_error(e: GridError, flag: &str) -> anyhow::Error {
    match e {
        GridError::ZeroChunk => {
            anyhow!("bad {flag} value 0; N must be at least 1 (e1 is one expert per commit)")
        }
        GridError::Spec { source, .. } => {
            anyhow::Error::new(source).context(format!("bad {flag} value"))
        }
        GridError::NoSpecs => anyhow!("{flag} is empty; give at least one spec, e.g. {flag} e1,e2"),
    }
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
    Ok(grid::sweep_grid(&base, specs, retention.as_deref()))
}

pub fn run(args: SweepArgs) -> Result<()> {
    let configs = super::args_timing::with_timing(run_grid(&args)?, &args.timing, args.cache.seed)?;
    let workload = args.input.workload()?;
    let mut reports = Vec::with_capacity(configs.len());
    for (cfg, r) in configs.iter().zip(runner::sweep(&configs, &workload)) {
        let mut r = r.with_context(|| format!("sweep row `{}`", cfg.policy))?;
        super::run::print_notes(&r);
        // With --admission-cap every configuration also runs without it: say so in its row.
        if args.timing.admission_cap.is_some() && r.timing.is_some() && r.admission.is_none() {
            let batch = cfg.retention.as_ref().map_or(1, |x| x.batching.batch);
            r.admission = Some(Admission::uncapped(batch));
        }
        reports.push(r);
    }
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&reports)? + "\n",
        Format::Csv => csv_text(&reports)?,
        Format::Table if reports.iter().any(|r| r.cache.is_some()) => {
            // The capped twin of a configuration has the same retention inputs: its cache row
            // would repeat the uncapped one; the batch table shows the two side by side.
            let once: Vec<RunReport> = reports
                .iter()
                .filter(|r| r.admission.as_ref().is_none_or(|a| a.cap.is_none()))
                .cloned()
                .collect();
            super::args_cache::retention_table(&once) + &super::args_timing::batch_table(&reports)
        }
        Format::Table => table(&reports) + &super::args_timing::batch_table(&reports),
    };
    emit(args.out.as_deref(), &text)
}

/// CSV: column `policy`, then every scalar of every metric block, named by its JSON key
/// (`streaming` keys bare, keys of other blocks as `block.key`), in JSON order. Rows may carry
/// different blocks (the capped rows of `--admission-cap` add `admission`), so the header is
/// the union of all rows' columns in first-seen order, and a row lacking a column (or holding
/// null there) has an empty cell.
fn csv_text(reports: &[RunReport]) -> Result<String> {
    let mut header: Vec<String> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = Default::default();
    let mut rows: Vec<Vec<(usize, String)>> = Vec::with_capacity(reports.len());
    for r in reports {
        let mut cols: Vec<(String, String)> = vec![("policy".into(), r.inputs.policy.clone())];
        if let serde_json::Value::Object(blocks) = serde_json::to_value(r)? {
            for (block, v) in blocks.iter().filter(|(k, _)| *k != "inputs") {
                if let serde_json::Value::Object(fields) = v {
                    for (k, x) in fields
                        .iter()
                        .filter(|(_, x)| !x.is_object() && !x.is_array())
                    {
                        let name = if block == "streaming" {
                            k.clone()
                        } else {
                            format!("{block}.{k}")
                        };
                        cols.push((name, reports::flatten::cell(x)));
                    }
                }
            }
        }
        rows.push(
            cols.into_iter()
                .map(|(name, text)| {
                    let next = header.len();
                    let i = *index.entry(name.clone()).or_insert(next);
                    if i == next {
                        header.push(name);
                    }
                    (i, text)
                })
                .collect(),
        );
    }
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header)?;
    for cells in rows {
        let mut row = vec![String::new(); header.len()];
        for (i, text) in cells {
            row[i] = text;
        }
        w.write_record(&row)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

fn table(reports: &[RunReport]) -> String {
    let mut s = String::new();
    if let Some(r) = reports.first() {
        let i = &r.inputs;
        let _ = writeln!(
            s,
            "{}, expert {:.3} MiB, granule {}",
            i.trace_text(),
            i.expert_mib,
            granule_text(i.granule_bytes)
        );
        let _ = writeln!(s, "streaming regime, per MoE layer per step:");
    }
    let _ = writeln!(
        s,
        "{:<16} {:>10} {:>13} {:>13} {:>9} {:>9} {:>11} {:>7} {:>9}",
        "policy",
        "units/lay",
        "resident MiB",
        "transfer MiB",
        "experts",
        "hot units",
        "selectivity",
        "waste",
        "always-on"
    );
    for r in reports {
        if let Some(m) = &r.streaming {
            let _ = writeln!(
                s,
                "{:<16} {:>10.2} {:>13.3} {:>13.3} {:>9.3} {:>9.3} {:>10.1}% {:>7.4} {:>9}",
                r.inputs.policy,
                m.units_per_layer,
                m.resident_mib_per_layer_step,
                m.transfer_mib_per_layer_step,
                m.resident_experts_per_layer_step,
                m.hot_units_per_layer_step,
                m.selectivity * 100.0,
                m.waste_factor,
                m.always_on_units
            );
        }
    }
    s
}
