//! The prediction of one mechanism: record its plans, price them with the engine, choose the
//! untimed warm-up of a retention row, and turn the warm-up and measured steps into the
//! plain-data plan the GPU replay executes.

use crate::cache::RetentionConfig;
use crate::cost::{CostModel, CostOptions, Paging};
use crate::engine::cpu::{CpuExperts, CpuLane};
use crate::engine::{build::plans, replay, EngineOptions, Plans, StepParts, TimingConfig};
use crate::model_profile::ComputeModel;
use crate::runner::{build_units, RunConfig, Workload};
use anyhow::{bail, Result};
use policies::mechanisms::SizeOptions;
use policies::UnitMap;
use traces::{DType, PhaseSel};
use validate::host::lane_replay::LaneCall;
use validate::replay_cpu::CpuLaneSpec;
use validate::warmup::{StepChurn, WarmUp, DEFAULT_RULE};
use validate::{ReplayGroup, ReplayPlan};

/// How many untimed steps a row's replay runs before the steps it measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarmUpChoice {
    /// Retention rows: [`DEFAULT_RULE`] on the plan's churn; streaming rows: none (every
    /// streamed step pages in and evicts alike: there is no cache to fill).
    Auto,
    /// Exactly this many steps (a stored replay's, or `--warm-up N`), for any row; whether
    /// they are steady is judged by [`DEFAULT_RULE`]'s window and tolerance.
    Fixed(usize),
}

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
    /// Measure N steps after the warm-up (`None`: every step after it).
    pub steps: Option<usize>,
    /// Seed of the engine.
    pub seed: u64,
    /// The model's hidden size (the replay's expert kernels need it).
    pub hidden: u64,
    /// A composed validation's CPU placement (`--cpu-experts layers:N` or `misses`) and the
    /// experts' dtype that prices its calls; `None`: every expert on the GPU.
    pub cpu: Option<(CpuExperts, DType)>,
}

/// One mechanism's prediction and the plan its real replay executes.
pub struct Prediction {
    /// Canonical mechanism spec.
    pub spec: String,
    pub map: UnitMap,
    pub paging: Paging,
    /// The plan of the warm-up and the measured steps, for the GPU replay.
    pub plan: ReplayPlan,
    /// Peak mapped bytes of expert units the engine predicts (non-expert memory excluded).
    pub peak_bytes: u64,
    /// Measured steps (after the warm-up).
    pub steps: usize,
    /// The untimed steps before them.
    pub warm_up: WarmUp,
    /// The CPU placement of a composed row (`None`: every expert on the GPU).
    pub cpu: Option<CpuExperts>,
    /// What the host CPU runs the plan's CPU calls with; the `sim` binary sets it (from the
    /// trace header's geometry) before a composed replay.
    pub lane: Option<CpuLaneSpec>,
    /// Page-ins over the measured steps.
    pub page_ins: u64,
    /// Predicted time of every measured step, µs, and its split.
    pub step_us: Vec<f64>,
    pub parts: Vec<StepParts>,
    /// What priced it, kept to price the same plans again with another cost model
    /// ([`Prediction::reprice`]).
    pricing: Pricing,
}

/// The recorded plans and the models that priced them.
struct Pricing {
    plans: Plans,
    cost: CostModel,
    compute: ComputeModel,
    keyspace: traces::KeySpace,
    opts: EngineOptions,
}

impl Prediction {
    /// The profile's cost model the prediction was priced with.
    pub fn cost(&self) -> &CostModel {
        &self.pricing.cost
    }

    /// The same plans priced with `cost` instead (the same compute model, seed and engine):
    /// every measured step's time, µs, and split.
    pub fn reprice(&self, cost: &CostModel) -> Result<(Vec<f64>, Vec<StepParts>)> {
        let p = &self.pricing;
        let r = replay(&p.plans, &self.map, &p.keyspace, cost, &p.compute, p.opts)?;
        let range = self.warm_up.steps..self.warm_up.steps + self.steps;
        Ok((
            r.step_us[range.clone()].to_vec(),
            r.step_parts[range].to_vec(),
        ))
    }

    /// Granules mapped at each measured step's groups, averaged over the groups: the live set
    /// the step's VMM calls ran among (resident units after the group's early evictions,
    /// before its page-ins), from the plan. 0 for OS-paged mechanisms.
    pub fn live_granules_per_step(&self) -> Vec<f64> {
        live_granules(&self.plan, &self.map)
    }

    /// Granules committed by each measured step (VMM page-ins x their granules; a `misses`
    /// row's off-critical-path page-ins included).
    pub fn committed_granules_per_step(&self) -> Vec<u64> {
        let demand = self.granules_per_step(|g| &g.page_ins);
        let background = self.granules_per_step(|g| &g.background);
        demand.iter().zip(&background).map(|(a, b)| a + b).collect()
    }

    /// Granules decommitted by each measured step (evictions x their granules).
    pub fn decommitted_granules_per_step(&self) -> Vec<u64> {
        self.granules_per_step(|g| &g.evicted)
    }

