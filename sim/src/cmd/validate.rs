//! `sim validate`: replay a trace for real on the local GPU and compare with the simulator.
//!
//! Per mechanism: the retention driver's plans (page-ins and evictions of every (step, layer)
//! group) are recorded once; the discrete-event engine prices them (the prediction) and the
//! `validate` crate executes the same plans on the GPU (the measurement: VMM commits and pinned
//! H2D copies, or managed memory with demand faults, and the int4 expert kernels), timing each
//! decode step with CUDA events. Both see the same steps, so the step-time distributions compare
//! one to one. `--repeat N` replays every policy N times (interleaved, order rotated) and
//! takes the error against the median of the repetitions' p50s; `--breakdown` sets the replay's
//! host time per phase beside the engine's split of the same steps; `--measured FILE` re-prices
//! a stored replay without a GPU.

use super::args_cache::CacheArgs;
use super::args_input::{emit, InputArgs};
use super::args_timing::TimingArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use sim::cache::Batching;
use sim::cost::{CostModel, CostOptions, Paging};
use sim::engine::{build::plans, replay, EngineOptions, Plans, PredictorKind, StepParts};
use sim::model_profile::ComputeModel;
use sim::runner::{build_units, parse_policy, RunConfig};
use std::fmt::Write;
use std::path::PathBuf;
use validate::stats::Summary;
use validate::{
    HostBreakdown, ReplayGroup, ReplayMeasurement, ReplayOptions, ReplayPaging, ReplayPlan,
};

/// Arguments of `sim validate`.
#[derive(Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Mechanisms to replay, comma-separated: eN[:index|hot|coact], region:R, os4k, os64k, os2m
    /// (each is predicted and measured on the same plans).
    #[arg(long, value_delimiter = ',', required = true, value_name = "SPEC")]
    pub policy: Vec<String>,

    /// Replay only the first N decode steps of the trace (prediction and measurement both;
    /// default: every step).
    #[arg(long, value_name = "N")]
    pub steps: Option<usize>,

    /// Replay every policy N times, the policies interleaved within each repetition and their
    /// order rotated by one per repetition (so drifts of the machine hit all alike). Reports
    /// each repetition's p50, the median of the repetitions' p50s (the figure the error is
    /// taken against) and their spread. Back-to-back replays on an H200 differed by up to 19%
    /// (BENCHMARKS.md, issue 7), so deciding a 10% goal needs 3 or more.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=50))]
    pub repeat: u32,

    /// Also print, per policy, where the time of a step went: the real replay's host phases
    /// (router wait, VMM commit and decommit calls, H2D enqueues, launches) next to the
    /// engine's predicted split (compute, router round trip, commits, decommits, copies,
    /// faults, stall), means per step. The JSON always holds both, step by step.
    #[arg(long)]
    pub breakdown: bool,

    /// Re-price instead of replaying: take the measurements from FILE (the JSON a `sim
    /// validate --json` run wrote, same trace, policies, retention and --steps) and compare
    /// them with this build's prediction under --hw. Needs no GPU: for trying a cost-model
    /// or profile change against real replays.
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
    pub cache: CacheArgs,

    #[command(flatten)]
    pub timing: TimingArgs,
}

/// p50, p99 and mean of step times, ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

impl StepStats {
    /// Nearest-rank percentiles (rank ceil(q x n)) and the mean of `us` (µs), in ms.
    pub fn of(us: &[f64]) -> StepStats {
        let mut s = us.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let q = |p: f64| {
            if n == 0 {
                0.0
            } else {
                s[((p * n as f64).ceil() as usize).clamp(1, n) - 1] / 1e3
            }
        };
        StepStats {
            p50_ms: q(0.50),
            p99_ms: q(0.99),
            mean_ms: if n == 0 {
                0.0
            } else {
                s.iter().sum::<f64>() / n as f64 / 1e3
            },
        }
    }
}

/// (predicted - measured) / measured, in percent.
fn error_pct(pred: f64, meas: f64) -> f64 {
    100.0 * (pred - meas) / meas
}

/// One repetition of a policy's real replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Repetition {
    /// Position of this policy within its repetition (0 = replayed first).
    pub position: u32,
    /// Step statistics of this repetition, ms.
    pub measured: StepStats,
    /// Every step's measured time, µs.
    pub step_us: Vec<f64>,
    /// Every step's host breakdown.
    pub host: Vec<HostBreakdown>,
}

