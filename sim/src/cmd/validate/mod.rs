//! `sim validate`: replay a trace for real on the local GPU and compare with the simulator.
//!
//! Per mechanism the library (`sim::validation`) records the plans and prices them (the
//! prediction, after a retention row's warm-up); the `validate` crate executes the same plans
//! on the GPU (the measurement: VMM commits and pinned H2D copies, or managed memory with demand
//! faults, and the int4 expert kernels), timing each decode step with CUDA events. `--repeat N`
//! replays every policy N times (interleaved, order rotated); `--blocks B` replays B blocks in
//! a seeded order, each bracketed by a host probe and a VMM arm ([`gpu`]), and adds the
//! verdicts; `--breakdown` sets the replay's host time per phase beside the engine's split of
//! the same steps; `--measured FILE` re-prices a stored replay without a GPU, `--reprice DIR...`
//! every stored replay under the DIRs ([`reprice`]).

use super::args_cache::CacheArgs;
use super::args_input::{emit, InputArgs};
use super::args_timing::TimingArgs;
use anyhow::{bail, Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use policies::PolicyKind;
use sim::cache::{Budget, RetentionConfig, Schedule, Semantics, Split};
use sim::cost::Paging;
use sim::engine::TimingConfig;
use sim::runner::parse_policy;
use sim::validation::analysis::analyse;
use sim::validation::text::{analysis_table, breakdown_table, table};
use sim::validation::*;
use std::path::PathBuf;

mod composed;
mod cpu;
mod gpu;
mod reprice;
mod same_run;
pub use same_run::*;

/// `--cpu-experts` of `sim validate` (the shared timing flag, with its own meaning here).
const CPU_EXPERTS_HELP: &str = "Validate the CPU lane instead of the GPU: run, on this machine's \
    CPU, the expert calls a mode puts there (`all`: every MoE layer; `layers:N`: the first N), \
    comma-separated, with the host calibration's kernels on all threads, and compare each \
    step's time with the host cost model's price under --hw-host. One call per distinct \
    expert per layer per step (--batch W: fifo batches of W requests); --repeat N passes, the \
    modes interleaved; --steps limits the steps. Needs --dtype int4, bf16 or fp16 and the \
    header geometry. The GPU part of a step is not in it. No GPU needed. With --hw and one \
    --policy: the composed validation instead, one row per placement (layers:N, misses): the \
    GPU replays the GPU keys while a host thread runs the engine's CPU keys beside it, each \
    step against the engine's prediction of that placement (--blocks, --warm-up apply)";

/// `--hw-host` of `sim validate`.
const HW_HOST_HELP: &str = "Host profile pricing the CPU calls of --cpu-experts: a shipped \
    host profile's name (dev-box-host: this project's development CPU; h200-host: the H200 \
    machine's CPU) or a file written by `sim calibrate --only host`";

/// Arguments of `sim validate`. The shared timing flags the replay cannot follow (it runs the
/// default engine) are hidden from `--help`; `run` still refuses them with the reason.
#[derive(Args)]
#[command(
    mut_arg("predictor", |a| a.hide(true)),
    mut_arg("window", |a| a.hide(true)),
    mut_arg("handle_pool", |a| a.hide(true)),
    mut_arg("deferred_unmap", |a| a.hide(true)),
    mut_arg("serial_loader", |a| a.hide(true)),
    mut_arg("admission_cap", |a| a.hide(true)),
    mut_arg("timeline", |a| a.hide(true)),
    mut_arg("nonexpert_us", |a| a.hide(true)),
    mut_arg("expert_us", |a| a.hide(true)),
    mut_arg("cpu_experts", |a| a
        .default_value(None::<&str>)
        .help_heading(None::<&str>)
        .value_name("MODE")
        .conflicts_with_all(["measured", "reprice"])
        .help(CPU_EXPERTS_HELP)),
    mut_arg("hw_host", |a| a
        .help_heading(None::<&str>)
        .value_name("NAME|FILE")
        .requires("cpu_experts")
        .help(HW_HOST_HELP))
)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub input: InputArgs,

    #[arg(long, value_delimiter = ',', required_unless_present_any = ["reprice", "cpu_experts"], value_name = "SPEC",
          help = format!(
              "Mechanisms to replay, comma-separated: {} (each is predicted and measured on the \
               same plans)",
              policies::mechanisms::forms_short()
          ))]
    pub policy: Vec<String>,

    /// Replay only the first N decode steps of the trace, N >= 1 (prediction and measurement
    /// both; default: every step).
    #[arg(long, value_name = "N")]
    pub steps: Option<usize>,

    /// Replay every policy N times, the policies interleaved within each repetition and their
    /// order rotated by one per repetition (so drifts of the machine hit all alike). Reports
    /// each repetition's p50, the median of the repetitions' p50s (the figure the error is
    /// taken against) and their spread. The p50s of back-to-back 12-step replays on an H200
    /// differed by up to 40% (docs/history/validation.md), so deciding a 10% goal needs 3 or more.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=50))]
    pub repeat: u32,

    /// Replay B blocks: each block replays every policy --repeat times (each round in an
    /// order drawn from --seed with PCG64), bracketed by a host probe (launch µs per group)
    /// and a small VMM arm (commits, H2D copies and decommits of a 16 MiB unit) before and
    /// after. The JSON records the blocks and the host's state; the output adds per policy a
    /// verdict (the bias log(measured / predicted) per block, adjusted for the probe, with a
    /// block-bootstrap 95% interval: pass inside +-10%, fail outside, undecided otherwise) and
    /// a table of the measured per-call prices against the profile's. Without --blocks: one
    /// run of --repeat repetitions, order rotated, no probes.
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u32).range(1..=50))]
    pub blocks: Option<u32>,

    /// Threads of the CPU lane's rayon pool (with --cpu-experts); default every hardware
    /// thread, as the host calibration ran. Fewer leave cores to the thread that drives the
    /// GPU (llama.cpp's `--threads`); the prediction still uses the host profile's
    /// all-thread constants, so the measured difference is the price of the spare cores.
    #[arg(long, value_name = "N", requires = "cpu_experts",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpu_threads: Option<u32>,

    /// Keep the CPU lane's threads spinning between groups of the composed validation (with
    /// --hw) instead of sleeping, as llama.cpp's threadpool polls for work (`--poll`, 50 by
    /// default); the replay JSON's `cpu_lane.poll` records it.
    #[arg(long, requires = "cpu_experts")]
    pub cpu_poll: bool,

    /// Untimed warm-up steps before the measured ones, replayed for real (commits, copies,
    /// kernels, evictions) and priced alike: `auto` (default) runs retention rows until their
    /// cache is at its budget and 3 steps in a row evict within 10% of what they page in (at
    /// most 64 steps, and leaving --steps to measure), streaming rows none; or N steps for
    /// every row. With --measured each row's recorded warm-up is used.
    #[arg(long, value_name = "auto|N")]
    pub warm_up: Option<String>,

    /// Re-price every stored replay (a JSON `sim validate --json` wrote) found under the DIRs,
    /// each with the flags it records, under --hw (default: the profile each was recorded
    /// with, when shipped), and print per row its error and verdict, per family (trace x
    /// retention x mechanism) the median error and its sign counts, and the composition check
    /// (the model fed each repetition's measured VMM time). Files that cannot be re-priced
    /// (trace missing, settings this build cannot reproduce) are listed with the reason. No GPU.
    #[arg(long, value_name = "DIR", num_args = 1.., conflicts_with_all = ["measured", "policy", "trace", "steps", "blocks", "warm_up"])]
    pub reprice: Vec<PathBuf>,

    /// With --reprice: also re-price each row's plan under N profiles whose constants are drawn
    /// uniformly within half their measured spread (seeded: the same N gives the same
    /// interval), print each row's 90% interval of the step p50 and p99 in the JSON, and the
    /// share of rows whose measured p50 lies inside. 0: no intervals.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub intervals: u32,

    /// With --reprice: print instead the coverage page (Markdown): the re-priced rows grouped
    /// by GPU profile, model and trace, mechanism, retention and batch, each region with the
    /// live-set range its steps reached, its median p50 error and its pass / fail / undecided
    /// counts. docs/VALIDATION.md is this page for validate/data.
    #[arg(long, conflicts_with_all = ["json", "intervals"])]
    pub coverage: bool,

    /// Also print, per policy, where the time of a step went: the real replay's host phases
    /// (router wait, VMM commit and decommit calls, H2D enqueues, launches) next to the
    /// engine's predicted split (compute, router round trip, commits, decommits, copies,
    /// faults, stall), means per step. The JSON always holds both, step by step.
    #[arg(long)]
    pub breakdown: bool,

    /// Re-price instead of replaying: take the measurements from FILE (the JSON a `sim
    /// validate --json` run wrote) and compare them with this build's prediction under --hw.
    /// Give the flags it was recorded with: a different trace or model, expert size, VMM
    /// granule (--granule-mib), retention (--evict, --budget, --split, --semantics, --batch,
    /// --queue, --schedule), policy list (same order) or --steps than FILE holds is refused,
    /// naming the flag to fix (files written before a setting was recorded are checked by
    /// their page-in counts instead). Needs no GPU: for trying a cost-model or profile change
    /// against real replays.
    #[arg(long, value_name = "FILE.json")]
    pub measured: Option<PathBuf>,

    /// CUDA device ordinal to replay on.
    #[arg(long, default_value_t = 0, value_name = "ORDINAL")]
    pub device: usize,

    /// Print the `validation` block as JSON.
    #[arg(long)]
    pub json: bool,

    /// Write the output to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub cache: ValidateCacheArgs,

    #[command(flatten)]
    pub timing: TimingArgs,
}

