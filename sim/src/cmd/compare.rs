//! `sim compare`: run the grid traces x mechanisms x (policies x budgets x batches) through the
//! run library in parallel and write a report directory (see the `reports` crate).

use super::args_cache::CacheArgs;
use super::args_input::{dtype_parser, phase_parser};
use super::args_steps::StepArgs;
use super::args_timing::TimingArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use policies::mechanisms::SizeOptions;
use reports::{Results, RunEntry, Shard, TraceInfo};
use serde_json::{json, Value};
use sim::bounded::cells::{self, Cell};
use sim::cache::{RetentionConfig, Split};
use sim::engine::cpu::CpuExperts;
use sim::engine::TimingConfig;
use sim::grid::{self, CompareAxes, ComparePoint};
use sim::runner::{self, RunConfig};
use std::path::PathBuf;
use traces::{DType, Header, KeySpace, PhaseSel};

/// Arguments of `sim compare`.
#[derive(Args)]
#[command(mut_arg("budget", |a| a.visible_alias("budgets")))]
pub struct CompareArgs {
    /// Trace to compare on; repeat the flag for several traces (e.g. one per workload). With
    /// several traces, cross-trace stability runs are added (see --no-cross-trace).
    #[arg(long = "trace", value_name = "FILE", required = true)]
    pub traces: Vec<PathBuf>,

    #[arg(
        long,
        help = format!(
            "Mechanisms to compare, comma-separated: {} (as `sim run --policy`). Each gets a \
             streaming-regime run (nothing retained), and one run per policy x budget x split x \
             batch when --evict is given (Belady/MIN is always added as the bound; --split \
             defaults to global here)",
            policies::mechanisms::forms_short()
        ),
        value_delimiter = ',',
        value_name = "SPECS",
        default_value = "e1,e2:index,e2:hot,e4:hot,region:64,os4k"
    )]
    pub policies: Vec<String>,

    /// Phases of the traces to replay: decode, prefill or all.
    #[arg(long, default_value = "decode", value_name = "PHASE",
          value_parser = phase_parser())]
    pub phase: PhaseSel,

    /// Size of one expert in MiB (may be fractional), instead of deriving it from the trace
    /// header's geometry. Conflicts with --dtype. Same as `sim run --expert-mib`.
    #[arg(
        long,
        value_name = "MIB",
        conflicts_with = "dtype",
        allow_negative_numbers = true
    )]
    pub expert_mib: Option<f64>,

    /// Weight dtype for deriving the expert size from the header geometry: bf16 (default),
    /// fp16, fp8, int4, int4-noscale, nvfp4, mxfp4. Same as `sim run --dtype`. Several,
    /// comma-separated (`int4,bf16`), make a grid axis: every run once per dtype, each named
    /// by its dtype in the results and the report.
    #[arg(long, value_name = "DTYPE", value_delimiter = ',',
          value_parser = dtype_parser())]
    pub dtype: Vec<DType>,

    /// VMM allocation granule in MiB (default 2). Same as `sim run --granule-mib`.
    #[arg(long, value_name = "MIB", allow_negative_numbers = true)]
    pub granule_mib: Option<f64>,

    /// Leave out the cross-trace stability runs (packing or pinning chosen on one trace and
    /// evaluated on each other trace).
    #[arg(long)]
    pub no_cross_trace: bool,

    /// Report directory to write (created; a previous report there is replaced atomically).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Run only slice I of N of the grid (0-based: runs whose index r has r % N == I), for job
    /// arrays; merge the slices with `sim report --merge DIR... --out DIR`.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,

    #[command(flatten)]
    pub threads: super::args_threads::ThreadsArgs,

    /// Print what was written as one JSON object on stdout: the report directory (`out`), its
    /// files, whether an earlier report was replaced, the run counts and shard, and per run
    /// its grid coordinates with its key figures (resident MiB per layer step, page-ins per
    /// token, miss rate, bytes per token, tokens/s, step p50, peak mapped MiB, each where the
    /// run has it). Notes and progress stay on stderr.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub progress: super::args_progress::ProgressArgs,

    /// Retention grid: --evict, --budget (alias --budgets), --split, --batch lists as in
    /// `sim sweep`, and the shared --semantics, --dram, --queue, --schedule, --seed.
    #[command(flatten)]
    pub cache: CacheArgs,

    /// Timing: --hw PROFILE turns on the discrete-event engine for every run (a `timing`
    /// block: step latency, tokens/s, time split), with the shared compute, prefetch and
    /// admission-cap options of `sim run`.
    #[command(flatten)]
    pub timing: TimingArgs,

    /// Tokens per step: --verify and --acceptance lists (an axis, innermost), --accepted,
    /// --prefill-chunk, as in `sim sweep`.
    #[command(flatten)]
    pub steps: StepArgs,
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    Shard::parse(s)
}

