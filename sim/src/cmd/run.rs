//! `sim run`: one mechanism on one trace.

use super::args_cache::CacheArgs;
use super::args_input::{emit, InputArgs};
use super::args_steps::StepArgs;
use super::args_timing::TimingArgs;
use anyhow::Result;
use clap::Args;
use reports::run::VsBelady;
use reports::text::run as text;
use sim::bounded::curve::{curve_file, CurveConfig};
use sim::runner::{self, RunConfig, RunReport};
use sim::TraceSource;
use std::path::{Path, PathBuf};

/// Arguments of `sim run`.
#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub input: InputArgs,

    #[arg(long, default_value = "e2", value_name = "SPEC",
          help = format!("Residency mechanism, one of: {}", policies::mechanisms::forms_help()))]
    pub policy: String,

    /// Print one JSON object (inputs echo and metric blocks) instead of the summary.
    #[arg(long)]
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
    pub progress: super::args_progress::ProgressArgs,

    /// With --evict and --budget: add a `vs_belady` block (policy or working set?): Belady/MIN's
    /// page-ins at the same budget, split and semantics (its exact curve, one more pass), and
    /// the budget the policy needs to match them: from LRU's exact curve for lru, by bisection
    /// over runs at other budgets for the other policies (about log2(units) more runs). One
    /// token per step and sequence (no --batch above 1, --queue, --verify or --prefill-chunk).
    #[arg(long)]
    pub vs_belady: bool,

    /// With --hw: a 90% interval on tokens/s, step p50 and p99 from N runs under profiles
    /// whose constants are drawn within their measured spread (seed 0: deterministic; N times
    /// the run's time); unknown when the run prices a constant outside its measured range
    /// (docs/DESIGN.md, "Intervals on a run"). 0: none.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub intervals: u32,

    /// Read the run from FILE, a JSON run spec (as --dump-spec prints it) instead of the flags
    /// that describe it (--policy, --phase, --evict, --budget, ...: refused beside it); the
    /// trace, output and progress flags go beside it.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,

    /// Print the run spec (JSON) that the flags (or --spec) describe, without running; a run
    /// with settings a spec does not hold yet (timing, several tokens per step, sizes,
    /// batching, a DRAM tier, a tokens/s target) is refused.
    #[arg(long)]
    pub dump_spec: bool,
}

/// The run configuration `sim run`'s flags describe (the trace aside); an error naming the
/// flag when a combination is refused.
pub fn config(args: &RunArgs) -> Result<RunConfig> {
    Ok(RunConfig {
        policy: args.policy.clone(),
        phase: args.input.phase,
        sizes: args.input.sizes(),
        retention: args.cache.for_run()?,
        timing: args.timing.for_run(args.cache.seed)?,
        stepping: args.steps.for_run(args.input.phase, args.cache.seed)?,
    })
}

pub fn run(args: RunArgs) -> Result<()> {
    let trace = args.input.one_trace()?;
    let mut cfg = super::run_spec::config(&args)?;
    if args.dump_spec {
        return emit(args.out.as_deref(), &super::run_spec::dump(&cfg)?);
    }
    resolve_batching(&args, &mut cfg, trace)?;
    let auto_cut = args
        .timing
        .min_score_auto()
        .then(|| super::auto_cut::choose(&cfg, args.input.profile_trace.as_deref()))
        .transpose()?
        .map(|(cut, why)| {
            if let Some(t) = &mut cfg.timing {
                t.prefetch_min_score = cut;
            }
            why
        });
    let mut report = run_report(&args, &cfg, trace)?;
    if let (Some(why), Some(p)) = (&auto_cut, &mut report.prefetch) {
        p.min_score_auto = Some(why.clone());
    }
    report.notes.extend(auto_cut);
    if args.vs_belady {
        report.vs_belady = Some(vs_belady(&args, &cfg, &report)?);
    }
    let interval = (args.intervals > 0)
        .then(|| {
            sim::run_interval::run_interval(&cfg, &report, args.intervals, |c| {
                run_report(&args, c, trace)
            })
        })
        .transpose()?;
    print_notes(&report);
    if let Some(c) = super::checked::check(&cfg, &report)? {
        eprintln!("{}", c.line());
    }
    super::args_timing::warn_over_vram(std::iter::once(&report), args.timing.admission_cap);
    let memory = memory(&args, &cfg, &report)?;
    let text = if args.json {
        let mut v = serde_json::to_value(&report)?;
        if let (Some(m), Some(o)) = (&memory, v.as_object_mut()) {
            o.insert("memory".into(), serde_json::to_value(m)?);
        }
        if let (Some(i), Some(o)) = (&interval, v.as_object_mut()) {
            o.insert("interval90".into(), serde_json::to_value(i)?);
        }
        serde_json::to_string_pretty(&v)? + "\n"
    } else {
        let memory = memory
            .map(|m| m.text("VRAM at the peak") + "\n")
            .unwrap_or_default();
        text::run_summary(&report)
            + &text::retention_summary(&report)
            + &text::timing_summary(&report)
            + &interval.map(|i| i.line()).unwrap_or_default()
            + &reports::text::steps::steps_summary(&report)
            + &memory
    };
    emit(args.out.as_deref(), &text)
}

