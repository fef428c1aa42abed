//! The library entry point of `sim run` and `sim sweep`: resolve a [`RunConfig`] against a
//! [`Workload`] (the evaluated trace and its profile trace) and produce a [`RunReport`].
//!
//! Open for extension: retention (`cache`), tiers, scheduling and timing add their own config
//! fields to [`RunConfig`] and optional blocks to [`RunReport`]; a block that is `None` is left
//! out of the JSON. The streaming block is computed for every run (it needs no budget).

use crate::cache::{Batching, PreparedRetention, RetentionConfig};
use crate::engine::build::record;
use crate::engine::Plans;
use crate::streaming::streaming_metrics;
use crate::verify::{Acceptance, Stepping};
use crate::verify_report;
use anyhow::{bail, Context, Result};
use policies::mechanisms::{self, BuildContext, ProfileStats, SizeOptions, Sizes};
use policies::{Mechanism, UnitMap};
use profile::ConstantName;
use rayon::prelude::*;
use serde::Serialize;
use std::path::Path;
use std::sync::OnceLock;
use traces::{KeySpace, PhaseSel, Trace};

/// The bundled granite-3.0-1b-a400m prose trace (prompt `english_prose`, 64 decode tokens),
/// embedded so `sim run` works from any directory. Attribution: traces/data/granite/NOTICE.
pub static EMBEDDED_PROSE: &[u8] = include_bytes!("../../traces/data/granite/prose.bin");

/// The label [`TraceInput::label`] takes for [`EMBEDDED_PROSE`].
pub const EMBEDDED_PROSE_LABEL: &str = "embedded:prose";

/// A loaded trace and where it came from.
#[derive(Clone, Debug)]
pub struct TraceInput {
    /// The path as given, or [`EMBEDDED_PROSE_LABEL`].
    pub label: String,
    pub trace: Trace,
}

impl TraceInput {
    /// Read the trace at `path`, or the embedded prose trace when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<TraceInput> {
        match path {
            Some(p) => {
                require_trace_file(p)?;
                // trace errors name the file themselves
                Ok(TraceInput {
                    label: p.display().to_string(),
                    trace: traces::read_file(p)?,
                })
            }
            None => Ok(TraceInput {
                label: EMBEDDED_PROSE_LABEL.to_string(),
                trace: traces::read_bytes(EMBEDDED_PROSE, EMBEDDED_PROSE_LABEL)
                    .context("the embedded prose trace is damaged (rebuild the binary)")?,
            }),
        }
    }
}

/// The error every command gives for a trace path that does not exist (it names the path and
/// the two ways to make a trace file) or that is a directory (it names the path and asks for a
/// file in it).
pub fn require_trace_file(p: &Path) -> Result<()> {
    require_file(
        &p.display().to_string(),
        p,
        "the path of a trace file (`sim trace import` converts router logs, `sim trace gen` writes synthetic traces)",
    )?;
    if p.is_dir() {
        bail!(
            "{}: is a directory, not a trace file; give the path of one trace file in it (e.g. {})",
            p.display(),
            p.join(first_bin(p).unwrap_or_else(|| "TRACE.bin".into()))
                .display()
        );
    }
    Ok(())
}

/// The first `.bin` file of directory `dir` by name, for an error's example.
fn first_bin(dir: &Path) -> Option<std::ffi::OsString> {
    let mut bins: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "bin") && e.path().is_file())
        .map(|e| e.file_name())
        .collect();
    bins.sort();
    bins.into_iter().next()
}

/// The error an input file that does not exist gets: `LABEL: no such file; give WANTED`
/// (`label` names it as the user gave it, `wanted` says what to give instead).
pub fn require_file(label: &str, p: &Path, wanted: &str) -> Result<()> {
    if !p.exists() {
        bail!("{label}: no such file; give {wanted}");
    }
    Ok(())
}

