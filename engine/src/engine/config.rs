//! One timed run: build the cost and compute models from a loaded hardware profile, price the
//! plans the retention driver (or streaming) recorded, or record them per admitted batch size
//! under an admission cap, and replay.

use super::batch::{admit, Admission};
use super::build::plans;
use super::cpu::{CpuExperts, CpuLane};
use super::plan::Plans;
use super::predict::{Learning, LoadedProfile, PredictorKind};
use super::prefetch::{self, PrefetchIssue};
use super::replay::{replay_learning, EngineOptions, Replay};
use super::report::{TimingDetail, TimingReport};
use crate::cache::{Batching, RetentionConfig};
use crate::cost::{CostModel, CostOptions, OutsideRange};
use crate::model_profile::{ComputeMode, ComputeModel, ComputeOverrides};
use crate::verify::Stepping;
use anyhow::{Context, Result};
use policies::UnitMap;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use traces::model::DType;
use traces::{PhaseSel, Trace};

/// Spans kept for `--timeline` (about 100 MB of JSON at most).
pub const TIMELINE_MAX_SPANS: usize = 1_000_000;

/// The timing options of a run: the hardware profile and the engine's options.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimingConfig {
    /// The profile as the user named it: a shipped profile's name or a profile JSON path.
    pub hw: String,
    /// The loaded profile `hw` names; shared by every run of a grid.
    #[serde(skip)]
    pub profile: Arc<profile::Profile>,
    pub compute: ComputeMode,
    #[serde(skip)]
    pub overrides: ComputeOverrides,
    pub handle_pool: bool,
    pub deferred_unmap: bool,
    pub serial_loader: bool,
    pub predictor: PredictorKind,
    pub window: usize,
    /// How prefetches are issued (`--prefetch-issue`); the `prefetch` block reports it.
    #[serde(skip)]
    pub prefetch_issue: PrefetchIssue,
    /// Cap on prefetch bytes in flight (`--prefetch-cap`); the `prefetch` block reports it.
    #[serde(skip)]
    pub prefetch_cap: Option<u64>,
    /// A staging buffer of this many units for started prefetches (`--prefetch-buffer`);
    /// the `prefetch` block reports it.
    #[serde(skip)]
    pub prefetch_buffer: Option<usize>,
    /// The predictors' confidence cut (`--prefetch-min-score`); the `prefetch` block
    /// reports it.
    #[serde(skip)]
    pub prefetch_min_score: Option<f64>,
    /// Fraction of usable VRAM; `None`: no admission control.
    pub admission_cap: Option<f64>,
    #[serde(skip)]
    pub timeline: Option<PathBuf>,
    /// Keep every step's latency (or quantiles of them) in `timing_detail.step_latency`, for
    /// the report's CDF; `sim compare` sets it, `sim run --json` leaves it out.
    #[serde(skip)]
    pub step_latencies: bool,
    /// Seed of the oversubscription jitter.
    pub seed: u64,
    /// The host profile combined with `hw` (`--hw-host`), as the user named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hw_host: Option<String>,
    /// Where routed experts run (`--cpu-experts`); `none`: all on the GPU.
    #[serde(skip_serializing_if = "is_gpu_only")]
    pub cpu_experts: CpuExperts,
    /// The experts' weight dtype (the run's sizes; prices CPU expert calls); `None` when
    /// the expert size was given in MiB.
    #[serde(skip)]
    pub expert_dtype: Option<DType>,
    /// What pricing does with a live-set slope past its measured live set
    /// (`--outside-range`); left out of the echo at the default.
    #[serde(skip_serializing_if = "OutsideRange::is_default")]
    pub outside_range: OutsideRange,
}

fn is_gpu_only(c: &CpuExperts) -> bool {
    *c == CpuExperts::None
}