/// Retention flags of `sim validate`: the ones of `sim run` that the real replay executes, one
/// value each. `--dram`, `--target-tokens-per-s` and `--link-gbps` are accepted only to be
/// refused with the reason (hidden from --help): the replay has no DRAM tier and prices a
/// fixed budget.
#[derive(Args, Clone, Debug, Default)]
pub struct ValidateCacheArgs {
    #[arg(long, value_name = "POLICY", value_parser = |s: &str| PolicyKind::parse(s),
          help = format!(
              "Retention policy of the replayed plans: {}. Needs --budget. Without \
               --evict/--budget: streaming (every selected expert paged in, evicted after its \
               layer)",
              super::args_cache::policy_names()
          ))]
    pub evict: Option<PolicyKind>,

    /// VRAM budget for expert units: a percentage of the bank (`25%`, rounds to
    /// max(1, round-half-even(r x units))), a unit count (`192`) or bytes (`3GiB`, `512MiB`;
    /// floor(bytes / largest unit's committed bytes) units).
    #[arg(long, value_name = "BUDGET", allow_hyphen_values = true,
          value_parser = |s: &str| Budget::parse(s))]
    pub budget: Option<Budget>,

    /// How the budget is shared: global (one pool for all layers, the default) or per-layer
    /// (each MoE layer gets round(fraction x its units) slots).
    #[arg(long, value_name = "SPLIT",
          value_parser = PossibleValuesParser::new(["global", "per-layer"])
              .map(|s| if s == "per-layer" { Split::PerLayer } else { Split::Global }))]
    pub split: Option<Split>,

    /// When eviction is checked: group (a (step, layer) group's units are admitted together
    /// and protected from eviction while the budget is restored) or access (after every
    /// single access, no protection).
    #[arg(long, default_value = "group", value_name = "SEMANTICS",
          value_parser = PossibleValuesParser::new(["group", "access"])
              .map(|s| if s == "access" { Semantics::Access } else { Semantics::Group }))]
    pub semantics: Semantics,

    /// Sequences decoded together (W): each layer accesses the union of their selections
    /// once per step; requests are the trace's tokens interleaved round-robin across
    /// sequences. Default 1.
    #[arg(long, value_name = "W")]
    pub batch: Option<usize>,

    /// Waiting requests the scheduler may choose among (Q >= W).
    #[arg(long, value_name = "Q")]
    pub queue: Option<usize>,

    /// How batches are formed: fifo (consecutive requests) or route-aware (from the Q oldest
    /// waiting: the oldest, then the request that grows the batch's union of units least).
    #[arg(long, default_value = "fifo", value_name = "SCHEDULE",
          value_parser = PossibleValuesParser::new(["fifo", "route-aware"])
              .map(|s| if s == "route-aware" { Schedule::RouteAware } else { Schedule::Fifo }))]
    pub schedule: Schedule,

    /// Seed of the random policy and of the engine (PCG64).
    #[arg(long, default_value_t = 0, value_name = "SEED")]
    pub seed: u64,

    /// Refused: a `sim run` flag (the replay has no DRAM tier).
    #[arg(long, hide = true, value_name = "BUDGET", allow_hyphen_values = true)]
    pub dram: Option<String>,

    /// Refused: a `sim run` flag (the inverse budget search).
    #[arg(
        long,
        hide = true,
        value_name = "TOKENS_PER_S",
        allow_hyphen_values = true
    )]
    pub target_tokens_per_s: Option<String>,

    /// Refused: a `sim run` flag (the inverse budget search's link).
    #[arg(long, hide = true, value_name = "GBPS", allow_hyphen_values = true)]
    pub link_gbps: Option<String>,
}