/// One run: which mechanism, which phase, which sizes. Build with struct update syntax from
/// [`RunConfig::default`] so added fields keep old call sites compiling.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunConfig {
    /// Mechanism spec as the user wrote it (see [`mechanisms::ACCEPTED_FORMS`]).
    pub policy: String,
    /// Phases of the trace to replay (`--phase`); the profile trace uses the same phases.
    pub phase: PhaseSel,
    /// `--expert-mib`, `--dtype`, `--granule-mib`.
    pub sizes: SizeOptions,
    /// Retention under a budget (`--evict`, `--budget`, ...); `None`: streaming regime only.
    pub retention: Option<crate::cache::RetentionConfig>,
    /// Discrete-event timing on a hardware profile (`--hw` and the timing flags); `None`: no timing.
    pub timing: Option<crate::engine::TimingConfig>,
    /// Tokens per step (`--verify`, `--acceptance`/`--accepted`, `--prefill-chunk`); off:
    /// one token of one sequence per step.
    #[serde(skip_serializing_if = "Stepping::is_off")]
    pub stepping: Stepping,
}

impl Default for RunConfig {
    /// `e2` (= `e2:hot`), decode phase, sizes from the header geometry in bf16, 2 MiB granule.
    fn default() -> Self {
        RunConfig {
            policy: "e2".to_string(),
            phase: PhaseSel::Decode,
            sizes: SizeOptions::default(),
            retention: None,
            timing: None,
            stepping: Stepping::default(),
        }
    }
}

/// The evaluated trace and the profile trace (for `hot` / `coact` orders), with profile
/// statistics computed once per phase on first use and shared by every run of a sweep.
pub struct Workload {
    pub trace: TraceInput,
    /// `None`: the evaluated trace is its own profile.
    pub profile: Option<TraceInput>,
    /// Per phase (decode, prefill, all): selection counts only, and counts + co-activation.
    counts: [OnceLock<ProfileStats>; 3],
    coact: [OnceLock<ProfileStats>; 3],
}

impl Workload {
    /// Pair a trace with an optional profile trace. Error when the profile trace's model has
    /// other expert counts per MoE layer than the evaluated trace's.
    pub fn new(trace: TraceInput, profile: Option<TraceInput>) -> Result<Workload> {
        check_workload(
            (&trace.label, &trace.trace.keyspace()),
            profile
                .as_ref()
                .map(|p| (p.label.as_str(), p.trace.keyspace()))
                .as_ref()
                .map(|(l, k)| (*l, k)),
        )?;
        Ok(Workload {
            trace,
            profile,
            counts: Default::default(),
            coact: Default::default(),
        })
    }

    /// The label of the profile trace (the evaluated trace's when none was given).
    pub fn profile_label(&self) -> &str {
        self.profile.as_ref().unwrap_or(&self.trace).label.as_str()
    }

    /// Profile statistics for `phase`, with co-activation counts when `coactivation`.
    pub fn profile_stats(&self, phase: PhaseSel, coactivation: bool) -> &ProfileStats {
        let i = match phase {
            PhaseSel::Decode => 0,
            PhaseSel::Prefill => 1,
            PhaseSel::All => 2,
        };
        let cell = if coactivation {
            &self.coact[i]
        } else {
            &self.counts[i]
        };
        let t = &self.profile.as_ref().unwrap_or(&self.trace).trace;
        cell.get_or_init(|| ProfileStats::new(t, phase, coactivation))
    }
}

/// The checks of [`Workload::new`] on the (label, key space) of a trace and of its profile
/// trace: every run's unit map indexes every expert instance (two u32 per instance), however
/// few the trace selects, so a header geometry whose index alone cannot fit is refused; and a
/// profile trace must have the trace's expert counts per MoE layer.
pub fn check_workload(trace: (&str, &KeySpace), profile: Option<(&str, &KeySpace)>) -> Result<()> {
    let (label, a) = trace;
    let keys = a.num_keys();
    traces::resources::check_memory(
        &format!("`{label}` declares {keys} expert instances; their unit-map index"),
        keys as u128 * 8,
        "the trace's geometry is beyond this machine",
    )?;
    if let Some((p_label, b)) = profile {
        if a.experts != b.experts {
            bail!(
                "--profile-trace `{}` has {} MoE layers with {:?} experts, but the trace `{}` \
                 has {} MoE layers with {:?}; the profile must come from the same model",
                p_label,
                b.num_moe_layers(),
                dedup(&b.experts),
                label,
                a.num_moe_layers(),
                dedup(&a.experts)
            );
        }
    }
    Ok(())
}