/// The retention grid, ordered batch > budget > split > policy (Belady first), so a
/// mechanism's runs at one budget sit together.
fn retention_grid(args: &CompareArgs) -> Result<Vec<RetentionConfig>> {
    let mut cache = args.cache.clone();
    if cache.split.is_empty() {
        cache.split = vec![Split::Global];
    }
    let mut grid = cache.for_sweep()?.unwrap_or_default();
    let pos = |v: &[String], x: &String| v.iter().position(|y| y == x).unwrap_or(usize::MAX);
    let budgets: Vec<String> = cache.budget.iter().map(|b| b.to_string()).collect();
    let splits: Vec<String> = cache.split.iter().map(|s| s.name().to_string()).collect();
    // stable: the policy order of `for_sweep` stays the innermost
    grid.sort_by_key(|r| {
        (
            r.batching.batch,
            pos(&budgets, &r.cache.budget.to_string()),
            pos(&splits, &r.cache.split.name().to_string()),
        )
    });
    Ok(grid)
}

/// The run library's configuration of one grid point.
// `..Default::default()` so that fields the run library adds later keep this compiling.
#[allow(clippy::needless_update)]
fn config(args: &CompareArgs, p: &ComparePoint, timing: &Option<TimingConfig>) -> RunConfig {
    RunConfig {
        policy: p.coords.mechanism.clone(),
        phase: args.phase,
        sizes: SizeOptions {
            expert_mib: args.expert_mib,
            dtype: match &p.coords.dtype {
                Some(d) => DType::parse(d),
                None => args.dtype.first().copied(),
            },
            granule_mib: args.granule_mib,
        },
        retention: p.retention.clone(),
        timing: timing.as_ref().map(|t| {
            let t = super::args_timing::with_prefetch(t, p.prefetch);
            super::args_timing::with_placement(&t, p.coords.cpu_experts.as_deref())
        }),
        stepping: p.stepping,
        ..RunConfig::default()
    }
}