impl TimingConfig {
    /// The engine's defaults on `profile` (named `hw` by the user): geometry compute, no
    /// handle pool, eager unmap, parallel loader, no predictor (window 1; prefetches issued
    /// demand first, no cap on bytes in flight), no admission cap,
    /// no timeline, no kept step latencies, seed 0.
    pub fn new(hw: impl Into<String>, profile: Arc<profile::Profile>) -> Self {
        TimingConfig {
            hw: hw.into(),
            profile,
            compute: ComputeMode::Geometry,
            overrides: ComputeOverrides::default(),
            handle_pool: false,
            deferred_unmap: false,
            serial_loader: false,
            predictor: PredictorKind::None,
            window: 1,
            prefetch_issue: PrefetchIssue::DemandFirst,
            prefetch_cap: None,
            prefetch_buffer: None,
            prefetch_min_score: None,
            admission_cap: None,
            timeline: None,
            step_latencies: false,
            seed: 0,
            hw_host: None,
            cpu_experts: CpuExperts::None,
            expert_dtype: None,
            outside_range: OutsideRange::Clamp,
        }
    }
}

/// What a timed run adds to the run report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimingOutcome {
    pub timing: TimingReport,
    pub detail: TimingDetail,
    /// Sequences asked for and admitted (all of them without an admission cap).
    pub admission: Option<Admission>,
    /// The predictor's prefetches and the stall they hid; `None` without a predictor.
    pub prefetch: Option<reports::run::PrefetchReport>,
    /// What the run wrote and what it left out, for the user (one line each).
    pub notes: Vec<String>,
    /// Mean time of the steps that process no prompt token, µs; `None` without one.
    #[serde(skip)]
    pub decode_step_us_mean: Option<f64>,
    /// The CPU lane; `None` with `--cpu-experts none`.
    pub cpu: Option<reports::cpu_lane::CpuLaneReport>,
}

/// Time the replay of `trace` under `map`: retention per `retention` (streaming when None),
/// batch size from its batching, costs from `cfg.profile`. `recorded`: the plans the retention
/// run already recorded for this batch (priced as they are); without them (streaming, or an
/// admission cap, which replans per admitted batch size) the plans are recorded here. A
/// learning predictor learns from `profile_trace` when given, else online; with a predictor
/// the plan is priced again without prefetch and with the oracle (the `prefetch` block).
/// `stepping` says how the steps take tokens (it replaces the retention batching's).
#[allow(clippy::too_many_arguments)]
pub fn run_timing(
    cfg: &TimingConfig,
    trace: &Trace,
    profile_trace: Option<&Trace>,
    map: &UnitMap,
    phases: PhaseSel,
    retention: Option<&RetentionConfig>,
    stepping: Stepping,
    recorded: Option<Plans>,
) -> Result<TimingOutcome> {
    let (cost, compute) = models(cfg, trace, map)?;
    let ks = trace.keyspace();
    let opts = engine_options(cfg);
    let batching = Batching {
        stepping,
        ..retention.map(|r| r.batching).unwrap_or_default()
    };
    let cache_cfg = retention.map(|r| &r.cache);
    let build = |n: usize| {
        plans(
            trace,
            phases,
            map,
            Batching {
                batch: n,
                ..batching
            },
            profile_trace,
            cache_cfg,
        )
    };
    let loaded = profile_trace.map(|trace| LoadedProfile { trace, phases });
    let learning = match &loaded {
        Some(p) => Learning::Profile(p),
        None => Learning::Online,
    };
    let price = |p: &Plans, o: EngineOptions| -> Result<Replay> {
        Ok(replay_learning(p, map, &ks, &cost, &compute, o, learning)?)
    };
    let (admission, plans, r) = match (cfg.admission_cap, recorded) {
        (Some(cap), _) => {
            let (a, p, r) = admit(
                batching.batch,
                cap,
                map,
                &ks,
                &cost,
                &compute,
                opts,
                learning,
                build,
            )?;
            (Some(a), p, r)
        }
        (None, Some(p)) => {
            let r = price(&p, opts)?;
            (None, p, r)
        }
        (None, None) => {
            let p = build(batching.batch)?;
            let r = price(&p, opts)?;
            (None, p, r)
        }
    };
    // the baselines replay the same plan with another predictor, without a timeline
    let baseline = |k| {
        let o = EngineOptions {
            predictor: k,
            timeline_cap: 0,
            ..opts
        };
        price(&plans, o)
    };
    let prefetch = (cfg.predictor != PredictorKind::None)
        .then(|| {
            let (issue, cap) = (cfg.prefetch_issue.under(map.paging), cfg.prefetch_cap);
            prefetch::report(
                cfg.predictor,
                cfg.window,
                issue,
                cap,
                cfg.prefetch_buffer,
                cfg.prefetch_min_score,
                &learning,
                &r,
                baseline,
            )
        })
        .transpose()?;
    let notes = write_timeline(cfg, &r)?;
    let decode_step_us_mean = r.decode_step_us_mean;
    let cpu = cost
        .cpu
        .as_ref()
        .map(|lane| super::cpu::report(lane, &cost.profile, &r));
    let mut detail = r.detail;
    if cfg.step_latencies {
        super::report::keep_step_latencies(&mut detail, &r.step_us);
    }
    Ok(TimingOutcome {
        timing: r.timing,
        detail,
        admission,
        prefetch,
        notes,
        decode_step_us_mean,
        cpu,
    })
}