/// Runs of equal values collapsed to one (`[64, 64, 32, 64]` -> `[64, 32, 64]`), for short
/// messages about per-layer expert counts.
fn dedup(v: &[u16]) -> Vec<u16> {
    let mut out: Vec<u16> = v.to_vec();
    out.dedup();
    out
}

/// The resolved inputs of a run and the result of one run; defined beside the report blocks
/// they hold, so that reports read them back typed.
pub use reports::run::{RunInputs, RunReport};

/// Parse a spec, naming the flag it came from in the error.
pub fn parse_policy(spec: &str, flag: &str) -> Result<Box<dyn Mechanism>> {
    mechanisms::parse(spec).with_context(|| format!("bad {flag} value"))
}

/// Build the unit map of `cfg`'s mechanism for the workload's model.
pub fn build_units(cfg: &RunConfig, w: &Workload) -> Result<(UnitMap, Sizes)> {
    build_units_with(cfg, &w.trace.trace.header.model, |coactivation| {
        w.profile_stats(cfg.phase, coactivation)
    })
}

/// Build the unit map of `cfg`'s mechanism for `model`; `profile(coactivation)` gives the
/// profile statistics when the mechanism orders experts by them.
pub fn build_units_with<'p>(
    cfg: &RunConfig,
    model: &traces::ModelSpec,
    profile: impl FnOnce(bool) -> &'p ProfileStats,
) -> Result<(UnitMap, Sizes)> {
    let mech = parse_policy(&cfg.policy, "--policy")?;
    let sizes = Sizes::resolve(model, &cfg.sizes)?;
    let ks = traces::KeySpace::new(model);
    let profile = mech
        .needs_profile()
        .then(|| profile(mech.needs_coactivation()));
    let ctx = BuildContext {
        keyspace: &ks,
        sizes,
        profile,
    };
    let map = mech
        .build(&ctx)
        .with_context(|| format!("--policy {}", mech.spec()))?;
    Ok((map, sizes))
}

/// Run one configuration on a workload: units, streaming metrics, then (with a retention
/// config) one retention simulation that gives the cache report and, when the run is timed,
/// the plans the engine prices. Only an admission cap replans: it tries smaller batches. With
/// verified drafts on a hardware profile the same run with one token per decode step is timed
/// too (the `steps` block's speedup), and the setting again at the acceptances a bisection
/// tries (its break-even acceptance, [`verify_report::break_even_search`]).
pub fn run(cfg: &RunConfig, w: &Workload) -> Result<RunReport> {
    with_baseline(cfg, |c| run_once(c, w))
}

/// The report of `cfg` from `run_once` (a run's report and its mean decode step time, µs),
/// with verified drafts on a hardware profile completed by the `steps` block's comparison:
/// the same run at one token per decode step (its speedup) and the setting again at the
/// acceptances a bisection tries (its break-even acceptance,
/// [`verify_report::break_even_search`]).
pub fn with_baseline(
    cfg: &RunConfig,
    mut run_once: impl FnMut(&RunConfig) -> Result<(RunReport, Option<f64>)>,
) -> Result<RunReport> {
    let (mut report, decode_step_us) = run_once(cfg)?;
    let tps = |r: &RunReport| r.timing.as_ref().map(|t| t.tokens_per_s);
    let (Some(t), Some(step_us), true) = (tps(&report), decode_step_us, cfg.stepping.verify > 0)
    else {
        return Ok(report);
    };
    let with = |verify: u32, acceptance: Acceptance| RunConfig {
        stepping: Stepping {
            verify,
            acceptance,
            ..cfg.stepping
        },
        ..cfg.clone()
    };
    let (base, base_step_us) = run_once(&with(0, Acceptance::Fixed(0)))?;
    let (Some(steps), Some(b), Some(b_us)) = (&mut report.steps, tps(&base), base_step_us) else {
        return Ok(report);
    };
    verify_report::add_baseline(steps, t, step_us, b, b_us);
    let known = match cfg.stepping.acceptance {
        Acceptance::Probability(p) => Some((p, t)),
        Acceptance::Fixed(_) => None,
    };
    let k = cfg.stepping.verify;
    steps.break_even_acceptance = verify_report::break_even_search(b, known, |p| {
        let (r, _) = run_once(&with(k, Acceptance::Probability(p)))?;
        Ok(tps(&r).unwrap_or(0.0))
    })?;
    Ok(report)
}