pub fn run(args: CompareArgs) -> Result<()> {
    let (headers, names) = read_headers(&args.traces)?;
    for m in &args.policies {
        runner::parse_policy(m, "--policies")?;
    }
    let retention = retention_grid(&args)?;
    args.timing.refuse_timeline("compare")?;
    // the report draws each run's step-latency CDF from every step
    let timing = args
        .timing
        .for_grid(args.cache.seed)?
        .map(|t| TimingConfig {
            step_latencies: true,
            ..t
        });
    let prefetch = args.timing.prefetch_points();
    let steps = args.steps.points(args.phase, args.cache.seed)?;
    let profile = match &timing {
        Some(t) => Some(serde_json::to_value(&*t.profile)?),
        None => None,
    };
    let points = grid::compare_grid(&CompareAxes {
        traces: &names,
        mechanisms: &args.policies,
        retention: &retention,
        batch_given: !args.cache.batch.is_empty(),
        cross_trace: !args.no_cross_trace,
        prefetch: &prefetch,
        steps: &steps,
    })
    .map_err(|e| super::errors::grid_error(e, "--policies"))?;
    let points = same_model_cross_runs(points, &headers, &names);
    let points = with_placements(points, &args.timing.cpu_experts);
    let points = with_dtypes(points, &args.dtype);
    let total = points.len();
    let mine: Vec<(usize, &ComparePoint)> = points
        .iter()
        .enumerate()
        .filter(|(i, _)| !matches!(args.shard, Some(s) if !s.holds(*i)))
        .collect();
    // each trace's statistics from a pass of its own, which also checks every record before
    // the runs
    let infos: Vec<(TraceInfo, Option<String>)> = args
        .traces
        .iter()
        .zip(&names)
        .map(|(p, n)| grid::trace_info_file(n, p, args.phase).context("--trace"))
        .collect::<Result<_>>()?;
    let runs = run_points(&args, &mine, &timing)?;
    super::args_timing::warn_over_vram(runs.iter().map(|e| &e.result), args.timing.admission_cap);
    let mut traces: Vec<TraceInfo> = Vec::with_capacity(infos.len());
    for (info, note) in infos {
        if let Some(note) = note {
            eprintln!("{note}");
        }
        traces.push(info);
    }
    let results = Results {
        format: reports::FORMAT.to_string(),
        grid: grid_json(&args, &names, &retention, &timing)?,
        traces,
        profile,
        total_runs: total,
        shard: args.shard,
        curves: exact_curves(&args, &names, &timing, &runs),
        runs,
    };
    write(&results, &args.out, total, args.json)
}

/// The exact LRU and Belady curves of an untimed, unsharded grid ([`super::compare_curves`]);
/// none when time is simulated (the plot then draws tokens/s, which a curve does not give)
/// or for a shard (merged shards would otherwise repeat them).
fn exact_curves(
    args: &CompareArgs,
    names: &[String],
    timing: &Option<TimingConfig>,
    runs: &[RunEntry],
) -> Vec<reports::BudgetCurve> {
    if timing.is_some() || args.shard.is_some() {
        return Vec::new();
    }
    let inputs = super::compare_curves::Inputs {
        names,
        files: &args.traces,
        phase: args.phase,
        sizes: SizeOptions {
            expert_mib: args.expert_mib,
            dtype: args.dtype.first().copied(),
            granule_mib: args.granule_mib,
        },
        semantics: args.cache.semantics,
    };
    super::compare_curves::record(&inputs, runs)
}

/// The grid without the cross-trace runs between traces of different models (a profile of
/// one model cannot order or pin the experts of another); a note names each such pair.
fn same_model_cross_runs(
    points: Vec<ComparePoint>,
    headers: &[Header],
    names: &[String],
) -> Vec<ComparePoint> {
    let geometry: Vec<Vec<u16>> = headers
        .iter()
        .map(|h| KeySpace::new(&h.model).experts)
        .collect();
    let describe = |i: usize| {
        let model = &headers[i].model;
        let ks = KeySpace::new(model);
        let mut experts = ks.experts.clone();
        experts.dedup();
        format!(
            "`{}` ({}, {} MoE layers of {:?} experts)",
            names[i],
            model.name,
            ks.num_moe_layers(),
            experts
        )
    };
    for a in 0..headers.len() {
        for b in a + 1..headers.len() {
            let crossed = points
                .iter()
                .any(|p| (p.trace, p.profile) == (a, b) || (p.trace, p.profile) == (b, a));
            if crossed && geometry[a] != geometry[b] {
                eprintln!(
                    "note: traces {} and {} come from different models, so the cross-trace runs between them (one trace's profile applied to the other) are left out",
                    describe(a),
                    describe(b)
                );
            }
        }
    }
    points
        .into_iter()
        .filter(|p| geometry[p.trace] == geometry[p.profile])
        .collect()
}