    /// Per measured step, the granules of the units `units` lists in each of its groups.
    fn granules_per_step(&self, units: impl Fn(&ReplayGroup) -> &Vec<u32>) -> Vec<u64> {
        let g = self.map.granule_bytes.max(1);
        let mut out = vec![0u64; self.steps];
        for grp in &self.plan.groups {
            if let Some(i) = (grp.step as usize).checked_sub(self.warm_up.steps) {
                out[i] += units(grp)
                    .iter()
                    .map(|&u| self.map.units[u as usize].committed_bytes.div_ceil(g))
                    .sum::<u64>();
            }
        }
        out
    }
}

/// Per measured step of `plan`, the mean over its groups of the VMM granules resident at the
/// group's router, after the evictions of units resident before it (the replay's and the
/// engine's order): preloaded units, then each group's page-ins (demand and off the
/// critical path) in, its evictions out.
pub(super) fn live_granules(plan: &ReplayPlan, map: &UnitMap) -> Vec<f64> {
    let measured = plan.steps - plan.warmup_steps;
    if plan.paging != Paging::Vmm {
        return vec![0.0; measured];
    }
    let g = map.granule_bytes.max(1);
    let granules = |u: u32| map.units[u as usize].committed_bytes.div_ceil(g);
    let mut resident = vec![false; map.units.len()];
    let mut live = 0u64;
    for &u in &plan.preloaded {
        if !std::mem::replace(&mut resident[u as usize], true) {
            live += granules(u);
        }
    }
    let (mut sum, mut n) = (vec![0.0; measured], vec![0u32; measured]);
    for grp in &plan.groups {
        // evictions of units resident before the group come first
        let early: Vec<u32> = grp
            .evicted
            .iter()
            .copied()
            .filter(|&u| resident[u as usize])
            .collect();
        for &u in &early {
            resident[u as usize] = false;
            live -= granules(u);
        }
        if let Some(i) = (grp.step as usize).checked_sub(plan.warmup_steps) {
            sum[i] += live as f64;
            n[i] += 1;
        }
        for &u in grp.page_ins.iter().chain(&grp.background) {
            if !std::mem::replace(&mut resident[u as usize], true) {
                live += granules(u);
            }
        }
        for &u in &grp.evicted {
            if !early.contains(&u) && std::mem::replace(&mut resident[u as usize], false) {
                live -= granules(u);
            }
        }
    }
    sum.iter()
        .zip(&n)
        .map(|(s, &k)| if k > 0 { s / k as f64 } else { 0.0 })
        .collect()
}

/// Page-ins and evictions of every step of `p`.
fn churn(p: &Plans) -> Vec<StepChurn> {
    let mut out = vec![StepChurn::default(); p.steps.len()];
    for g in &p.groups {
        let c = &mut out[g.step as usize];
        c.page_ins += p.page_ins(g).len() as u64;
        c.evictions += p.evicted(g).len() as u64;
    }
    out
}

/// The warm-up of a row whose plans are `p`, measuring `steps` steps (`None`: every step
/// after the warm-up; the automatic warm-up then leaves at least one).
fn choose_warm_up(
    p: &Plans,
    choice: WarmUpChoice,
    retention: bool,
    steps: Option<usize>,
) -> WarmUp {
    let c = churn(p);
    match choice {
        WarmUpChoice::Fixed(n) => {
            let window = DEFAULT_RULE.window.max(1);
            let steady = n >= window
                && n <= c.len()
                && c[n - window..n].iter().all(|&x| DEFAULT_RULE.is_steady(x));
            WarmUp { steps: n, steady }
        }
        WarmUpChoice::Auto if !retention => WarmUp {
            steps: 0,
            steady: false,
        },
        WarmUpChoice::Auto => DEFAULT_RULE.warm_up(&c, steps.unwrap_or(1)),
    }
}