/// One mechanism's row of the `validation` block. With `--repeat N`, `measured` holds the
/// median over the N repetitions of each repetition's p50, p99 and mean (for N = 1, the one
/// replay's), and the errors are taken against it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ValidationRow {
    pub policy: String,
    pub steps: usize,
    pub page_ins: u64,
    pub measured: StepStats,
    pub predicted: StepStats,
    /// Error of the prediction, percent of the measurement: p50, p99, mean.
    pub error_pct_p50: f64,
    pub error_pct_p99: f64,
    pub error_pct_mean: f64,
    /// The first repetition's full measurement.
    pub replay: ReplayMeasurement,
    /// Repetitions of the real replay (`--repeat`).
    #[serde(default = "one")]
    pub repeat: u32,
    /// Each repetition, in order.
    #[serde(default)]
    pub repetitions: Vec<Repetition>,
    /// Smallest and largest p50 of the repetitions, ms, and (max - min) / median, percent.
    #[serde(default)]
    pub measured_p50_min_ms: f64,
    #[serde(default)]
    pub measured_p50_max_ms: f64,
    #[serde(default)]
    pub measured_p50_spread_pct: f64,
    /// Error of the p50 prediction against the slowest and the fastest repetition's p50,
    /// percent (the range the error moves in over the repetitions).
    #[serde(default)]
    pub error_pct_p50_range: [f64; 2],
    /// The engine's predicted time of every replayed step, µs.
    #[serde(default)]
    pub predicted_step_us: Vec<f64>,
    /// The engine's time split of every replayed step.
    #[serde(default)]
    pub predicted_parts: Vec<StepParts>,
}

fn one() -> u32 {
    1
}

/// Repetition order: in repetition `rep`, position `i` replays policy `(i + rep) mod n`.
pub fn rotation(rep: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |i| (i + rep) % n)
}

/// The combined measurement of repetitions: the median of their p50s, p99s and means
/// (`Summary` median: the mean of the two middle values for an even count), and the summary
/// of the p50s (min, max, spread). `None` without repetitions.
pub fn combine(reps: &[StepStats]) -> Option<(StepStats, Summary)> {
    let p50 = Summary::of(&reps.iter().map(|r| r.p50_ms).collect::<Vec<_>>())?;
    let p99 = Summary::of(&reps.iter().map(|r| r.p99_ms).collect::<Vec<_>>())?;
    let mean = Summary::of(&reps.iter().map(|r| r.mean_ms).collect::<Vec<_>>())?;
    Some((
        StepStats {
            p50_ms: p50.median,
            p99_ms: p99.median,
            mean_ms: mean.median,
        },
        p50,
    ))
}

/// The `validation` block.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Validation {
    pub trace: String,
    pub model: String,
    pub hw: String,
    pub expert_bytes: u64,
    /// Retention echo: `evict@budget`, or `streaming`.
    pub retention: String,
    pub rows: Vec<ValidationRow>,
}