/// Every point once per placement of `placements` (innermost), its coordinates naming it;
/// the points as they are when the only placement is `none` (no placement axis).
fn with_placements(points: Vec<ComparePoint>, placements: &[CpuExperts]) -> Vec<ComparePoint> {
    if placements == [CpuExperts::None] {
        return points;
    }
    let mut out = Vec::with_capacity(points.len() * placements.len());
    for p in points {
        for c in placements {
            let mut q = p.clone();
            q.coords.cpu_experts = Some(c.to_string());
            out.push(q);
        }
    }
    out
}

/// The grid once per dtype when `--dtype` gives several, each point named by its dtype;
/// one dtype (or none) leaves the points as they are.
fn with_dtypes(points: Vec<ComparePoint>, dtypes: &[DType]) -> Vec<ComparePoint> {
    if dtypes.len() < 2 {
        return points;
    }
    let mut out = Vec::with_capacity(points.len() * dtypes.len());
    for p in points {
        for d in dtypes {
            let mut q = p.clone();
            q.coords.dtype = Some(d.name().to_string());
            out.push(q);
        }
    }
    out
}

/// Every trace's header (read and checked, the trace not loaded) and its name (the file
/// stem; names must be distinct).
fn read_headers(paths: &[PathBuf]) -> Result<(Vec<Header>, Vec<String>)> {
    let mut headers = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for path in paths {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .with_context(|| format!("--trace {}: not a file name", path.display()))?;
        if names.contains(&name) {
            bail!("--trace {}: another trace is also named `{name}`; the report names traces by file stem, so give each a distinct file name", path.display());
        }
        runner::require_trace_file(path).context("--trace")?;
        headers.push(traces::read_header(path).context("--trace")?);
        names.push(name);
    }
    Ok((headers, names))
}

/// Run every point behind a progress bar (on `--threads` workers when given), the points of
/// one (evaluated, profile) trace pair together so that they share passes over the files;
/// entries in point order.
fn run_points(
    args: &CompareArgs,
    points: &[(usize, &ComparePoint)],
    timing: &Option<TimingConfig>,
) -> Result<Vec<RunEntry>> {
    let bar = args
        .progress
        .bar("sim compare", points.len() as u64, "runs");
    let work = || -> Result<Vec<Result<Cell>>> {
        let mut pairs: Vec<((usize, usize), Vec<usize>)> = Vec::new();
        for (k, (_, p)) in points.iter().enumerate() {
            let pair = (p.trace, p.profile);
            match pairs.iter_mut().find(|(q, _)| *q == pair) {
                Some((_, ks)) => ks.push(k),
                None => pairs.push((pair, vec![k])),
            }
        }
        let mut cells: Vec<Option<Result<Cell>>> = (0..points.len()).map(|_| None).collect();
        for ((t, p), ks) in pairs {
            let mut cfgs: Vec<RunConfig> = ks
                .iter()
                .map(|&k| config(args, points[k].1, timing))
                .collect();
            let trace = args.traces[t].as_path();
            // the trace's own steps: its recorded passes where it has them
            let capped = args.timing.admission_cap.is_some();
            super::grid_passes::resolve(&mut cfgs, &args.cache, Some(trace), capped)?;
            let profile = (p != t).then(|| args.traces[p].as_path());
            let input = cells::Input::File { trace, profile };
            let results = cells::run_cells(&cfgs, &input, &|n| bar.inc(n))?;
            for (&k, r) in ks.iter().zip(results) {
                cells[k] = Some(r);
            }
        }
        Ok(cells
            .into_iter()
            .map(|c| c.expect("every point was given a result"))
            .collect())
    };
    let done = args.threads.install(work)??;
    bar.finish();
    points
        .iter()
        .zip(done)
        .map(|(&(i, p), cell)| entry(i, p, cell))
        .collect()
}