impl ValidateCacheArgs {
    /// The shared retention flags these stand for, after refusing the `sim run`-only ones.
    /// Errors: `--dram`, `--target-tokens-per-s` or `--link-gbps` given.
    pub fn to_cache_args(&self) -> Result<CacheArgs> {
        if self.dram.is_some() {
            bail!("`sim validate` does not take --dram: the real replay pages experts from pinned host memory and has no DRAM/SSD tier to measure; model the tier with `sim run --dram`");
        }
        if self.target_tokens_per_s.is_some() || self.link_gbps.is_some() {
            bail!("`sim validate` does not take --target-tokens-per-s or --link-gbps: it replays a fixed --budget; find the budget with `sim run --evict POLICY --target-tokens-per-s T --link-gbps G`, then validate it with --budget");
        }
        Ok(CacheArgs {
            evict: self.evict.iter().map(|k| k.name().to_string()).collect(),
            budget: self.budget.iter().cloned().collect(),
            split: self.split.iter().copied().collect(),
            semantics: self.semantics,
            batch: self.batch.iter().copied().collect(),
            queue: self.queue,
            schedule: self.schedule,
            seed: self.seed,
            ..CacheArgs::default()
        })
    }
}

pub fn run(args: ValidateArgs) -> Result<()> {
    anyhow::ensure!(
        args.intervals == 0 || !args.reprice.is_empty(),
        "--intervals {} re-prices stored replays: give it with --reprice DIR",
        args.intervals
    );
    anyhow::ensure!(
        !args.coverage || !args.reprice.is_empty(),
        "--coverage groups re-priced stored replays: give it with --reprice DIR (e.g. `sim validate --reprice validate/data --coverage`)"
    );
    if !args.timing.cpu_experts.is_empty() && !composed::is_composed(&args) {
        return cpu::run(&args);
    }
    if !args.reprice.is_empty() {
        return reprice::run(&args);
    }
    let p = priced(&args)?;
    if let Some(note) = &p.gpu_note {
        eprintln!("{note}");
    }
    let v = &p.validation;
    let text = if args.json {
        serde_json::to_string_pretty(&serde_json::json!({ "validation": v }))? + "\n"
    } else {
        let mut t = table(v);
        if args.breakdown {
            t = t + "\n" + &breakdown_table(v);
        }
        if let Some(a) = &v.analysis {
            t = t + "\n" + &analysis_table(a);
        }
        if v.composed.is_some() {
            t = t + "\n" + &composed::table(v, &p.predictions);
        }
        t
    };
    emit(args.out.as_deref(), &text)
}

/// A validation with its rows: measured on the GPU or read from `--measured`, and priced.
pub(crate) struct Priced {
    pub validation: Validation,
    pub predictions: Vec<Prediction>,
    /// The note when the profile describes another GPU than the replay ran on.
    pub gpu_note: Option<String>,
}

/// Check the arguments, price every policy (deterministic, no GPU), then take the
/// measurements (the GPU replay, or the `--measured` file) and build the rows; with recorded
/// blocks, the analysis too.
pub(crate) fn priced(args: &ValidateArgs) -> Result<Priced> {
    let (tc, retention) = checked_config(args)?;
    let w = args.input.workload()?;
    let model = &w.trace.trace.header.model;
    let Some(hidden) = model.hidden_size else {
        bail!("the trace header of '{}' records no hidden size: the replay's expert kernels need it (re-import the trace with the model geometry)", model.name);
    };
    let hw = &*tc.profile;
    policies::mechanisms::Sizes::resolve(model, &args.input.sizes())?;
    let earlier = match &args.measured {
        Some(path) => Some(read_measured(path)?),
        None => {
            // Only now, with every argument checked, look for the GPU: a bad argument is
            // reported as such on any machine.
            kernels::check_cuda_libraries().context("`sim validate` replays on the local GPU")?;
            None
        }
    };
    let setup = PredictionSetup {
        workload: &w,
        phase: args.input.phase,
        sizes: args.input.sizes(),
        retention: retention.as_ref(),
        timing: &tc,
        steps: args.steps,
        seed: tc.seed,
        hidden: hidden as u64,
        cpu: None,
    };
    let choice = warm_up_choice(args, earlier.as_ref().map(|e| &e.1))?;
    let predictions: Vec<Prediction> = if composed::is_composed(args) {
        composed::predictions(args, &setup, choice)?
    } else {
        args.policy
            .iter()
            .enumerate()
            .map(|(i, spec)| predict(spec, &setup, choice(i)))
            .collect::<Result<_>>()?
    };
    let mut v = header(
        &w.trace.label,
        &model.name,
        &hw.name,
        &predictions,
        retention.as_ref(),
    );
    if composed::is_composed(args) {
        let host = args.timing.hw_host.as_deref().unwrap_or(&hw.name);
        v.composed = Some(composed::block(args, host, &predictions)?);
    }
    let measured = match &earlier {
        Some((path, stored)) => {
            v.host_context = stored.host_context.clone();
            v.blocks = stored.blocks.clone();
            stored_measurements(args, path, stored, &v, &predictions)?
        }
        None => {
            let (reps, ctx, blocks) = gpu::replay_on_gpu(args, &w.trace.label, &predictions)?;
            v.host_context = Some(ctx);
            v.blocks = blocks;
            reps
        }
    };
    // A profile of another GPU prices this replay: its errors then compare two GPUs.
    let gpu_note = measured
        .iter()
        .flatten()
        .next()
        .filter(|r| !hw.device.gpu.starts_with(&r.measurement.device.gpu))
        .map(|r| {
            format!(
                "validate: note: the replay ran on {}, profile {} describes {}: the errors \
                 compare two GPUs, not the model with its GPU",
                r.measurement.device.gpu, hw.name, hw.device.gpu
            )
        });
    v.rows = rows(&predictions, measured, earlier.as_ref().map(|e| &e.1))?;
    if !v.blocks.is_empty() {
        v.analysis = Some(analyse(&v, &predictions, None));
    }
    Ok(Priced {
        validation: v,
        predictions,
        gpu_note,
    })
}

