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

    /// With `--evict lru`: add a `vs_belady` block (policy or working set?): Belady/MIN's
    /// page-ins at the same budget, split and semantics, and the budget LRU needs to match
    /// them, from the exact curves of one more pass (`sim curve`). One token per step and
    /// sequence (no --batch above 1, --queue, --verify or --prefill-chunk).
    #[arg(long)]
    pub vs_belady: bool,

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
    let report = run_source(&args, &cfg, source, trace)?;
    let mut report = report;
    if args.vs_belady {
        report.vs_belady = Some(vs_belady(&args, &cfg, &report)?);
    }
    print_notes(&report);
    super::args_timing::warn_over_vram(std::iter::once(&report), args.timing.admission_cap);
    let memory = memory(&args, &cfg, &report)?;
    let text = if args.json {
        let mut v = serde_json::to_value(&report)?;
        if let (Some(m), Some(o)) = (&memory, v.as_object_mut()) {
            o.insert("memory".into(), serde_json::to_value(m)?);
        }
        serde_json::to_string_pretty(&v)? + "\n"
    } else {
        let memory = memory
            .map(|m| m.text("VRAM at the peak") + "\n")
            .unwrap_or_default();
        text::run_summary(&report)
            + &text::retention_summary(&report)
            + &text::timing_summary(&report)
            + &reports::text::steps::steps_summary(&report)
            + &memory
    };
    emit(args.out.as_deref(), &text)
}

/// Set where the run's steps come from ([`super::args_cache::CacheArgs::source`]). A trace whose header does not read is left
/// to the run, which reports it.
fn resolve_batching(args: &RunArgs, cfg: &mut RunConfig, trace: Option<&Path>) -> Result<()> {
    let has_passes = trace
        .and_then(|p| traces::read_header(p).ok())
        .is_some_and(|h| h.passes.is_some());
    let timed_or_stepped = cfg.timing.is_some() || !cfg.stepping.is_off();
    if let Some(rc) = cfg.retention.as_mut() {
        rc.batching.source = args.cache.source(has_passes, timed_or_stepped)?;
        if has_passes && args.cache.batching.is_none() && rc.batching.source.is_fixed() {
            eprintln!("{PASSES_NOT_REPLAYED}");
        }
    }
    Ok(())
}

/// Said when a trace records forward passes but the run steps it round-robin: the recorded
/// passes are replayed by untimed one-token runs only, so the figures are not the passes as
/// served.
const PASSES_NOT_REPLAYED: &str = "note: the trace records its forward passes, but a timed or \
    multi-token run (or one with --batch or --queue) replays its sequences round-robin \
    (--batching fixed), not the passes as served";

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

/// The `vs_belady` block of an LRU run `report` of `cfg`: the LRU and MIN curves of its
/// mechanism, split and semantics over its trace file (the embedded one in a temporary file).
fn vs_belady(args: &RunArgs, cfg: &RunConfig, report: &RunReport) -> Result<VsBelady> {
    use anyhow::bail;
    use policies::PolicyKind;
    let (Some(rc), Some(cache)) = (&cfg.retention, &report.cache) else {
        bail!("--vs-belady compares LRU with Belady/MIN under a budget: give --evict lru --budget ...");
    };
    if rc.cache.policy != PolicyKind::Lru {
        bail!(
            "--vs-belady compares LRU with Belady/MIN, but the run evicts by {}; give --evict lru",
            rc.cache.policy
        );
    }
    if rc.batching.batch != 1 || rc.batching.queue.is_some() || !cfg.stepping.is_off() {
        bail!("--vs-belady takes one token per step and sequence: drop --batch, --queue, --verify and --prefill-chunk");
    }
    if !rc.batching.source.is_fixed() {
        bail!("--vs-belady takes one token per step and sequence, and this run replays forward passes (recorded or continuous batching): give --batching fixed");
    }
    let curve_cfg = CurveConfig {
        mechanism: cfg.policy.clone(),
        phase: cfg.phase,
        sizes: cfg.sizes,
        policies: vec![PolicyKind::Lru, PolicyKind::Belady],
        split: rc.cache.split,
        semantics: rc.cache.semantics,
    };
    let embedded = match args.input.one_trace()? {
        Some(_) => None,
        None => Some(super::args_input::EmbeddedFile::create()?),
    };
    let path = args
        .input
        .one_trace()?
        .or(embedded.as_ref().map(|e| e.path()))
        .expect("a trace file or the embedded one");
    let profile = args.input.profile_trace.as_deref();
    let curves = curve_file(&curve_cfg, path, profile, &|_| {})?;
    let (lru, min) = (&curves.curves[0], &curves.curves[1]);
    let budget = match &report.retention {
        Some(i) => i.budget.clone(),
        None => rc.cache.budget.clone(),
    };
    Ok(sim::curve::vs_belady(
        lru,
        min,
        &budget,
        rc.cache.split,
        curves.largest_unit_bytes,
        cache.page_ins,
    )?)
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