pub fn run(args: ValidateArgs) -> Result<()> {
    for spec in &args.policy {
        parse_policy(spec, "--policy")?;
    }
    let seed = args.cache.seed;
    let Some(tc) = args.timing.for_run(seed)? else {
        bail!("`sim validate` needs --hw: the profile that prices the prediction (e.g. --hw h200-linux, or the JSON `sim calibrate` wrote)");
    };
    if tc.predictor != PredictorKind::None
        || tc.handle_pool
        || tc.deferred_unmap
        || tc.serial_loader
        || tc.admission_cap.is_some()
        || tc.timeline.is_some()
        || tc.overrides.nonexpert_us.is_some()
        || tc.overrides.expert_us.is_some()
    {
        bail!("`sim validate` replays the default engine (no --predictor, --handle-pool, --deferred-unmap, --serial-loader, --admission-cap, --timeline, --nonexpert-us or --expert-us): the real replay runs those paths as the engine's defaults do; leave these flags out");
    }
    let retention = args.cache.for_run()?;
    if retention.as_ref().is_some_and(|r| r.target.is_some()) {
        bail!("`sim validate` takes a fixed --budget; --target-tokens-per-s is a search, run it with `sim run` first");
    }
    let w = args.input.workload()?;
    let trace = &w.trace.trace;
    let model = &trace.header.model;
    let Some(hidden) = model.hidden_size else {
        bail!("the trace header of '{}' records no hidden size: the replay's expert kernels need it (re-import the trace with the model geometry)", model.name);
    };
    let hw = profile::load(&tc.hw)?;
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
    let ks = trace.keyspace();
    // Price every policy first (deterministic, no GPU), then replay them.
    struct Prepared {
        spec: String,
        map: policies::UnitMap,
        rp: ReplayPlan,
        peak: u64,
        steps: usize,
        page_ins: u64,
        predicted_step_us: Vec<f64>,
        predicted_parts: Vec<StepParts>,
    }
    let mut prepared: Vec<Prepared> = Vec::new();
    let mut expert_bytes = 0;
    for spec in &args.policy {
        let cfg = RunConfig {
            policy: spec.clone(),
            phase: args.input.phase,
            sizes: args.input.sizes(),
            retention: retention.clone(),
            timing: None,
        };
        let (map, _) = build_units(&cfg, &w)?;
        expert_bytes = map.expert_bytes;
        let batching = retention
            .as_ref()
            .map(|r| r.batching)
            .unwrap_or(Batching::default());
        let p = plans(
            trace,
            args.input.phase,
            &map,
            batching,
            w.profile.as_ref().map(|t| &t.trace),
            retention.as_ref().map(|r| &r.cache),
        )?;
        let paging = Paging::of_spec(&map.spec);
        let cost = CostModel::new(&hw, paging, CostOptions::default())?;
        let mut compute =
            ComputeModel::new(tc.compute, model, map.expert_bytes, &hw, &tc.overrides)?;
        // the replay runs no attention kernel and so reads no KV cache: price none either
        compute.kv_us_per_token = 0.0;
        let pred = replay(
            &p,
            &map,
            &ks,
            &cost,
            &compute,
            EngineOptions {
                seed,
                ..EngineOptions::default()
            },
        )?;
        let steps = args.steps.unwrap_or(p.steps.len()).min(p.steps.len());
        if steps == 0 {
            bail!(
                "the trace has no {} steps to replay",
                args.input.phase.as_str()
            );
        }
        let moe_layers = p.moe_layers.max(1);
        let nonexpert_bytes_per_layer = if compute.nonexpert_us > 0.0 {
            (compute.nonexpert_bytes / moe_layers as f64) as u64
        } else {
            0
        };
        let rp = replay_plan(&p, steps, paging, hidden as u64, nonexpert_bytes_per_layer);
        let page_ins = rp.groups.iter().map(|g| g.page_ins.len() as u64).sum();
        let peak = (pred.peak_mapped_bytes - compute.nonexpert_bytes).max(0.0) as u64;
        prepared.push(Prepared {
            spec: map.spec.clone(),
            map,
            rp,
            peak,
            steps,
            page_ins,
            predicted_step_us: pred.step_us[..steps].to_vec(),
            predicted_parts: pred.step_parts[..steps].to_vec(),
        });
    }
    let n = prepared.len();
    let mut measured: Vec<Vec<(u32, ReplayMeasurement)>> = vec![Vec::new(); n];
    if let Some((path, rows)) = &earlier {
        for (pp, m) in prepared.iter().zip(measured.iter_mut()) {
            let Some(r) = rows.iter().find(|r| r.policy == pp.spec) else {
                bail!(
                    "{} holds no row for --policy {} (it has: {}); pass the policies it was measured with",
                    path.display(),
                    pp.spec,
                    rows.iter().map(|r| r.policy.as_str()).collect::<Vec<_>>().join(", ")
                );
            };
            if r.steps != pp.steps {
                bail!(
                    "{} measured {} steps of --policy {}, this run predicts {}: pass --steps {}",
                    path.display(),
                    r.steps,
                    pp.spec,
                    pp.steps,
                    r.steps
                );
            }
            *m = repetitions_of(r);
        }
    }
    let replays = if earlier.is_some() {
        0
    } else {
        args.repeat as usize
    };
    for r in 0..replays {
        for (position, i) in rotation(r, n).enumerate() {
            let pp = &prepared[i];
            eprintln!(
                "validate: {} on {}: {} steps, {} page-ins, replaying on the GPU (repetition {} of {})",
                pp.spec,
                w.trace.label,
                pp.steps,
                pp.page_ins,
                r + 1,
                args.repeat
            );
            let meas = validate::replay(
                &pp.rp,
                &pp.map,
                pp.peak,
                ReplayOptions {
                    device: args.device,
                },
            )
            .with_context(|| format!("replaying --policy {} on the GPU", pp.spec))?;
            measured[i].push((position as u32, meas));
        }
    }
    let mut rows = Vec::new();
    for (pp, reps) in prepared.into_iter().zip(measured) {
        rows.push(row(
            pp.spec,
            pp.steps,
            pp.page_ins,
            pp.predicted_step_us,
            pp.predicted_parts,
            reps,
        )?);
    }
    let v = Validation {
        trace: w.trace.label.clone(),
        model: model.name.clone(),
        hw: hw.name.clone(),
        expert_bytes,
        retention: match &retention {
            Some(r) => format!("{:?}@{:?}", r.cache.policy, r.cache.budget),
            None => "streaming".into(),
        },
        rows,
    };
    let text = if args.json {
        serde_json::to_string_pretty(&serde_json::json!({ "validation": v }))? + "\n"
    } else if args.breakdown {
        table(&v) + "\n" + &breakdown_table(&v)
    } else {
        table(&v)
    };
    emit(args.out.as_deref(), &text)
}