/// A retention run's report blocks and its configuration with the budget resolved.
type RetentionRun = (crate::cache::RetentionOutcome, RetentionConfig);

/// The retention run of `cfg` (with `cfg.stepping`; `None` in the streaming regime) and, with
/// `record_plans`, the plans it (or streaming, with a stepping) decided.
fn retention_and_plans(
    cfg: &RunConfig,
    w: &Workload,
    map: &UnitMap,
    record_plans: bool,
) -> Result<(Option<RetentionRun>, Option<Plans>)> {
    let trace = &w.trace.trace;
    let profile = w.profile.as_ref().map(|p| &p.trace);
    let Some(rc) = &cfg.retention else {
        if cfg.stepping.is_off() {
            return Ok((None, None));
        }
        let batching = Batching {
            stepping: cfg.stepping,
            ..Batching::default()
        };
        return Ok((None, Some(record(trace, cfg.phase, map, batching, None)?.0)));
    };
    // the retention config with this run's stepping (the flags set it on the run)
    let rc = RetentionConfig {
        batching: Batching {
            stepping: cfg.stepping,
            ..rc.batching
        },
        ..rc.clone()
    };
    let prepared = PreparedRetention::new(trace, profile, map, cfg.phase, &rc)?;
    let (plans, out) = if record_plans {
        let run = Some((&prepared.workload, &prepared.cache));
        let (plans, out) = record(trace, cfg.phase, map, rc.batching, run)?;
        (
            Some(plans),
            out.expect("a retention run records its cache outcome"),
        )
    } else {
        (None, prepared.workload.run(map, &prepared.cache)?)
    };
    // the resolved budget (a --target-tokens-per-s search changes it) prices the timing
    let resolved = RetentionConfig {
        cache: prepared.cache.clone(),
        ..rc.clone()
    };
    Ok((Some((prepared.outcome(&rc, out), resolved)), plans))
}

/// [`run`] without the baseline: the report and the mean decode step time, µs (timed runs
/// with a decode step only).
fn run_once(cfg: &RunConfig, w: &Workload) -> Result<(RunReport, Option<f64>)> {
    cfg.stepping.check(cfg.phase)?;
    let (map, sizes) = build_units(cfg, w)?;
    let trace = &w.trace.trace;
    let streaming = streaming_metrics(trace, cfg.phase, &map)?;
    // experts placed on the CPU leave the GPU's units (the budget counts only the GPU's)
    let (map, placed, placed_notes) = crate::engine::cpu::placed(cfg, map, trace, sizes.dtype)?;
    let cfg = placed.as_ref().unwrap_or(cfg);
    let stepped = !cfg.stepping.is_off();
    let capped = cfg
        .timing
        .as_ref()
        .is_some_and(|t| t.admission_cap.is_some());
    let record_plans = stepped || (cfg.timing.is_some() && !capped);
    let (retention, recorded) = retention_and_plans(cfg, w, &map, record_plans)?;
    let mut steps = recorded
        .as_ref()
        .filter(|_| stepped)
        .map(|p| verify_report::steps_report(&cfg.stepping, p));
    let timing = cfg
        .timing
        .as_ref()
        .map(|tc| {
            crate::engine::run_timing(
                tc,
                trace,
                w.profile.as_ref().map(|p| &p.trace),
                &map,
                cfg.phase,
                retention.as_ref().map(|(_, rc)| rc),
                cfg.stepping,
                recorded.filter(|_| !capped),
            )
        })
        .transpose()?;
    if let (Some(s), Some(tc)) = (&mut steps, &cfg.timing) {
        let repeat = tc.profile.get(ConstantName::ExpertKernelRepeatBandwidth);
        s.repeat_slots_priced = Some(repeat.is_some());
    }
    let decode_step_us = timing.as_ref().and_then(|t| t.decode_step_us_mean);
    let retention = retention.map(|(r, _)| r);
    let mut notes = batch_notes(cfg, trace);
    notes.extend(placed_notes);
    notes.extend(timing.as_ref().map(|t| t.notes.clone()).unwrap_or_default());
    let report = RunReport {
        inputs: run_inputs(cfg, &map, sizes, trace, (&w.trace.label, w.profile_label())),
        streaming: Some(streaming),
        retention: retention.as_ref().map(|r| r.inputs.clone()),
        cache: retention.as_ref().map(|r| r.cache.clone()),
        tiers: retention.as_ref().and_then(|r| r.tiers.clone()),
        schedule: retention.as_ref().and_then(|r| r.schedule.clone()),
        target: retention.and_then(|r| r.target),
        notes,
        timing: timing.as_ref().map(|t| t.timing.clone()),
        timing_detail: timing.as_ref().map(|t| t.detail.clone()),
        prefetch: timing.as_ref().and_then(|t| t.prefetch.clone()),
        cpu: timing.as_ref().and_then(|t| t.cpu.clone()),
        vs_belady: None,
        admission: timing.and_then(|t| t.admission),
        steps,
    };
    Ok((report, decode_step_us))
}