/// The results.json entry of point `i` from its cell.
fn entry(i: usize, p: &ComparePoint, cell: Result<Cell>) -> Result<RunEntry> {
    let label = || format!("run {i} ({})", reports::content::run_label_of(&p.coords));
    let cell = cell.with_context(label)?;
    super::run::print_notes(&cell.report);
    if let Some(why) = &cell.does_not_fit {
        eprintln!("{}: does not fit: {why}", label());
    }
    Ok(RunEntry {
        run: i,
        grid: p.coords.clone(),
        does_not_fit: cell.does_not_fit,
        result: cell.report,
    })
}

/// The `grid` block of results.json: the axes as given and the shared settings.
fn grid_json(
    args: &CompareArgs,
    names: &[String],
    retention: &[RetentionConfig],
    timing: &Option<TimingConfig>,
) -> Result<Value> {
    let distinct = |v: Vec<String>| {
        let mut out: Vec<String> = Vec::new();
        for x in v {
            if !out.contains(&x) {
                out.push(x);
            }
        }
        out
    };
    let c = &args.cache;
    let mut grid = json!({
        "traces": names,
        "mechanisms": args.policies,
        "evict": distinct(retention.iter().map(|r| r.cache.policy.name().to_string()).collect()),
        "budgets": distinct(retention.iter().map(|r| r.cache.budget.to_string()).collect()),
        "splits": distinct(retention.iter().map(|r| r.cache.split.name().to_string()).collect()),
        "batches": distinct(retention.iter().map(|r| r.batching.batch.to_string()).collect()),
        "semantics": (!retention.is_empty()).then(|| c.semantics.name()),
        "dram": c.dram.as_ref().map(|d| d.to_string()),
        "queue": c.queue,
        "schedule": c.queue.map(|_| c.schedule),
        "seed": (!retention.is_empty()).then_some(c.seed),
        "phase": args.phase.as_str(),
        "expert_mib": args.expert_mib,
        "dtype": match args.dtype.as_slice() {
            [] => serde_json::Value::Null,
            [d] => serde_json::to_value(d)?,
            ds => serde_json::to_value(ds)?,
        },
        "granule_mib": args.granule_mib,
        "cross_trace": names.len() > 1 && !args.no_cross_trace,
        "timing": timing.as_ref().map(serde_json::to_value).transpose()?,
        "admission_cap": args.timing.admission_cap,
    });
    // the prefetch axis, only when it has a predictor (earlier results files have no key)
    let points = args.timing.prefetch_points();
    if !grid::no_prefetch(&points) {
        let axis: Vec<Value> = points
            .iter()
            .map(|&(k, w)| json!({ "predictor": k.name(), "window": w }))
            .collect();
        grid["prefetch"] = Value::Array(axis);
    }
    // the placement axis, only with --cpu-experts (earlier results files have none)
    if args.timing.cpu_experts != [CpuExperts::None] {
        let axis: Vec<String> = args
            .timing
            .cpu_experts
            .iter()
            .map(|c| c.to_string())
            .collect();
        grid["cpu_experts"] = json!(axis);
    }
    // the stepping axis, only with --verify or --prefill-chunk (earlier results files have none)
    let steps = args.steps.points(args.phase, c.seed)?;
    if steps.iter().any(|s| !s.is_off()) {
        grid["steps"] = serde_json::to_value(&steps)?;
    }
    Ok(grid)
}

/// Write the report directory (replacing an earlier report in place, which regeneration
/// relies on: say so) and say what was written (on stdout as JSON too, with `json`).
fn write(results: &Results, out: &std::path::Path, total: usize, json: bool) -> Result<()> {
    let replacing = super::report::is_report_dir(out);
    reports::write_report(results, out)?;
    if replacing {
        eprintln!(
            "replaced the earlier report in {} (choose another --out to keep both)",
            out.display()
        );
    }
    eprintln!(
        "wrote {} of {total} runs to {} (report.md, report.html, results.json, results.csv, plots/)",
        results.runs.len(),
        out.display()
    );
    if json {
        super::report::print_summary(results, out, replacing)?;
    }
    Ok(())
}