/// The rows of the `validation` block in `path`, with the path.
fn read_measured(path: &std::path::Path) -> Result<(PathBuf, Vec<ValidationRow>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --measured {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("--measured {} is not JSON", path.display()))?;
    let rows = v
        .get("validation")
        .and_then(|b| b.get("rows"))
        .cloned()
        .with_context(|| {
            format!(
                "--measured {} has no validation.rows: pass a file `sim validate --json` wrote",
                path.display()
            )
        })?;
    let rows: Vec<ValidationRow> = serde_json::from_value(rows).with_context(|| {
        format!(
            "--measured {}: validation.rows do not parse",
            path.display()
        )
    })?;
    Ok((path.to_path_buf(), rows))
}

/// The repetitions `(position, measurement)` a stored row holds (one, the `replay`, for
/// files written before `--repeat`).
fn repetitions_of(r: &ValidationRow) -> Vec<(u32, ReplayMeasurement)> {
    if r.repetitions.is_empty() {
        return vec![(0, r.replay.clone())];
    }
    r.repetitions
        .iter()
        .map(|x| {
            (
                x.position,
                ReplayMeasurement {
                    step_us: x.step_us.clone(),
                    host: x.host.clone(),
                    ..r.replay.clone()
                },
            )
        })
        .collect()
}

/// A policy's row from its prediction and its repetitions `(position, measurement)`.
fn row(
    policy: String,
    steps: usize,
    page_ins: u64,
    predicted_step_us: Vec<f64>,
    predicted_parts: Vec<StepParts>,
    reps: Vec<(u32, ReplayMeasurement)>,
) -> Result<ValidationRow> {
    let repetitions: Vec<Repetition> = reps
        .iter()
        .map(|(position, m)| Repetition {
            position: *position,
            measured: StepStats::of(&m.step_us),
            step_us: m.step_us.clone(),
            host: m.host.clone(),
        })
        .collect();
    let stats: Vec<StepStats> = repetitions.iter().map(|r| r.measured).collect();
    let Some((measured, p50s)) = combine(&stats) else {
        bail!("no finite measurement of --policy {policy}: the replay returned no step times");
    };
    let predicted = StepStats::of(&predicted_step_us);
    let Some((_, first)) = reps.into_iter().next() else {
        bail!("--policy {policy} was not replayed");
    };
    Ok(ValidationRow {
        policy,
        steps,
        page_ins,
        error_pct_p50: error_pct(predicted.p50_ms, measured.p50_ms),
        error_pct_p99: error_pct(predicted.p99_ms, measured.p99_ms),
        error_pct_mean: error_pct(predicted.mean_ms, measured.mean_ms),
        measured,
        predicted,
        replay: first,
        repeat: repetitions.len() as u32,
        measured_p50_min_ms: p50s.min,
        measured_p50_max_ms: p50s.max,
        measured_p50_spread_pct: 100.0 * p50s.spread,
        error_pct_p50_range: [
            error_pct(predicted.p50_ms, p50s.max),
            error_pct(predicted.p50_ms, p50s.min),
        ],
        repetitions,
        predicted_step_us,
        predicted_parts,
    })
}

