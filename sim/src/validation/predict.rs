//! The prediction of one mechanism: record its plans, price them with the engine, and turn
//! the first steps into the plain-data plan the GPU replay executes.

use crate::cache::RetentionConfig;
use crate::cost::{CostModel, CostOptions, Paging};
use crate::engine::{build::plans, replay, EngineOptions, Plans, StepParts, TimingConfig};
use crate::model_profile::ComputeModel;
use crate::runner::{build_units, RunConfig, Workload};
use anyhow::{bail, Result};
use policies::mechanisms::SizeOptions;
use policies::UnitMap;
use traces::PhaseSel;
use validate::{ReplayGroup, ReplayPlan};

/// Everything a prediction needs besides the mechanism spec.
pub struct PredictionSetup<'a> {
    pub workload: &'a Workload,
    pub phase: PhaseSel,
    pub sizes: SizeOptions,
    /// Retention of the replayed plans; `None`: streaming.
    pub retention: Option<&'a RetentionConfig>,
    /// The profile and compute options that price the prediction (the engine's defaults
    /// otherwise: the real replay runs those paths).
    pub timing: &'a TimingConfig,
    /// Replay only the first N steps (`None`: every step).
    pub steps: Option<usize>,
    /// Seed of the engine.
    pub seed: u64,
    /// The model's hidden size (the replay's expert kernels need it).
    pub hidden: u64,
}

/// One mechanism's prediction and the plan its real replay executes.
pub struct Prediction {
    /// Canonical mechanism spec.
    pub spec: String,
    pub map: UnitMap,
    pub paging: Paging,
    /// The plan of the first [`Prediction::steps`] steps, for the GPU replay.
    pub plan: ReplayPlan,
    /// Peak mapped bytes of expert units the engine predicts (non-expert memory excluded).
    pub peak_bytes: u64,
    pub steps: usize,
    /// Page-ins over the replayed steps.
    pub page_ins: u64,
    /// Predicted time of every replayed step, µs, and its split.
    pub step_us: Vec<f64>,
    pub parts: Vec<StepParts>,
}

/// Predict mechanism `spec`: record its plans under `s.retention`, price them on `s.timing`'s
/// profile (no KV cache read: the replay runs no attention), and keep the first `s.steps`.
/// Errors: a bad spec or profile constant, or no steps of the phase to replay.
pub fn predict(spec: &str, s: &PredictionSetup) -> Result<Prediction> {
    let trace = &s.workload.trace.trace;
    let cfg = RunConfig {
        policy: spec.to_string(),
        phase: s.phase,
        sizes: s.sizes,
        retention: s.retention.cloned(),
        timing: None,
        ..RunConfig::default()
    };
    let (map, _) = build_units(&cfg, s.workload)?;
    let batching = s.retention.map(|r| r.batching).unwrap_or_default();
    let profile = s.workload.profile.as_ref().map(|t| &t.trace);
    let p = plans(
        trace,
        s.phase,
        &map,
        batching,
        profile,
        s.retention.map(|r| &r.cache),
    )?;
    let hw = &*s.timing.profile;
    let paging = map.paging;
    let cost = CostModel::new(hw, paging, CostOptions::default())?;
    let model = &trace.header.model;
    let mut compute = ComputeModel::new(
        s.timing.compute,
        model,
        map.expert_bytes,
        hw,
        &s.timing.overrides,
    )?;
    // the replay runs no attention kernel and so reads no KV cache: price none either
    compute.kv_us_per_token = 0.0;
    let ks = trace.keyspace();
    let opts = EngineOptions {
        seed: s.seed,
        ..EngineOptions::default()
    };
    let pred = replay(&p, &map, &ks, &cost, &compute, opts)?;
    let steps = s.steps.unwrap_or(p.steps.len()).min(p.steps.len());
    if steps == 0 {
        bail!("the trace has no {} steps to replay", s.phase.as_str());
    }
    let moe_layers = p.moe_layers.max(1);
    let nonexpert_bytes_per_layer = if compute.nonexpert_us > 0.0 {
        (compute.nonexpert_bytes / moe_layers as f64) as u64
    } else {
        0
    };
    let plan = replay_plan(&p, steps, paging, s.hidden, nonexpert_bytes_per_layer);
    Ok(Prediction {
        spec: map.spec.clone(),
        page_ins: plan.groups.iter().map(|g| g.page_ins.len() as u64).sum(),
        peak_bytes: (pred.peak_mapped_bytes - compute.nonexpert_bytes).max(0.0) as u64,
        map,
        paging,
        plan,
        steps,
        step_us: pred.step_us[..steps].to_vec(),
        parts: pred.step_parts[..steps].to_vec(),
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
        paging,
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