/// The cost and compute models of a run of `cfg` on `trace` under `map` (prefetch costs
/// checked only with a predictor).
pub(crate) fn models(
    cfg: &TimingConfig,
    trace: &Trace,
    map: &UnitMap,
) -> Result<(CostModel, ComputeModel)> {
    let hw = &*cfg.profile;
    if cfg.prefetch_cap.is_some() && map.paging == crate::cost::Paging::Os {
        anyhow::bail!("--prefetch-cap limits VMM prefetches on the driver; an OS-paged policy (os*) prefetches on the copy engine without a queue: drop --prefetch-cap or use a VMM policy (e1, e2, ...)");
    }
    if cfg.prefetch_buffer.is_some() && map.paging == crate::cost::Paging::Os {
        anyhow::bail!("--prefetch-buffer stages queued VMM prefetches; an OS-paged policy (os*) prefetches on the copy engine without a queue: drop --prefetch-buffer or use a VMM policy (e1, e2, ...)");
    }
    let mut cost = CostModel::new(
        hw,
        map.paging,
        CostOptions {
            handle_pool: cfg.handle_pool,
            prefetch: cfg.predictor != PredictorKind::None,
        },
    )?;
    cost.outside_range = cfg.outside_range;
    if cfg.cpu_experts != CpuExperts::None {
        super::cpu::check(cfg.cpu_experts, map, cfg.predictor)?;
        let lane = CpuLane::new(
            cfg.cpu_experts,
            hw,
            trace,
            cfg.expert_dtype,
            map.expert_bytes,
        )?;
        cost.cpu = Some(lane);
    }
    let compute = ComputeModel::new(
        cfg.compute,
        &trace.header.model,
        map.expert_bytes,
        hw,
        &cfg.overrides,
    )?;
    Ok((cost, compute))
}

/// The engine's switches from `cfg`; spans are recorded only for `--timeline`.
pub(crate) fn engine_options(cfg: &TimingConfig) -> EngineOptions {
    EngineOptions {
        deferred_unmap: cfg.deferred_unmap,
        serial_loader: cfg.serial_loader,
        predictor: cfg.predictor,
        window: cfg.window,
        issue: cfg.prefetch_issue,
        prefetch_cap: cfg.prefetch_cap,
        prefetch_buffer: cfg.prefetch_buffer,
        min_score: cfg.prefetch_min_score,
        seed: cfg.seed,
        timeline_cap: if cfg.timeline.is_some() {
            TIMELINE_MAX_SPANS
        } else {
            0
        },
        record_cpu_keys: false,
    }
}

/// Write the replay's timeline where `--timeline` asked (nothing without it); the notes say
/// what was written and how many spans were dropped past [`TIMELINE_MAX_SPANS`].
pub(crate) fn write_timeline(cfg: &TimingConfig, r: &super::Replay) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if let (Some(path), Some(t)) = (&cfg.timeline, &r.timeline) {
        // the writer's errors name the file
        t.write(path).context("--timeline")?;
        notes.push(format!("wrote {}", path.display()));
        if t.dropped > 0 {
            notes.push(format!(
                "note: --timeline kept the first {} spans and dropped {}",
                t.spans.len(),
                t.dropped
            ));
        }
    }
    Ok(notes)
}