/// The report of `cfg` on the command's trace (a file, the embedded trace beside a profile
/// file, or the embedded trace).
fn run_report(args: &RunArgs, cfg: &RunConfig, trace: Option<&Path>) -> Result<RunReport> {
    let source = match trace {
        // a trace file: streamed in bounded memory
        Some(path) => TraceSource::File(path.to_path_buf()),
        // the embedded trace: loaded, or streamed beside a profile file (checked here, so
        // that its errors name the flag)
        None => {
            if let Some(profile) = args.input.profile_trace.as_deref() {
                super::args_input::EmbeddedFile::check(profile)?;
            }
            TraceSource::Bundled
        }
    };
    run_source(args, cfg, source, trace)
}

/// Set where the run's steps come from ([`super::args_cache::CacheArgs::source`]). A trace whose header does not read is left
/// to the run, which reports it.
fn resolve_batching(args: &RunArgs, cfg: &mut RunConfig, trace: Option<&Path>) -> Result<()> {
    let has_passes = trace
        .and_then(|p| traces::read_header(p).ok())
        .is_some_and(|h| h.passes.is_some());
    let stepped = !cfg.stepping.is_off();
    let capped = cfg
        .timing
        .as_ref()
        .is_some_and(|t| t.admission_cap.is_some());
    if let Some(rc) = cfg.retention.as_mut() {
        rc.batching.source = args.cache.source(has_passes, stepped, capped)?;
        if has_passes && args.cache.batching.is_none() && rc.batching.source.is_fixed() {
            eprintln!("{PASSES_NOT_REPLAYED}");
        }
    } else if has_passes && cfg.timing.is_some() {
        eprintln!("{STREAMING_ROUND_ROBIN}");
    }
    if has_passes {
        eprintln!("{STREAMING_PER_TOKEN}");
    }
    Ok(())
}

/// Said of a trace with passes: the streaming block's figures are per token (a row of a pass
/// on its own), as on any trace, not per forward pass.
pub const STREAMING_PER_TOKEN: &str = "note: the streaming block counts per token (each row of \
    a forward pass on its own, a step being one token), not per forward pass; the cache \
    regime (--evict POLICY --budget B) steps the recorded passes";

/// Said when a timed run in the streaming regime (no retention) is on a trace with passes:
/// its steps are one token of one sequence, round-robin, not the passes.
pub const STREAMING_ROUND_ROBIN: &str = "note: the trace records its forward passes, but a \
    timed run in the streaming regime (no --evict) steps one token of one sequence at a time, \
    round-robin; add --evict POLICY --budget B to replay the passes as served";

/// Said when a trace records forward passes but the run steps it round-robin: the flags that
/// size round-robin batches or take several tokens per step leave the recorded passes aside,
/// so the figures are not the passes as served.
pub const PASSES_NOT_REPLAYED: &str = "note: the trace records its forward passes, but a run \
    with --batch, --queue, --admission-cap or several tokens per step (--verify, \
    --prefill-chunk) replays its sequences round-robin (--batching fixed), not the passes as \
    served";

/// Where the VRAM goes at the run's peak, when the run sizes the model's weights itself
/// (`--model-config` or `--nonexpert-dtype`, on a hardware profile): the experts resident at
/// the peak, the non-expert weights by part, the KV cache and what is free. `None`
/// otherwise, so that the output of other runs is unchanged.
fn memory(args: &RunArgs, cfg: &RunConfig, r: &RunReport) -> Result<Option<sim::plan::Memory>> {
    let given = args.timing.model_config.is_some() || args.timing.nonexpert_dtype.is_some();
    let (Some(t), Some(timing), Some(detail)) = (&cfg.timing, &r.timing, &r.timing_detail) else {
        return Ok(None);
    };
    if !given {
        return Ok(None);
    }
    let model = match args.input.one_trace()? {
        Some(p) => traces::read_header(p)?.model,
        None => runner::TraceInput::load(None)?.trace.header.model,
    };
    let c = sim::model_profile::ComputeModel::new(
        t.compute,
        &model,
        r.inputs.expert_bytes,
        &t.profile,
        &t.overrides,
    )?;
    let experts = r
        .cache
        .as_ref()
        .map_or(0.0, |c| c.peak_resident_mib * sim::MIB);
    Ok(Some(sim::plan::Memory::of(
        experts,
        timing.peak_mapped_mib,
        detail.usable_mib,
        &c,
        0.0,
    )))
}