/// The rows of `predictions` with their repetitions `measured`, each with its warm-up: the
/// `stored` file's (absent for files written before it), else the prediction's.
fn rows(
    predictions: &[Prediction],
    measured: Vec<Vec<StoredRep>>,
    stored: Option<&Validation>,
) -> Result<Vec<ValidationRow>> {
    predictions
        .iter()
        .zip(measured)
        .enumerate()
        .map(|(i, (pp, reps))| {
            let warm = match stored {
                Some(v) => v.rows.get(i).and_then(ValidationRow::warm_up),
                None => Some(pp.warm_up),
            };
            Ok(ValidationRow::new(
                pp.spec.clone(),
                pp.steps,
                pp.page_ins,
                pp.step_us.clone(),
                pp.parts.clone(),
                reps,
            )?
            .with_warm_up(warm))
        })
        .collect()
}

/// The warm-up of each row (by index): a `--measured` file's own (none for files written
/// before the warm-up), else `--warm-up` (default `auto`). Errors: `--warm-up` given with
/// `--measured`, or not `auto` or a step count.
fn warm_up_choice(
    args: &ValidateArgs,
    stored: Option<&Validation>,
) -> Result<impl Fn(usize) -> WarmUpChoice> {
    let given = match args.warm_up.as_deref() {
        None | Some("auto") => None,
        Some(n) => Some(n.parse::<usize>().map_err(|_| {
            anyhow::anyhow!("--warm-up {n}: give `auto` (the steady rule, retention rows only) or a number of steps, e.g. 0")
        })?),
    };
    if let (Some(path), Some(_)) = (&args.measured, &args.warm_up) {
        bail!(
            "--warm-up is taken from --measured {} (each row records its own); leave --warm-up out",
            path.display()
        );
    }
    let stored: Option<Vec<usize>> =
        stored.map(|v| v.rows.iter().map(|r| r.warmup_steps.unwrap_or(0)).collect());
    Ok(move |i: usize| match (&stored, given) {
        (Some(s), _) => WarmUpChoice::Fixed(s.get(i).copied().unwrap_or(0)),
        (None, Some(n)) => WarmUpChoice::Fixed(n),
        (None, None) => WarmUpChoice::Auto,
    })
}

/// The timing and retention configurations of a validation, after refusing every flag the
/// real replay cannot follow (checked on the flags themselves, before any file is read).
pub(super) fn checked_config(
    args: &ValidateArgs,
) -> Result<(TimingConfig, Option<RetentionConfig>)> {
    if args.steps == Some(0) {
        bail!("--steps 0: --steps must be >= 1 (the decode steps to replay; leave it out for every step)");
    }
    for spec in &args.policy {
        parse_policy(spec, "--policy")?;
    }
    let cache_args = args.cache.to_cache_args()?;
    let t = &args.timing;
    if t.predicts()
        || t.handle_pool
        || t.deferred_unmap
        || t.serial_loader
        || t.admission_cap.is_some()
        || t.timeline.is_some()
        || t.nonexpert_us.is_some()
        || t.expert_us.is_some()
        || t.window != [1]
    {
        bail!("`sim validate` replays the default engine (no --predictor, --window, --handle-pool, --deferred-unmap, --serial-loader, --admission-cap, --timeline, --nonexpert-us or --expert-us): the real replay runs those paths as the engine's defaults do; leave these flags out");
    }
    if t.kv_bytes_per_token.is_some() {
        bail!("`sim validate` does not take --kv-bytes-per-token: the replay runs no attention and reads no KV cache, so neither side prices one; leave it out");
    }
    if composed::is_composed(args) {
        composed::checked(args)?;
    }
    let tc = if composed::is_composed(args) {
        t.for_grid(cache_args.seed)?
    } else {
        t.for_run(cache_args.seed)?
    };
    let Some(tc) = tc else {
        bail!("`sim validate` needs --hw: the profile that prices the prediction (e.g. --hw h200-linux, or the JSON `sim calibrate` wrote)");
    };
    Ok((tc, cache_args.for_run()?))
}

/// The `validation` block's header (no rows yet) for `predictions` on profile `hw`.
fn header(
    trace: &str,
    model: &str,
    hw: &str,
    predictions: &[Prediction],
    retention: Option<&RetentionConfig>,
) -> Validation {
    let settings = retention.map(RetentionSettings::of);
    Validation {
        trace: trace.to_string(),
        model: model.to_string(),
        hw: hw.to_string(),
        expert_bytes: predictions.last().map_or(0, |p| p.map.expert_bytes),
        vmm_granule_bytes: predictions
            .iter()
            .rfind(|p| p.paging == Paging::Vmm)
            .map(|p| p.map.granule_bytes),
        retention: retention_echo(retention),
        retention_text: settings
            .as_ref()
            .map_or("streaming".into(), RetentionSettings::text),
        retention_settings: settings,
        rows: Vec::new(),
        host_context: None,
        blocks: Vec::new(),
        analysis: None,
        composed: None,
    }
}

/// The repetitions a `--measured` file holds per policy, after checking it was recorded
/// with this run's settings.
fn stored_measurements(
    args: &ValidateArgs,
    path: &std::path::Path,
    stored: &Validation,
    header: &Validation,
    predictions: &[Prediction],
) -> Result<Vec<Vec<StoredRep>>> {
    let now = RunEcho {
        header,
        rows: predictions
            .iter()
            .map(|pp| (pp.spec.clone(), pp.steps, pp.page_ins))
            .collect(),
    };
    check_same_run(path, stored, &now)?;
    let mut measured = vec![Vec::new(); predictions.len()];
    for (r, m) in stored.rows.iter().zip(measured.iter_mut()) {
        *m = r.stored_repetitions();
    }
    // --repeat (default 1) cannot change what the file holds: say so when it differs.
    let held = measured.first().map_or(0, Vec::len);
    if args.repeat > 1 && args.repeat as usize != held {
        eprintln!(
            "validate: note: --repeat {} is ignored with --measured: {} holds {} per policy",
            args.repeat,
            path.display(),
            reports::metrics::count(held as u64, "repetition")
        );
    }
    Ok(measured)
}