/// The `inputs` block of a run of `cfg` over `map` on `trace` (whose header is all it reads),
/// the trace and the profile trace named by `labels`.
pub(crate) fn run_inputs(
    cfg: &RunConfig,
    map: &UnitMap,
    sizes: Sizes,
    trace: &Trace,
    labels: (&str, &str),
) -> RunInputs {
    RunInputs {
        policy: map.spec.clone(),
        trace: labels.0.to_string(),
        profile_trace: labels.1.to_string(),
        phase: cfg.phase,
        model: trace.header.model.name.clone(),
        moe_layers: trace.keyspace().num_moe_layers(),
        tokens: trace.total_tokens(cfg.phase) as u64,
        dtype: sizes.dtype,
        expert_bytes: sizes.expert_bytes,
        expert_mib: sizes.expert_bytes as f64 / crate::MIB,
        granule_bytes: map.granule_bytes,
    }
}

/// A warning when the batch is larger than the sequences that have tokens in the phase:
/// requests are the sequences' tokens round-robin, so the extra slots of a batch are filled
/// with later tokens of the same sequences, which decode one after the other in reality.
pub(crate) fn batch_notes(cfg: &RunConfig, trace: &Trace) -> Vec<String> {
    let Some(batch) = cfg.retention.as_ref().map(|r| r.batching.batch) else {
        return Vec::new();
    };
    let live = (0..trace.sequences.len())
        .filter(|&s| cfg.phase.phases().iter().any(|&p| trace.tokens(s, p) > 0))
        .count();
    if batch <= live {
        return Vec::new();
    }
    // One text for every batch size, so that a sweep over batch sizes warns once.
    vec![format!(
        "warning: the trace has {live} sequence(s) with {} tokens, fewer than --batch: each batch is then filled with consecutive tokens of the same sequences, which a real server decodes one after another; give a trace with at least as many sequences as the batch (e.g. `sim trace gen --sequences N`)",
        cfg.phase.as_str()
    )]
}

/// Run every configuration in parallel on the current rayon pool; results in `configs` order
/// whatever the thread count (each run is independent and deterministic).
pub fn sweep(configs: &[RunConfig], w: &Workload) -> Vec<Result<RunReport>> {
    sweep_with(configs, w, &|| {})
}

/// [`sweep`], calling `done` after each run (from the thread that ran it), e.g. to advance
/// a progress bar.
pub fn sweep_with(
    configs: &[RunConfig],
    w: &Workload,
    done: &(dyn Fn() + Sync),
) -> Vec<Result<RunReport>> {
    configs
        .par_iter()
        .map(|c| {
            let r = run(c, w);
            done();
            r
        })
        .collect()
}