/// The plain-data plan of the first `steps` steps of `p` for the GPU replay.
pub fn replay_plan(
    p: &Plans,
    steps: usize,
    paging: Paging,
    hidden: u64,
    nonexpert_bytes_per_layer: u64,
) -> ReplayPlan {
    ReplayPlan {
        paging: match paging {
            Paging::Vmm => ReplayPaging::Vmm,
            Paging::Os => ReplayPaging::Os,
        },
        groups: p
            .groups
            .iter()
            .take_while(|g| (g.step as usize) < steps)
            .map(|g| ReplayGroup {
                step: g.step,
                moe_layer: g.moe_layer,
                keys: p.keys(g).to_vec(),
                page_ins: p.page_ins(g).to_vec(),
                evicted: p.evicted(g).to_vec(),
            })
            .collect(),
        preloaded: p.preloaded.clone(),
        steps,
        moe_layers: p.moe_layers,
        hidden: hidden as usize,
        nonexpert_bytes_per_layer,
    }
}

/// The human-readable validation table.
fn table(v: &Validation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "trace {} ({}), expert {:.2} MiB, {}, profile {}",
        v.trace,
        v.model,
        v.expert_bytes as f64 / sim::MIB,
        v.retention,
        v.hw
    );
    let _ = writeln!(
        s,
        "{:<14} {:>6} {:>9}   {:>27}   {:>27}   {:>22}",
        "policy",
        "steps",
        "page-ins",
        "measured p50/p99/mean ms",
        "predicted p50/p99/mean ms",
        "error % p50/p99/mean"
    );
    for r in &v.rows {
        let _ = writeln!(
            s,
            "{:<14} {:>6} {:>9}   {:>8.3} {:>8.3} {:>9.3}   {:>8.3} {:>8.3} {:>9.3}   {:>6.1} {:>6.1} {:>7.1}",
            r.policy,
            r.steps,
            r.page_ins,
            r.measured.p50_ms,
            r.measured.p99_ms,
            r.measured.mean_ms,
            r.predicted.p50_ms,
            r.predicted.p99_ms,
            r.predicted.mean_ms,
            r.error_pct_p50,
            r.error_pct_p99,
            r.error_pct_mean
        );
        if r.repetitions.len() > 1 {
            let p50s: Vec<String> = r
                .repetitions
                .iter()
                .map(|x| format!("{:.3}", x.measured.p50_ms))
                .collect();
            let _ = writeln!(
                s,
                "{:<14} p50 of {} repetitions: {} ms; median {:.3}, spread {:.1}%, error {:+.1}% ({:+.1}..{:+.1}%)",
                "",
                r.repetitions.len(),
                p50s.join(" / "),
                r.measured.p50_ms,
                r.measured_p50_spread_pct,
                r.error_pct_p50,
                r.error_pct_p50_range[0],
                r.error_pct_p50_range[1]
            );
        }
    }
    s
}

