//! One timed run: resolve the profile, the cost and compute models, record the plans the
//! retention driver (or streaming) decides, apply the admission cap and replay.

use super::batch::{admit, Admission};
use super::build::plans;
use super::predict::PredictorKind;
use super::replay::{replay, EngineOptions};
use super::report::{TimingDetail, TimingReport};
use crate::cache::{Batching, RetentionConfig};
use crate::cost::{CostModel, CostOptions};
use crate::model_profile::{ComputeMode, ComputeModel, ComputeOverrides};
use anyhow::{Context, Result};
use policies::UnitMap;
use serde::Serialize;
use std::path::PathBuf;
use traces::{PhaseSel, Trace};

/// Spans kept for `--timeline` (about 100 MB of JSON at most).
pub const TIMELINE_MAX_SPANS: usize = 1_000_000;

/// The timing options of a run (`--hw` and the flags of `TimingArgs`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimingConfig {
    /// Shipped profile name or profile JSON path.
    pub hw: String,
    pub compute: ComputeMode,
    #[serde(skip)]
    pub overrides: ComputeOverrides,
    pub handle_pool: bool,
    pub deferred_unmap: bool,
    pub serial_loader: bool,
    pub predictor: PredictorKind,
    pub window: usize,
    /// Fraction of usable VRAM; `None`: no admission control.
    pub admission_cap: Option<f64>,
    #[serde(skip)]
    pub timeline: Option<PathBuf>,
    /// Seed of the oversubscription jitter.
    pub seed: u64,
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            hw: "rtx4060-laptop-wddm".into(),
            compute: ComputeMode::Geometry,
            overrides: ComputeOverrides::default(),
            handle_pool: false,
            deferred_unmap: false,
            serial_loader: false,
            predictor: PredictorKind::None,
            window: 1,
            admission_cap: None,
            timeline: None,
            seed: 0,
        }
    }
}

/// What a timed run adds to the run report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimingOutcome {
    pub timing: TimingReport,
    pub detail: TimingDetail,
    /// Sequences asked for and admitted (all of them without `--admission-cap`).
    pub admission: Option<Admission>,
}

/// Time the replay of `trace` under `map`: retention per `retention` (streaming when None),
/// batch size from its batching, costs from the profile `cfg.hw`.
pub fn run_timing(
    cfg: &TimingConfig,
    trace: &Trace,
    profile_trace: Option<&Trace>,
    map: &UnitMap,
    phases: PhaseSel,
    retention: Option<&RetentionConfig>,
) -> Result<TimingOutcome> {
    let hw = profile::load(&cfg.hw)?;
    let cost = CostModel::new(
        &hw,
        map.paging,
        CostOptions {
            handle_pool: cfg.handle_pool,
            prefetch: cfg.predictor != PredictorKind::None,
        },
    )?;
    let compute = ComputeModel::new(
        cfg.compute,
        &trace.header.model,
        map.expert_bytes,
        &hw,
        &cfg.overrides,
    )?;
    let ks = trace.keyspace();
    let opts = EngineOptions {
        deferred_unmap: cfg.deferred_unmap,
        serial_loader: cfg.serial_loader,
        predictor: cfg.predictor,
        window: cfg.window,
        seed: cfg.seed,
        timeline_cap: if cfg.timeline.is_some() {
            TIMELINE_MAX_SPANS
        } else {
            0
        },
    };
    let batching = retention.map(|r| r.batching).unwrap_or_default();
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
    let (admission, r) = match cfg.admission_cap {
        Some(cap) => {
            let (a, r) = admit(batching.batch, cap, map, &ks, &cost, &compute, opts, build)?;
            (Some(a), r)
        }
        None => (
            None,
            replay(&build(batching.batch)?, map, &ks, &cost, &compute, opts)?,
        ),
    };
    if let (Some(path), Some(t)) = (&cfg.timeline, &r.timeline) {
        t.write(path)
            .with_context(|| format!("--timeline {}", path.display()))?;
        eprintln!("wrote {}", path.display());
        if t.dropped > 0 {
            eprintln!(
                "note: --timeline kept the first {} spans and dropped {}",
                t.spans.len(),
                t.dropped
            );
        }
    }
    Ok(TimingOutcome {
        timing: r.timing,
        detail: r.detail,
        admission,
    })
}