/// The `validation` block in `path`, with the path.
fn read_measured(path: &std::path::Path) -> Result<(PathBuf, Validation)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --measured {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("--measured {} is not JSON", path.display()))?;
    let block = v
        .get("validation")
        .filter(|b| b.get("rows").is_some())
        .cloned()
        .with_context(|| {
            format!(
                "--measured {} has no validation.rows: pass a file `sim validate --json` wrote",
                path.display()
            )
        })?;
    let block: Validation = serde_json::from_value(block).with_context(|| {
        format!(
            "--measured {}: the validation block does not parse",
            path.display()
        )
    })?;
    check_step_data(path, &block)?;
    Ok((path.to_path_buf(), block))
}

/// The CPU lane's threads: `--cpu-threads`, else every hardware thread.
pub(super) fn cpu_threads(args: &ValidateArgs) -> usize {
    args.cpu_threads
        .map_or_else(validate::host::all_threads, |n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: ValidateArgs,
    }

    #[test]
    fn without_a_gpu_validate_fails_at_once() {
        if kernels::check_cuda_libraries().is_ok() {
            return; // a GPU machine: nothing to check here
        }
        // valid arguments (the embedded trace): arguments are checked before the GPU is
        let args =
            Cli::try_parse_from(["validate", "--policy", "e1", "--hw", "h200-linux", "--json"])
                .unwrap()
                .a;
        let err = format!("{:#}", run(args).unwrap_err());
        assert!(
            err.contains("needs an NVIDIA GPU") && err.contains("driver"),
            "{err}"
        );
    }

    #[test]
    fn validation_json_without_repetitions_still_reads() {
        // written before --repeat existed (docs/history/validation.md, row "final")
        let text = include_str!("../../../tests/fixtures/validation/final/qwen-lru50.json");
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        let rows: Vec<ValidationRow> =
            serde_json::from_value(v["validation"]["rows"].clone()).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].repeat, 1);
        assert!(rows[0].repetitions.is_empty() && rows[0].replay.host.is_empty());
    }

    #[test]
    fn measured_re_prices_a_stored_replay_without_a_gpu() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let trace = format!("{root}/validate/data/validation/qwen3-30b-a3b.trace");
        let stored = format!("{root}/sim/tests/fixtures/h200-linux-p5-validation/ql.json");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("v.json");
        let args = |policy: &str, steps: &str, out: &std::path::Path| {
            Cli::try_parse_from([
                "validate",
                "--trace",
                &trace,
                "--dtype",
                "int4",
                "--policy",
                policy,
                "--evict",
                "lru",
                "--budget",
                "50%",
                "--steps",
                steps,
                "--hw",
                "h200-linux",
                "--json",
                "--measured",
                &stored,
                "--out",
                out.to_str().unwrap(),
            ])
            .unwrap()
            .a
        };
        run(args("e1,e4:hot", "12", &out)).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        // the machine echo as every earlier file has it, and the flags as the user wrote them
        assert_eq!(
            v["validation"]["retention"],
            "Lru@Fraction { num: 50, den: 100 }"
        );
        assert_eq!(v["validation"]["retention_text"], "lru, budget 50%");
        assert_eq!(v["validation"]["retention_settings"]["budget"], "50%");
        assert_eq!(v["validation"]["retention_settings"]["batch"], 1);
        let row = &v["validation"]["rows"][0];
        // the stored repetitions come back as measured: their p50s by hand (nearest rank 6 of
        // 12 steps), and the median of the three
        let file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stored).unwrap()).unwrap();
        let reps = file["validation"]["rows"][0]["repetitions"]
            .as_array()
            .unwrap();
        let mut p50s: Vec<f64> = reps
            .iter()
            .map(|r| {
                let mut s: Vec<f64> = r["step_us"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect();
                s.sort_by(f64::total_cmp);
                s[5] / 1e3
            })
            .collect();
        p50s.sort_by(f64::total_cmp);
        assert_eq!(row["repeat"], 3);
        assert_eq!(row["measured"]["p50_ms"].as_f64().unwrap(), p50s[1]);
        assert_eq!(row["predicted_step_us"].as_array().unwrap().len(), 12);
        // a policy the file lacks, another order, or other steps are refused with the fix
        for policies in ["e2:hot", "e1", "e4:hot,e1"] {
            let e = format!("{:#}", run(args(policies, "12", &out)).unwrap_err());
            // (e2 is spelt back with its default order, e2:hot)
            assert!(
                e.contains("was replayed with --policy e1,e4:hot (in this order")
                    && e.contains(&format!("this run has --policy {policies}"))
                    && e.ends_with("pass --policy e1,e4:hot"),
                "{e}"
            );
        }
        let e = format!("{:#}", run(args("e1,e4:hot", "6", &out)).unwrap_err());
        assert!(e.contains("pass --steps 12"), "{e}");
        // the text header says the retention as the flags did
        let text_out = dir.path().join("v.txt");
        let mut a = args("e1,e4:hot", "12", &text_out);
        a.json = false;
        run(a).unwrap();
        let text = std::fs::read_to_string(&text_out).unwrap();
        let header = text.lines().next().unwrap();
        assert!(
            header.contains(", lru, budget 50%, profile h200-linux") && !text.contains("Fraction"),
            "{header}"
        );
    }

    /// `sim validate` with the flags of the stored `h200-linux-p6-validation` granite replays (the
    /// interference arms' check, docs/history/validation.md), re-priced against `file` with `extra`
    /// flags on top.
    fn granite_p6(file: &str, policies: &str, extra: &[&str]) -> Result<()> {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let stored = format!("{root}/sim/tests/fixtures/h200-linux-p6-validation/{file}");
        let trace = format!("{root}/traces/data/granite/prose.bin");
        let mut argv = vec![
            "validate",
            "--policy",
            policies,
            "--steps",
            "12",
            "--hw",
            "h200-linux",
            "--json",
            "--measured",
            &stored,
        ];
        if !extra.contains(&"--expert-mib") {
            argv.extend(["--expert-mib", "16"]);
        }
        if !extra.contains(&"--trace") {
            argv.extend(["--trace", &trace]);
        }
        argv.extend(extra);
        // the prediction goes to a scratch file, never to the test's stdout
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("v.json");
        argv.extend(["--out", out.to_str().unwrap()]);
        run(Cli::try_parse_from(argv).unwrap().a)
    }

    #[test]
    fn measured_refuses_a_replay_of_other_settings() {
        let err = |file, policies, extra: &[&str]| {
            format!("{:#}", granite_p6(file, policies, extra).unwrap_err())
        };
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let code = format!("{root}/traces/data/granite/code.bin");
        // another trace of the same model (gs.json: granite prose, streaming, 16 MiB experts)
        let e = err("gs.json", "e1,e4,region:256,os4k", &["--trace", &code]);
        assert!(
            e.contains("replayed on trace 'traces/data/granite/prose.bin'")
                && e.contains("pass --trace traces/data/granite/prose.bin"),
            "{e}"
        );
        let e = err(
            "gs.json",
            "e1",
            &["--trace", &code, "--evict", "lru", "--budget", "50%"],
        );
        assert!(
            e.contains("pass --trace traces/data/granite/prose.bin"),
            "{e}"
        );
        // retention: LRU against a streaming replay, and the other way round
        let e = err("gs.json", "e1", &["--evict", "lru", "--budget", "50%"]);
        assert!(
            e.contains("under retention streaming, this run has lru, budget 50%")
                && e.contains("leave out --evict and --budget"),
            "{e}"
        );
        let e = err("gl.json", "e1", &[]);
        assert!(
            e.contains("under retention lru, budget 50%, this run has streaming: pass --evict lru --budget 50%"),
            "{e}"
        );
        let e = err("gl.json", "e1", &["--evict", "lru", "--budget", "25%"]);
        assert!(
            e.contains("this run has lru, budget 25%: pass --evict lru --budget 50%"),
            "{e}"
        );
        let e = err("gl.json", "e1", &["--evict", "fifo", "--budget", "50%"]);
        assert!(e.contains("pass --evict lru --budget 50%"), "{e}");
        // expert bytes: 8 MiB = 8388608 bytes against the stored 16777216
        let e = err("gs.json", "e1", &["--expert-mib", "8"]);
        assert!(
            e.contains("experts of 16 MiB (16777216 bytes), this run's are 8 MiB (8388608 bytes): pass --expert-mib 16"),
            "{e}"
        );
        // batch 4: gl.json records no batch; its page-ins (827 for e1, BENCHMARKS.md at commit
        // 225ec1c) are the backstop: W = 4 sequences page in the union of four selections
        let e = err(
            "gl.json",
            "e1,e4:hot,region:256",
            &["--evict", "lru", "--budget", "50%", "--batch", "4"],
        );
        assert!(
            e.contains("paged in 827 units") && e.contains("--batch"),
            "{e}"
        );
        // the recorded flags still re-price
        granite_p6("gs.json", "e1,e4:hot,region:256,os4k", &[]).unwrap();
        granite_p6(
            "gl.json",
            "e1,e4:hot,region:256",
            &["--evict", "lru", "--budget", "50%"],
        )
        .unwrap();
    }

    #[test]
    fn a_different_vmm_granule_is_refused_naming_the_flag() {
        let header = |granule: Option<u64>| Validation {
            trace: "traces/x.bin".into(),
            model: "m".into(),
            hw: "h".into(),
            expert_bytes: 16 << 20,
            vmm_granule_bytes: granule,
            retention: "streaming".into(),
            retention_text: "streaming".into(),
            retention_settings: None,
            rows: Vec::new(),
            host_context: None,
            blocks: Vec::new(),
            analysis: None,
            composed: None,
        };
        let path = std::path::Path::new("f.json");
        let check = |stored: Option<u64>, now: Option<u64>| {
            check_same_run(
                path,
                &header(stored),
                &RunEcho {
                    header: &header(now),
                    rows: Vec::new(),
                },
            )
        };
        let e = format!("{:#}", check(Some(2 << 20), Some(4 << 20)).unwrap_err());
        assert!(
            e.contains("granules of 2 MiB, this run's are 4 MiB: pass --granule-mib 2"),
            "{e}"
        );
        check(Some(2 << 20), Some(2 << 20)).unwrap();
        // files written before the field (and os*-only runs) leave it to the page-in check
        check(None, Some(4 << 20)).unwrap();
    }

    #[test]
    fn settings_a_newer_file_records_are_compared_flag_by_flag() {
        let settings = |batch, split: &str| RetentionSettings {
            evict: "lru".into(),
            budget: "50%".into(),
            split: split.into(),
            semantics: "group".into(),
            batch,
            queue: None,
            schedule: "fifo".into(),
        };
        let header = |st: RetentionSettings| Validation {
            trace: "traces/x.bin".into(),
            model: "m".into(),
            hw: "h".into(),
            expert_bytes: 1 << 20,
            vmm_granule_bytes: Some(2 << 20),
            retention: "Lru@Fraction { num: 50, den: 100 }".into(),
            retention_text: st.text(),
            retention_settings: Some(st),
            rows: Vec::new(),
            host_context: None,
            blocks: Vec::new(),
            analysis: None,
            composed: None,
        };
        let path = std::path::Path::new("f.json");
        let stored = header(settings(1, "global"));
        let ok = header(settings(1, "global"));
        check_same_run(
            path,
            &stored,
            &RunEcho {
                header: &ok,
                rows: Vec::new(),
            },
        )
        .unwrap();
        let b4 = header(settings(4, "global"));
        assert_eq!(b4.retention_text, "lru, budget 50%, batch 4");
        let e = format!(
            "{:#}",
            check_same_run(
                path,
                &stored,
                &RunEcho {
                    header: &b4,
                    rows: Vec::new()
                }
            )
            .unwrap_err()
        );
        assert!(
            e.contains("with --batch 1, this run has --batch 4: pass --batch 1"),
            "{e}"
        );
        let pl = header(settings(1, "per-layer"));
        assert_eq!(pl.retention_text, "lru, budget 50%, per-layer split");
        let e = format!(
            "{:#}",
            check_same_run(
                path,
                &stored,
                &RunEcho {
                    header: &pl,
                    rows: Vec::new()
                }
            )
            .unwrap_err()
        );
        assert!(e.contains("pass --split global"), "{e}");
    }

    #[test]
    fn legacy_retention_echoes_read_back_as_flags() {
        let l = |s| legacy_retention(s);
        assert_eq!(
            l("Lru@Fraction { num: 50, den: 100 }"),
            Some(("lru, budget 50%".into(), "--evict lru --budget 50%".into()))
        );
        assert_eq!(
            l("PinLru@Fraction { num: 125, den: 1000 }").unwrap().1,
            "--evict pin-lru --budget 12.5%"
        );
        assert_eq!(
            l("Belady@Units(192)").unwrap().1,
            "--evict belady --budget 192"
        );
        assert_eq!(
            l("Fifo@Bytes(1073741824)").unwrap().1,
            "--evict fifo --budget 1073741824B"
        );
        assert_eq!(l("streaming"), None);
        assert_eq!(l("Nope@Units(1)"), None);
    }

    #[test]
    fn run_only_flags_and_zero_steps_are_refused_with_the_reason() {
        let err = |extra: &[&str]| {
            let mut argv = vec!["validate", "--policy", "e1", "--hw", "h200-linux"];
            argv.extend(extra);
            format!(
                "{:#}",
                run(Cli::try_parse_from(argv).unwrap().a).unwrap_err()
            )
        };
        let e = err(&[
            "--evict",
            "lru",
            "--target-tokens-per-s",
            "100",
            "--link-gbps",
            "25",
        ]);
        assert!(e.contains("does not take --target-tokens-per-s"), "{e}");
        let e = err(&["--target-tokens-per-s", "100", "--link-gbps", "25"]);
        assert!(e.contains("does not take --target-tokens-per-s"), "{e}");
        let e = err(&["--evict", "lru", "--budget", "50%", "--dram", "50%"]);
        assert!(e.contains("`sim validate` does not take --dram"), "{e}");
        let e = err(&["--kv-bytes-per-token", "4096"]);
        assert!(e.contains("does not take --kv-bytes-per-token"), "{e}");
        let e = err(&["--window", "2"]);
        assert!(e.contains("no --predictor, --window"), "{e}");
        let e = err(&["--steps", "0"]);
        assert!(e.contains("--steps must be >= 1"), "{e}");
        // refused for what they are even without --hw (not "need a hardware profile")
        let e = format!(
            "{:#}",
            run(
                Cli::try_parse_from(["validate", "--policy", "e1", "--predictor", "oracle"])
                    .unwrap()
                    .a
            )
            .unwrap_err()
        );
        assert!(e.contains("replays the default engine"), "{e}");
        // one --evict value: `all` is a sweep's
        assert!(Cli::try_parse_from(["validate", "--policy", "e1", "--evict", "all"]).is_err());
    }

    /// `sim validate --reprice DIRS... --json`, parsed.
    fn reprice_json(dirs: &[&str], extra: &[&str]) -> Result<serde_json::Value> {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.json");
        let mut argv = vec!["validate", "--reprice"];
        argv.extend(dirs);
        argv.extend(extra);
        argv.extend(["--json", "--out", out.to_str().unwrap()]);
        run(Cli::try_parse_from(argv).unwrap().a)?;
        Ok(serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap())
    }

    #[test]
    fn reprice_gives_each_row_the_error_measured_gives_it() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let set = format!("{root}/validate/data/h200-linux-p9-validation");
        let r = reprice_json(&[&set], &[]).unwrap();
        let rows = r["reprice"]["rows"].as_array().unwrap();
        // gs 4 + gl 3 + qs 4 + ql 2 policies (run.sh beside them)
        assert_eq!(rows.len(), 13);
        assert!(r["reprice"]["skipped"].as_array().unwrap().is_empty());
        // the granite streaming rows against `--measured` with the flags of run.sh
        let gs = format!("{set}/gs.json");
        let trace = format!("{root}/traces/data/granite/prose.bin");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("m.json");
        run(Cli::try_parse_from([
            "validate",
            "--trace",
            &trace,
            "--expert-mib",
            "16",
            "--steps",
            "12",
            "--policy",
            "e1,e4,region:256,os4k",
            "--hw",
            "h200-linux",
            "--json",
            "--measured",
            &gs,
            "--out",
            out.to_str().unwrap(),
        ])
        .unwrap()
        .a)
        .unwrap();
        let m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let by_hand: Vec<f64> = m["validation"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["error_pct_p50"].as_f64().unwrap())
            .collect();
        let repriced: Vec<f64> = rows
            .iter()
            .filter(|x| x["file"].as_str().unwrap().ends_with("/gs.json"))
            .map(|x| x["error_pct_p50"].as_f64().unwrap())
            .collect();
        assert_eq!(repriced, by_hand);
        // families: one per (trace, retention, policy), here one set each, the sign counted
        let fams = r["reprice"]["families"].as_array().unwrap();
        assert_eq!(fams.len(), 13);
        for f in fams {
            let row = rows
                .iter()
                .find(|x| {
                    x["policy"] == f["policy"]
                        && x["retention"] == f["retention"]
                        && x["trace"] == f["trace"]
                })
                .unwrap();
            let e = row["error_pct_p50"].as_f64().unwrap();
            assert_eq!(f["median_error_pct"].as_f64().unwrap(), e);
            assert_eq!(
                (f["under"].as_u64().unwrap(), f["over"].as_u64().unwrap()),
                (u64::from(e < 0.0), u64::from(e > 0.0))
            );
        }
        // the composition check on every VMM row (os4k has none), repetitions as blocks
        let vmm: Vec<&serde_json::Value> = rows.iter().filter(|x| x["policy"] != "os4k").collect();
        assert!(vmm
            .iter()
            .all(|x| x["composition"]["repetitions"].as_array().unwrap().len() == 3));
        assert!(rows
            .iter()
            .filter(|x| x["policy"] == "os4k")
            .all(|x| x.get("composition").is_none()));
        assert!(rows
            .iter()
            .all(|x| x["verdict"]["blocks"].as_array().unwrap().len() == 3));
    }

    #[test]
    fn reprice_lists_what_it_cannot_re_price_and_goes_on() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let dir = tempfile::tempdir().unwrap();
        let qs = std::fs::read_to_string(format!(
            "{root}/validate/data/h200-linux-p9-validation/qs.json"
        ))
        .unwrap();
        let moved = qs.replace(
            "validate/data/validation/qwen3-30b-a3b.trace",
            "traces/gone.trace",
        );
        std::fs::write(dir.path().join("moved.json"), moved).unwrap();
        // a replay that still re-prices (its trace found above the repository's data folder is
        // not above a temporary one: give the trace's absolute path)
        let here = qs.replace(
            "\"validate/data/validation/qwen3-30b-a3b.trace\"",
            &format!("\"{root}/validate/data/validation/qwen3-30b-a3b.trace\""),
        );
        std::fs::write(dir.path().join("here.json"), here).unwrap();
        // JSON without a validation block is passed over
        std::fs::write(dir.path().join("profile.json"), "{\"constants\": {}}").unwrap();
        let r = reprice_json(&[dir.path().to_str().unwrap()], &["--hw", "h200-linux"]).unwrap();
        let skipped = r["reprice"]["skipped"].as_array().unwrap();
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0]["file"].as_str().unwrap().ends_with("moved.json"));
        assert!(
            skipped[0]["reason"]
                .as_str()
                .unwrap()
                .contains("its trace traces/gone.trace is not there"),
            "{skipped:?}"
        );
        assert_eq!(r["reprice"]["rows"].as_array().unwrap().len(), 4);
        assert_eq!(r["reprice"]["hw"], "h200-linux");
        // a folder without replays, and a path that is no folder, are errors naming --reprice
        let empty = tempfile::tempdir().unwrap();
        let e = format!(
            "{:#}",
            reprice_json(&[empty.path().to_str().unwrap()], &[]).unwrap_err()
        );
        assert!(
            e.contains("--reprice") && e.contains("no stored replay"),
            "{e}"
        );
        let e = format!("{:#}", reprice_json(&["/no/such/dir"], &[]).unwrap_err());
        assert!(e.contains("--reprice /no/such/dir: not a directory"), "{e}");
        // --reprice reads each file's flags: the per-file ones are refused by clap
        assert!(Cli::try_parse_from(["validate", "--reprice", "x", "--policy", "e1"]).is_err());
    }

    #[test]
    fn a_file_with_blocks_gets_its_verdicts_from_them() {
        // p9 gl.json as a blocked validation would have written it: each repetition its own
        // block, probes around them (40, 60, 40 µs), the warm-up recorded
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let text = std::fs::read_to_string(format!(
            "{root}/validate/data/h200-linux-p9-validation/gl.json"
        ))
        .unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let arm = serde_json::json!({"unit_granules": 8, "granule_bytes": 2097152, "cycles": 16,
            "commit_us_per_granule": {"median": 45.0, "min": 44.0, "max": 50.0, "spread": 0.13, "n": 16},
            "decommit_us_per_granule": {"median": 33.0, "min": 32.0, "max": 36.0, "spread": 0.12, "n": 16},
            "h2d_us": {"median": 310.0, "min": 300.0, "max": 330.0, "spread": 0.1, "n": 16}});
        let probe = |x: f64| serde_json::json!({"launch_us_per_group": x, "groups": 48, "vmm": arm, "host": {}});
        v["validation"]["blocks"] = serde_json::json!([0, 1, 2]
            .iter()
            .zip([40.0, 60.0, 40.0])
            .map(|(&b, x)| serde_json::json!({"block": b, "before": probe(x), "after": probe(x)}))
            .collect::<Vec<_>>());
        for row in v["validation"]["rows"].as_array_mut().unwrap() {
            row["warmup_steps"] = 0.into();
            row["warmup_steady"] = false.into();
            for (b, rep) in row["repetitions"]
                .as_array_mut()
                .unwrap()
                .iter_mut()
                .enumerate()
            {
                rep["block"] = b.into();
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let stored = dir.path().join("blocked.json");
        std::fs::write(&stored, serde_json::to_string(&v).unwrap()).unwrap();
        let out = dir.path().join("out.json");
        let trace = format!("{root}/traces/data/granite/prose.bin");
        let argv = |json: bool| {
            let mut a = vec![
                "validate",
                "--trace",
                &trace,
                "--expert-mib",
                "16",
                "--steps",
                "12",
                "--policy",
                "e1,e4,region:256",
                "--evict",
                "lru",
                "--budget",
                "50%",
                "--hw",
                "h200-linux",
                "--measured",
                stored.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ];
            if json {
                a.push("--json");
            }
            Cli::try_parse_from(a).unwrap().a
        };
        run(argv(true)).unwrap();
        let got: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let a = &got["validation"]["analysis"];
        assert_eq!(a["blocks_from"], "blocks");
        assert_eq!(got["validation"]["blocks"].as_array().unwrap().len(), 3);
        assert_eq!(got["validation"]["rows"][0]["warmup_steps"], 0);
        for (i, r) in a["rows"].as_array().unwrap().iter().enumerate() {
            // each block's bias by hand: ln(repetition p50 / predicted p50); the probe (40)
            // is the median of the blocks' probes
            let row = &got["validation"]["rows"][i];
            let pred = row["predicted"]["p50_ms"].as_f64().unwrap();
            for (b, rep) in row["repetitions"].as_array().unwrap().iter().enumerate() {
                let m = rep["measured"]["p50_ms"].as_f64().unwrap();
                let bias = r["blocks"][b]["bias"].as_f64().unwrap();
                assert!((bias - (m / pred).ln()).abs() < 1e-12);
                assert_eq!(r["blocks"][b]["probe_us"], [40.0, 60.0, 40.0][b]);
            }
            assert_eq!(r["probe_reference_us"], 40.0);
            // the line through (40, mean of blocks 0 and 2) and (60, block 1) at 40
            let bb = |b: usize| r["blocks"][b]["bias"].as_f64().unwrap();
            assert!((r["bias"].as_f64().unwrap() - (bb(0) + bb(2)) / 2.0).abs() < 1e-12);
        }
        // arms: 6 (before and after 3 blocks) against the profile's prices
        let arms = a["arms"].as_array().unwrap();
        assert_eq!(arms.len(), 6);
        assert_eq!(arms[0]["commit_us_per_granule"], 45.0);
        // components: the VMM rows' bands, each measured beside the model
        let comps = a["components"].as_array().unwrap();
        assert!(
            comps.iter().any(|c| c["policy"] == "e1")
                && comps.iter().all(|c| c["steps"].as_u64().unwrap() > 0)
        );
        // the text adds the verdicts and the tables
        run(argv(false)).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(
            text.contains("verdicts: bias ln(measured/predicted) per recorded block"),
            "{text}"
        );
        assert!(
            text.contains("per-call VMM prices") && text.contains("VMM arm before block 1"),
            "{text}"
        );
    }

    #[test]
    fn help_shows_only_what_validate_takes() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for other in [
            "sim sweep",
            "Inverse question",
            "--dram",
            "--target-tokens-per-s",
            "--link-gbps",
            "--predictor",
            "--handle-pool",
            "--timeline",
            "--expert-us",
        ] {
            assert!(!help.contains(other), "{other} in:\n{help}");
        }
        for own in ["--evict", "--budget", "--batch", "--split", "--measured"] {
            assert!(help.contains(own), "{own}");
        }
    }
}