/// Means per step of the real replay's host phases (over every repetition) and of the
/// engine's predicted split, per policy, ms.
fn breakdown_table(v: &Validation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "where a step's time goes, ms per step (means over steps and repetitions)"
    );
    for r in &v.rows {
        let host: Vec<&HostBreakdown> = r.repetitions.iter().flat_map(|x| &x.host).collect();
        let nh = host.len().max(1) as f64;
        let h = |f: fn(&HostBreakdown) -> f64| host.iter().map(|b| f(b)).sum::<f64>() / nh / 1e3;
        let np = r.predicted_parts.len().max(1) as f64;
        let p = |f: fn(&StepParts) -> f64| r.predicted_parts.iter().map(f).sum::<f64>() / np / 1e3;
        if host.is_empty() {
            let _ = writeln!(
                s,
                "{:<14} real host:  not recorded (a replay from before the breakdown)",
                r.policy
            );
        }
        let measured_mean = r
            .repetitions
            .iter()
            .map(|x| x.measured.mean_ms)
            .sum::<f64>()
            / r.repetitions.len().max(1) as f64;
        if !host.is_empty() {
            let _ = writeln!(
            s,
            "{:<14} real host:  router wait {:.3}  evict {:.3}  commit {:.3}  h2d enqueue {:.3}  launch+events {:.3}  late wait {:.3}  late evict {:.3}  = {:.3} (GPU step mean {:.3}; page-ins {:.1}, evictions {:.1} per step)",
            r.policy,
            h(|b| b.router_wait_us),
            h(|b| b.evict_us),
            h(|b| b.commit_us),
            h(|b| b.h2d_enqueue_us),
            h(|b| b.launch_us),
            h(|b| b.late_wait_us),
            h(|b| b.late_evict_us),
            h(HostBreakdown::total_us),
            measured_mean,
            h(|b| b.page_ins as f64) * 1e3,
            h(|b| b.evictions as f64) * 1e3,
            );
        }
        let _ = writeln!(
            s,
            "{:<14} predicted: compute {:.3} (experts {:.3})  router sync {:.3}  commit {:.3}  decommit {:.3}  copy {:.3}  faults {:.3}  stall {:.3}  (step mean {:.3})",
            "",
            p(|x| x.compute_us),
            p(|x| x.expert_us),
            p(|x| x.host_sync_us),
            p(|x| x.commit_us),
            p(|x| x.decommit_us),
            p(|x| x.copy_us),
            p(|x| x.fault_us),
            p(|x| x.stall_us),
            r.predicted.mean_ms,
        );
        // the same per call sequence: µs per page-in and per eviction, real vs model
        let (pi, ev) = (h(|b| b.page_ins as f64), h(|b| b.evictions as f64));
        if !host.is_empty() && pi > 0.0 {
            let per = |v: f64, n: f64| {
                if n > 0.0 {
                    format!("{:.1}", v / n)
                } else {
                    "-".into()
                }
            };
            let _ = writeln!(
                s,
                "{:<14} per page-in: commit {} µs (model {}), H2D enqueue {} µs; per eviction: decommit {} µs (model {})",
                "",
                per(h(|b| b.commit_us), pi),
                per(p(|x| x.commit_us), pi),
                per(h(|b| b.h2d_enqueue_us), pi),
                per(h(|b| b.evict_us + b.late_evict_us), ev),
                per(p(|x| x.decommit_us), ev),
            );
        }
    }
    s
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
    fn step_stats_by_hand() {
        // 1..=100 µs: nearest-rank p50 = 50, p99 = 99, mean 50.5
        let us: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = StepStats::of(&us);
        assert_eq!((s.p50_ms, s.p99_ms), (0.050, 0.099));
        assert!((s.mean_ms - 0.0505).abs() < 1e-12);
        // three samples: p50 = rank 2, p99 = rank 3
        let s = StepStats::of(&[3000.0, 1000.0, 2000.0]);
        assert_eq!((s.p50_ms, s.p99_ms, s.mean_ms), (2.0, 3.0, 2.0));
        assert_eq!(error_pct(1.1, 1.0).round(), 10.0);
    }

    #[test]
    fn repetitions_rotate_the_policy_order() {
        let order = |r| rotation(r, 3).collect::<Vec<_>>();
        assert_eq!(order(0), vec![0, 1, 2]);
        assert_eq!(order(1), vec![1, 2, 0]);
        assert_eq!(order(2), vec![2, 0, 1]);
        assert_eq!(order(3), vec![0, 1, 2]);
        // every policy takes every position once over n repetitions
        for i in 0..4 {
            let mut pos: Vec<usize> = (0..4)
                .map(|r| rotation(r, 4).position(|p| p == i).unwrap())
                .collect();
            pos.sort();
            assert_eq!(pos, vec![0, 1, 2, 3]);
        }
    }

    #[test]
    fn repetitions_combine_into_medians_by_hand() {
        let st = |p50, p99, mean| StepStats {
            p50_ms: p50,
            p99_ms: p99,
            mean_ms: mean,
        };
        // p50s 30, 10, 20 -> median 20, min 10, max 30, spread (30-10)/20 = 100%
        let (m, p50) = combine(&[
            st(30.0, 40.0, 31.0),
            st(10.0, 12.0, 11.0),
            st(20.0, 50.0, 21.0),
        ])
        .unwrap();
        assert_eq!(m, st(20.0, 40.0, 21.0));
        assert_eq!((p50.min, p50.max, p50.spread, p50.n), (10.0, 30.0, 1.0, 3));
        // an even count takes the mean of the two middle values: p50s 10, 12, 14, 100 -> 13
        let (m, _) = combine(&[
            st(100.0, 1.0, 1.0),
            st(12.0, 1.0, 1.0),
            st(10.0, 1.0, 1.0),
            st(14.0, 1.0, 1.0),
        ])
        .unwrap();
        assert_eq!(m.p50_ms, 13.0);
        // one repetition is the replay itself
        let (m, p50) = combine(&[st(5.0, 6.0, 7.0)]).unwrap();
        assert_eq!((m, p50.spread), (st(5.0, 6.0, 7.0), 0.0));
        assert!(combine(&[]).is_none());
    }

    #[test]
    fn a_row_reports_the_error_against_the_median_of_repetition_medians() {
        let meas = |steps: Vec<f64>| ReplayMeasurement {
            device: validate::DeviceInfo::default(),
            step_us: steps,
            kernel_hidden: 0,
            kernel_ffn: 0,
            kernel_expert_bytes: 0,
            map_calls: 0,
            unmap_calls: 0,
            os_evict_calls: 0,
            bytes_copied: 0,
            wall_s: 0.0,
            host: Vec::new(),
        };
        // repetition p50s (nearest rank of 3 steps = the middle one): 1.0, 1.2, 0.8 ms
        let reps = vec![
            (0, meas(vec![900.0, 1000.0, 1100.0])),
            (1, meas(vec![1200.0, 1300.0, 1100.0])),
            (2, meas(vec![800.0, 700.0, 900.0])),
        ];
        let r = row("e1".into(), 3, 9, vec![1100.0; 3], Vec::new(), reps).unwrap();
        assert_eq!(r.measured.p50_ms, 1.0);
        assert!((r.error_pct_p50 - 10.0).abs() < 1e-9);
        assert_eq!((r.measured_p50_min_ms, r.measured_p50_max_ms), (0.8, 1.2));
        assert!((r.measured_p50_spread_pct - 40.0).abs() < 1e-9);
        // against the slowest (1.2 ms): -8.33%; the fastest (0.8 ms): +37.5%
        assert!((r.error_pct_p50_range[0] - (1.1 / 1.2 - 1.0) * 100.0).abs() < 1e-9);
        assert!((r.error_pct_p50_range[1] - 37.5).abs() < 1e-9);
        assert_eq!(r.repeat, 3);
        assert_eq!(r.repetitions[1].position, 1);
        assert_eq!(r.replay.step_us, vec![900.0, 1000.0, 1100.0]);
    }

    #[test]
    fn validation_json_of_earlier_passes_still_reads() {
        // written before --repeat existed (BENCHMARKS.md issue 7, final pass)
        let text = include_str!("../../../validate/data/validation/final/qwen-lru50.json");
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
        let stored = format!("{root}/validate/data/h200-linux-p5-validation/ql.json");
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
        run(args("e1", "12", &out)).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
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
        // a policy the file lacks, or other steps, are refused with the fix
        let e = format!("{:#}", run(args("e2", "12", &out)).unwrap_err());
        assert!(
            e.contains("no row for --policy e2") && e.contains("e1, e4:hot"),
            "{e}"
        );
        let e = format!("{:#}", run(args("e1", "6", &out)).unwrap_err());
        assert!(e.contains("pass --steps 12"), "{e}");
    }

    #[test]
    fn replay_plan_keeps_the_first_steps_in_order() {
        let mut p = Plans::new(2);
        for step in 0..3u32 {
            p.begin_step(1, 1);
            for layer in 0..2 {
                let u = step * 10 + layer as u32;
                p.push_group(layer, &[u], &[u], &[u], &[u]);
            }
        }
        let rp = replay_plan(&p, 2, Paging::Vmm, 1024, 7);
        assert_eq!(rp.groups.len(), 4);
        assert_eq!(
            rp.groups.iter().map(|g| g.keys[0]).collect::<Vec<_>>(),
            vec![0, 1, 10, 11]
        );
        assert_eq!((rp.steps, rp.moe_layers, rp.hidden), (2, 2, 1024));
        assert_eq!(rp.paging, ReplayPaging::Vmm);
        assert_eq!(rp.nonexpert_bytes_per_layer, 7);
    }
}