/// The `vs_belady` block of a retention run `report` of `cfg`: Belady/MIN's curve (and
/// LRU's, for an LRU run) of its mechanism, split and semantics over its trace file (the
/// embedded one in a temporary file); for any other policy the matching budget by bisection
/// over runs of the same configuration at other budgets.
fn vs_belady(args: &RunArgs, cfg: &RunConfig, report: &RunReport) -> Result<VsBelady> {
    use anyhow::bail;
    use policies::PolicyKind;
    let (Some(rc), Some(cache)) = (&cfg.retention, &report.cache) else {
        bail!("--vs-belady compares a policy with Belady/MIN under a budget: give --evict POLICY --budget ...");
    };
    if rc.batching.batch != 1 || rc.batching.queue.is_some() || !cfg.stepping.is_off() {
        bail!("--vs-belady takes one token per step and sequence: drop --batch, --queue, --verify and --prefill-chunk");
    }
    if !rc.batching.source.is_fixed() {
        bail!("--vs-belady takes one token per step and sequence, and this run replays forward passes (recorded or continuous batching): give --batching fixed");
    }
    let policy = rc.cache.policy;
    let exact = matches!(policy, PolicyKind::Lru | PolicyKind::Belady);
    let mut kinds = vec![PolicyKind::Belady];
    if policy == PolicyKind::Lru {
        kinds.insert(0, PolicyKind::Lru);
    }
    let curve_cfg = CurveConfig {
        mechanism: cfg.policy.clone(),
        phase: cfg.phase,
        sizes: cfg.sizes,
        policies: kinds,
        split: rc.cache.split,
        semantics: rc.cache.semantics,
    };
    let trace = args.input.one_trace()?;
    let embedded = match trace {
        Some(_) => None,
        None => Some(super::args_input::EmbeddedFile::create()?),
    };
    let path = trace
        .or(embedded.as_ref().map(|e| e.path()))
        .expect("a trace file or the embedded one");
    let profile = args.input.profile_trace.as_deref();
    let curves = curve_file(&curve_cfg, path, profile, &|_| {})?;
    let min = curves.curve(PolicyKind::Belady).expect("recorded");
    let budget = match &report.retention {
        Some(i) => i.budget.clone(),
        None => rc.cache.budget.clone(),
    };
    let (b, belady) =
        sim::curve::belady_at(min, &budget, rc.cache.split, curves.largest_unit_bytes)?;
    let matching = match curves.curve(policy) {
        Some(own) => sim::curve::budget_reaching(own, belady),
        None => sim::curve::bisect_budget(curves.units, belady, |units| {
            // page-ins only: the same cell untimed at `units` units
            let mut at = RunConfig {
                timing: None,
                ..cfg.clone()
            };
            if let Some(r) = at.retention.as_mut() {
                r.cache.budget = policies::Budget::Units(units as u64);
            }
            let r = sim::bounded::run_file(&at, path, profile, &|_| {})?;
            Ok::<u64, anyhow::Error>(r.cache.map_or(0, |c| c.page_ins))
        })?,
    };
    Ok(VsBelady {
        policy,
        budget_units: b as u64,
        policy_page_ins: cache.page_ins,
        belady_page_ins: belady,
        policy_budget_matching_belady: matching.map(|b| b as u64),
        matched_by: if exact { "exact-curve" } else { "bisection" }.to_string(),
    })
}

/// The front door ([`sim::run_with`]) behind a progress bar over its passes' tokens (of the
/// trace file `path`, when there is one).
fn run_source(
    args: &RunArgs,
    cfg: &RunConfig,
    source: TraceSource,
    path: Option<&Path>,
) -> Result<RunReport> {
    let profile = args.input.profile_trace.as_deref();
    let tokens = path.map_or(0, |p| super::args_progress::header_tokens(p, cfg.phase));
    let passes = sim::bounded::passes(cfg, profile.is_some());
    let bar = args
        .progress
        .bar("sim run", passes * tokens, "tokens read, all passes")
        .growing_by(tokens);
    let report = sim::run_with(cfg, source, profile, &|n| bar.inc(n));
    bar.finish();
    report.map_err(super::errors::from_engine)
}

/// Print a run's notes (files written, what was left out, warnings) to stderr, one line
/// each; a note already printed by an earlier run of the same command (a sweep's rows share
/// their warnings) is not repeated.
pub fn print_notes(r: &RunReport) {
    use std::collections::BTreeSet;
    static PRINTED: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());
    let mut printed = PRINTED.lock().unwrap_or_else(|e| e.into_inner());
    for note in &r.notes {
        if printed.insert(note.clone()) {
            eprintln!("{note}");
        }
    }
}