/// Predict mechanism `spec`: record its plans under `s.retention`, price them on `s.timing`'s
/// profile (no KV cache read: the replay runs no attention), choose the warm-up (`warm_up`),
/// and keep the `s.steps` steps after it. Errors: a bad spec or profile constant, a warm-up
/// that leaves no step, or no steps of the phase to replay.
pub fn predict(spec: &str, s: &PredictionSetup, warm_up: WarmUpChoice) -> Result<Prediction> {
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
    let (map, retention) = placed_units(cfg, map, s)?;
    let batching = retention.as_ref().map(|r| r.batching).unwrap_or_default();
    let profile = s.workload.profile.as_ref().map(|t| &t.trace);
    let p = plans(
        trace,
        s.phase,
        &map,
        batching,
        profile,
        retention.as_ref().map(|r| &r.cache),
    )?;
    let hw = &*s.timing.profile;
    let paging = map.paging;
    let mut cost = CostModel::new(hw, paging, CostOptions::default())?;
    if let Some((mode, dtype)) = s.cpu {
        crate::engine::cpu::check(mode, &map, crate::engine::PredictorKind::None)?;
        cost.cpu = Some(CpuLane::new(
            mode,
            hw,
            trace,
            Some(dtype),
            map.expert_bytes,
        )?);
    }
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
        record_cpu_keys: s.cpu.is_some(),
        ..EngineOptions::default()
    };
    let pred = replay(&p, &map, &ks, &cost, &compute, opts)?;
    let w = choose_warm_up(&p, warm_up, retention.is_some(), s.steps);
    let left = p.steps.len().saturating_sub(w.steps);
    let steps = s.steps.unwrap_or(left).min(left);
    if steps == 0 {
        if w.steps > 0 {
            bail!(
                "the trace has {} {} steps: none is left to measure after a warm-up of {} steps",
                p.steps.len(),
                s.phase.as_str(),
                w.steps
            );
        }
        bail!("the trace has no {} steps to replay", s.phase.as_str());
    }
    let moe_layers = p.moe_layers.max(1);
    let nonexpert_bytes_per_layer = if compute.nonexpert_us > 0.0 {
        (compute.nonexpert_bytes / moe_layers as f64) as u64
    } else {
        0
    };
    let mut plan = replay_plan(
        &p,
        w.steps + steps,
        paging,
        s.hidden,
        nonexpert_bytes_per_layer,
    );
    plan.warmup_steps = w.steps;
    if let (Some(lane), Some(cpu_keys)) = (&cost.cpu, &pred.cpu_keys) {
        compose(&mut plan, lane, cpu_keys, &p);
    }
    let range = w.steps..w.steps + steps;
    Ok(Prediction {
        spec: map.spec.clone(),
        page_ins: plan
            .groups
            .iter()
            .filter(|g| g.step as usize >= w.steps)
            .map(|g| (g.page_ins.len() + g.background.len()) as u64)
            .sum(),
        peak_bytes: (pred.peak_mapped_bytes - compute.nonexpert_bytes).max(0.0) as u64,
        map,
        paging,
        plan,
        steps,
        warm_up: w,
        cpu: s.cpu.map(|c| c.0),
        lane: None,
        step_us: pred.step_us[range.clone()].to_vec(),
        parts: pred.step_parts[range].to_vec(),
        pricing: Pricing {
            plans: p,
            cost,
            compute,
            keyspace: ks,
            opts,
        },
    })
}

/// The plain-data plan of the first `steps` steps of `p` for the GPU replay (no warm-up: the
/// caller sets [`ReplayPlan::warmup_steps`]).
pub fn replay_plan(
    p: &Plans,
    steps: usize,
    paging: Paging,
    hidden: u64,
    nonexpert_bytes_per_layer: u64,
) -> ReplayPlan {
    ReplayPlan {
        paging,
        warmup_steps: 0,
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
                ..ReplayGroup::default()
            })
            .collect(),
        preloaded: p.preloaded.clone(),
        steps,
        moe_layers: p.moe_layers,
        hidden: hidden as usize,
        nonexpert_bytes_per_layer,
    }
}

/// The unit map and retention of a row: as given, or with a CPU placement the GPU's map
/// without the CPU layers' units and the retention fitted to it, as `sim run` places them
/// (`crate::engine::cpu::placed`).
fn placed_units(
    mut cfg: RunConfig,
    map: UnitMap,
    s: &PredictionSetup,
) -> Result<(UnitMap, Option<RetentionConfig>)> {
    let Some((mode, dtype)) = s.cpu else {
        return Ok((map, s.retention.cloned()));
    };
    cfg.timing = Some(TimingConfig {
        cpu_experts: mode,
        ..s.timing.clone()
    });
    let trace = &s.workload.trace.trace;
    let (gpu, placed, _notes) = crate::engine::cpu::placed(&cfg, map, trace, Some(dtype))?;
    Ok((gpu, placed.and_then(|c| c.retention)))
}

/// Turn `plan` (made from `p`) into a composed plan from the engine's CPU keys of every
/// group (`cpu_keys`, in `p`'s group order): the GPU runs the other keys; each CPU key is one
/// call of one token (`LaneCall::expert` = its key); a group with calls copies its
/// activations (`lane.activation_bytes`). Under `misses`, the plan's page-ins are paged in off
/// the critical path (`background`), except the units the group also evicts (streamed: the
/// engine never copies them, so they are neither committed nor decommitted).
pub fn compose(plan: &mut ReplayPlan, lane: &CpuLane, cpu_keys: &[Vec<u32>], p: &Plans) {
    for (g, (rec, cpu)) in plan.groups.iter_mut().zip(p.groups.iter().zip(cpu_keys)) {
        g.keys.retain(|k| cpu.binary_search(k).is_err());
        g.cpu_calls = cpu
            .iter()
            .map(|&expert| LaneCall { expert, tokens: 1 })
            .collect();
        g.activation_bytes = if cpu.is_empty() {
            0
        } else {
            lane.activation_bytes(rec.moe_layer as usize, rec.slots)
        };
        if lane.mode == CpuExperts::Misses {
            let page_ins = std::mem::take(&mut g.page_ins);
            let (streamed, kept): (Vec<u32>, Vec<u32>) =
                page_ins.into_iter().partition(|u| g.evicted.contains(u));
            g.evicted.retain(|u| !streamed.contains(u));
            g.background = kept;
        }
    }
}
