//! `sim plan`: what fits on the GPU, and what is fastest.
//!
//! For every mechanism and retention policy asked for, first the largest expert budget (in
//! units) whose timed replay passes the engine's admission check ([`crate::engine::admit`]:
//! the whole requested batch admitted, mapped memory = non-expert weights + KV caches +
//! committed expert units never above `cap x usable VRAM`), found by binary search on the
//! budget; then the budget with the highest tokens/s at or below it ([`best_budget`]): the
//! largest budget that fits is not the fastest when it maps past the start of the
//! oversubscription curve (90% of usable VRAM), where every page-in is priced higher. The
//! configurations are ranked by the tokens/s of their best budgets. The binary search assumes
//! that mapped memory does not shrink as the budget grows (a larger budget keeps at least as
//! many units resident), which holds for every registered policy: all of them fill the
//! budget before they evict.
//!
//! An offline policy (Belady/MIN) is ranked as the bound it is and never recommended.

use crate::cache::RetentionConfig;
use crate::engine::cpu::{gpu_unit_map, CpuExperts};
use crate::runner::{self, RunConfig, RunReport, Workload};
use anyhow::Result;
use policies::{Budget, PolicyKind};
use rayon::prelude::*;
use serde::Serialize;

/// What to plan: the shared run settings and the axes.
#[derive(Clone, Debug)]
pub struct PlanSpec {
    /// Phase, sizes and the timing configuration (a hardware profile and an admission cap,
    /// both required); its `retention` and `policy` are replaced per configuration.
    pub base: RunConfig,
    /// Semantics, seed and batching of every configuration; policy and budget are replaced.
    pub retention: RetentionConfig,
    /// Mechanism specs, e.g. `e1`, `e2`.
    pub mechanisms: Vec<String>,
    /// Retention policies.
    pub policies: Vec<PolicyKind>,
    /// Where the routed experts run (`--cpu-experts`): each placement is planned with every
    /// mechanism and policy; `[None]` pages every expert onto the GPU.
    pub placements: Vec<CpuExperts>,
    /// Tokens of context each sequence already holds in its KV cache before the trace's own
    /// tokens (`--context`; 0: only the trace's tokens). They are reserved in VRAM beside the
    /// non-expert weights: batch x context x KV bytes per token.
    pub context_tokens: u64,
}

/// The largest budget that fits for one configuration, and how it runs there.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanFit {
    /// Budget in commit units of the mechanism.
    pub budget_units: u64,
    /// Committed bytes of that many units (the bank's mean committed bytes per unit).
    pub budget_bytes: u64,
    /// Experts' worth of useful bytes in that many units (exact for `eN`: N per unit).
    pub experts_kept: u64,
    pub tokens_per_s: f64,
    pub step_ms_p50: f64,
    /// Peak mapped memory of the replay (non-expert weights, KV caches, expert units), MiB.
    pub peak_mapped_mib: f64,
    pub miss_rate: f64,
    pub page_ins_per_token: f64,
    /// Page-ins priced on the oversubscription curve (mapped memory past 90% of usable VRAM).
    pub oversubscribed_page_ins: u64,
    /// The profile's usable VRAM, MiB.
    pub usable_mib: f64,
    /// The constants the replay priced outside their measured range (the run report's
    /// `timing_detail.outside_range`); the answer depends on how they were priced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outside_range: Vec<reports::run::OutsideRange>,
}

impl PlanFit {
    /// The mark of an answer priced outside a measured range (`outside the measured range:
    /// vmm_commit_busy_live_slope 6.6x`), empty when every price lay inside.
    pub fn outside_mark(&self) -> String {
        if self.outside_range.is_empty() {
            return String::new();
        }
        let each: Vec<String> = self
            .outside_range
            .iter()
            .map(|o| format!("{} {:.1}x {}", o.constant, o.distance, o.priced))
            .collect();
        format!("outside the measured range: {}", each.join(", "))
    }
}

/// Where the VRAM goes at a configuration's best budget, MiB.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Memory {
    /// The expert units of the budget.
    pub experts_mib: f64,
    /// Non-expert weights by part (`attention`, `routers`, `shared experts`, `dense MLPs`,
    /// `norms`, `embeddings`, `LM head`), with their total in `nonexpert_mib`; empty when
    /// `--nonexpert-mib` gave the total.
    pub nonexpert_parts: Vec<(String, f64)>,
    /// Parts the model's geometry cannot size (the embeddings and LM head of a model the
    /// presets do not know, without `--model-config`): left out of `nonexpert_mib`.
    pub unknown_parts: Vec<String>,
    pub nonexpert_mib: f64,
    /// Bytes per non-expert parameter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonexpert_bytes_per_param: Option<f64>,
    /// The KV caches of the context (`--context`): batch x context x KV bytes per token.
    pub kv_context_mib: f64,
    /// The KV caches of the trace's own tokens at the peak: peak mapped memory less the
    /// above (it also holds any unit mapped beyond the budget at that moment, e.g. in flight).
    pub kv_trace_mib: f64,
    /// Peak mapped memory of the replay.
    pub peak_mapped_mib: f64,
    /// The profile's usable VRAM, less the peak.
    pub free_mib: f64,
    pub usable_mib: f64,
}

/// One configuration of the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanRow {
    pub mechanism: String,
    pub evict: String,
    /// Where the experts run (`--cpu-experts`); absent for `none` (all paged on the GPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// An offline policy: a bound on what the online ones can reach, not a choice.
    pub bound: bool,
    /// Commit units of the mechanism over the whole bank.
    pub units_total: u64,
    /// Routed experts over all MoE layers.
    pub experts_total: u64,
    /// Bytes of one expert as the mechanism sizes it (for the host memory the experts off
    /// the GPU take, and the engines' offload sizes); not serialised.
    #[serde(skip)]
    pub expert_bytes: u64,
    /// The fastest budget that fits (the smallest of equally fast ones); `None` when not
    /// even one unit fits, or on an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit: Option<PlanFit>,
    /// The largest budget that fits, in units (the top of the searched range).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_fitting_units: Option<u64>,
    /// Every fitting budget the search ran, smallest first: tokens/s against budget.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub curve: Vec<PlanFit>,
    /// Where the VRAM goes at the best budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// Why not even a budget of one unit fits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub does_not_fit: Option<String>,
    /// Why the configuration could not be run at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Timed runs the search took.
    pub runs: u32,
}

impl PlanRow {
    /// `e1 + static-pin`, or `e1 + static-pin, cpu cheaper` with a placement.
    pub fn name(&self) -> String {
        match &self.placement {
            Some(c) => format!("{} + {}, cpu {c}", self.mechanism, self.evict),
            None => format!("{} + {}", self.mechanism, self.evict),
        }
    }
}

/// The plan: rows ranked (fitting ones by tokens/s, then the others in grid order).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// The hardware profile as named.
    pub hw: String,
    pub batch: usize,
    /// Tokens of context reserved in each sequence's KV cache ([`PlanSpec::context_tokens`]).
    pub context_tokens: u64,
    /// The admission cap, a fraction of usable VRAM.
    pub admission_cap: f64,
    /// cap x usable VRAM, MiB (from the first timed run; `None` when none ran).
    pub limit_mib: Option<f64>,
    pub rows: Vec<PlanRow>,
    /// Index into `rows` of the recommended configuration: the fastest online one that fits,
    /// at its fastest budget.
    pub recommended: Option<usize>,
}

/// Plan every (mechanism, policy) of `spec` on the workload, configurations in parallel.
pub fn plan(spec: &PlanSpec, w: &Workload) -> Result<Plan> {
    let timing = spec
        .base
        .timing
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("a plan needs a hardware profile"))?;
    let cap = timing
        .admission_cap
        .ok_or_else(|| anyhow::anyhow!("a plan needs an admission cap"))?;
    let placements = if spec.placements.is_empty() {
        vec![CpuExperts::None]
    } else {
        spec.placements.clone()
    };
    let cells: Vec<(CpuExperts, String, PolicyKind)> = placements
        .iter()
        .flat_map(|&c| {
            spec.mechanisms
                .iter()
                .flat_map(move |m| spec.policies.iter().map(move |&p| (c, m.clone(), p)))
        })
        .collect();
    let searched: Vec<(PlanRow, Option<f64>)> = cells
        .par_iter()
        .map(|(c, m, p)| search(&placed(spec, *c), m, *p, w))
        .collect::<Result<_>>()?;
    let limit_mib = searched.iter().find_map(|(_, l)| *l);
    let mut rows: Vec<PlanRow> = searched.into_iter().map(|(r, _)| r).collect();
    rank(&mut rows);
    let recommended = rows.iter().position(|r| r.fit.is_some() && !r.bound);
    Ok(Plan {
        hw: timing.hw.clone(),
        batch: spec.retention.batching.batch,
        context_tokens: spec.context_tokens,
        admission_cap: cap,
        limit_mib,
        rows,
        recommended,
    })
}

/// Fitting rows first, fastest first (stable: grid order breaks ties), then the others.
fn rank(rows: &mut [PlanRow]) {
    rows.sort_by(|a, b| {
        let key = |r: &PlanRow| r.fit.as_ref().map(|f| f.tokens_per_s);
        match (key(a), key(b)) {
            (Some(x), Some(y)) => y.total_cmp(&x),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
    });
}

/// The outcome of one timed run at a budget (`T`: its report).
enum Trial<T> {
    /// The whole batch was admitted.
    Fits(T),
    /// It was not: why.
    Over(String),
}

/// Run `mechanism` + `policy` at `units` and say whether the whole batch was admitted.
fn trial(
    spec: &PlanSpec,
    mechanism: &str,
    policy: PolicyKind,
    units: u64,
    w: &Workload,
) -> Result<Trial<Box<RunReport>>> {
    let mut retention = spec.retention.clone();
    retention.cache.policy = policy;
    retention.cache.budget = Budget::Units(units);
    let cfg = RunConfig {
        policy: mechanism.to_string(),
        retention: Some(retention),
        ..spec.base.clone()
    };
    match runner::run(&cfg, w) {
        Ok(r) => {
            let batch = spec.retention.batching.batch;
            match &r.admission {
                Some(a) if a.admitted < batch => Ok(Trial::Over(format!(
                    "only {} of {batch} sequences are admitted",
                    a.admitted
                ))),
                _ => Ok(Trial::Fits(Box::new(r))),
            }
        }
        Err(e) => match crate::grid::does_not_fit(&e) {
            Some(n) => Ok(Trial::Over(n.at_one_unit())),
            None => Err(e),
        },
    }
}

/// `spec` with its experts placed by `placement`.
fn placed(spec: &PlanSpec, placement: CpuExperts) -> PlanSpec {
    let mut out = spec.clone();
    if let Some(t) = out.base.timing.as_mut() {
        t.cpu_experts = placement;
    }
    out
}

/// Binary-search the largest budget of `mechanism` + `policy` that fits; with experts on the
/// CPU, over the units left on the GPU.
fn search(
    spec: &PlanSpec,
    mechanism: &str,
    policy: PolicyKind,
    w: &Workload,
) -> Result<(PlanRow, Option<f64>)> {
    let probe = RunConfig {
        policy: mechanism.to_string(),
        retention: None,
        timing: None,
        ..spec.base.clone()
    };
    let (map, _) = runner::build_units(&probe, w)?;
    // without a context the runs say themselves what the compute model lacks, row by row
    let compute = match compute_model(spec, &map, w) {
        Ok(c) => c,
        Err(e) if spec.context_tokens > 0 => return Err(e),
        Err(_) => None,
    };
    let spec = &with_context(spec, compute.as_ref())?;
    let placement = spec
        .base
        .timing
        .as_ref()
        .map_or(CpuExperts::None, |t| t.cpu_experts);
    let ks = w.trace.trace.keyspace();
    let gpu = gpu_unit_map(&map, &ks, placement.cpu_layers(ks.num_moe_layers()));
    let bank = Bank::of(&gpu, w);
    let mut row = PlanRow {
        mechanism: map.spec.clone(),
        evict: policy.name().to_string(),
        placement: (placement != CpuExperts::None).then(|| placement.to_string()),
        bound: policy.entry().offline,
        units_total: bank.units,
        experts_total: bank.experts,
        expert_bytes: bank.expert_bytes,
        fit: None,
        largest_fitting_units: None,
        curve: Vec::new(),
        memory: None,
        does_not_fit: None,
        error: None,
        runs: 0,
    };
    let run = |units: u64| -> Result<Trial<(PlanFit, Option<f64>)>> {
        Ok(match trial(spec, mechanism, policy, units, w)? {
            Trial::Fits(r) => Trial::Fits((
                bank.fit(units, &r),
                r.admission.as_ref().and_then(|a| a.limit_mib),
            )),
            Trial::Over(why) => Trial::Over(why),
        })
    };
    let runs = std::sync::atomic::AtomicU32::new(0);
    let counted = |units: u64| {
        runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        run(units)
    };
    let mut limit = None;
    match largest_fitting(bank.units.max(1), counted) {
        Ok(Ok((units, (fit, l)))) => {
            limit = l;
            row.largest_fitting_units = Some(units);
            match best_budget(units, fit, &counted) {
                Ok(curve) => {
                    row.fit = best_of(&curve).cloned();
                    row.memory = row
                        .fit
                        .as_ref()
                        .zip(compute.as_ref())
                        .map(|(f, c)| memory(f, c, kv_context_bytes(spec, c)));
                    row.curve = curve;
                }
                Err(e) => row.error = Some(format!("{e:#}")),
            }
        }
        Ok(Err(why)) => row.does_not_fit = Some(why),
        Err(e) => row.error = Some(format!("{e:#}")),
    }
    row.runs = runs.into_inner();
    Ok((row, limit))
}

/// Budgets run per round of [`best_budget`].
const SEARCH_POINTS: u64 = 8;

/// The fitting budgets at or below `largest` (which fits, running as `top`) that a search for
/// the highest tokens/s runs, with their fits, smallest first. Round one spreads
/// [`SEARCH_POINTS`] budgets evenly over `1..=largest`; each later round spreads as many over
/// the interval between the neighbours of the best budget so far, until that interval holds
/// no budget not yet run. Each round's budgets run in parallel. Tokens/s against budget rises
/// while more budget saves page-ins and falls where the oversubscription curve prices them
/// higher, so the search narrows on the peak; a budget that does not fit (possible only where
/// admission is not monotone in the budget) is left out.
fn best_budget<T: Send>(
    largest: u64,
    top: PlanFit,
    run: &(impl Fn(u64) -> Result<Trial<(PlanFit, T)>> + Sync),
) -> Result<Vec<PlanFit>> {
    let mut curve = std::collections::BTreeMap::from([(largest, top)]);
    let (mut lo, mut hi) = (1, largest);
    loop {
        let new: Vec<u64> = spread(lo, hi)
            .into_iter()
            .filter(|u| !curve.contains_key(u))
            .collect();
        if new.is_empty() {
            break;
        }
        let ran: Vec<(u64, Trial<(PlanFit, T)>)> = new
            .par_iter()
            .map(|&u| Ok((u, run(u)?)))
            .collect::<Result<_>>()?;
        for (u, t) in ran {
            if let Trial::Fits((fit, _)) = t {
                curve.insert(u, fit);
            }
        }
        let points: Vec<PlanFit> = curve.values().cloned().collect();
        let best = best_of(&points).map_or(largest, |f| f.budget_units);
        lo = curve.range(..best).next_back().map_or(best, |(&u, _)| u);
        hi = curve.range(best + 1..).next().map_or(best, |(&u, _)| u);
    }
    Ok(curve.into_values().collect())
}

/// [`SEARCH_POINTS`] budgets spread evenly over `lo..=hi`, both ends included (all of them
/// when fewer).
fn spread(lo: u64, hi: u64) -> Vec<u64> {
    let n = SEARCH_POINTS - 1;
    let mut out: Vec<u64> = (0..=n).map(|k| lo + (hi - lo) * k / n).collect();
    out.dedup();
    out
}

/// The fastest point of `curve`; of equally fast ones the smallest budget, so that no other
/// point is at least as fast with less memory (the answer is never a dominated budget).
fn best_of(curve: &[PlanFit]) -> Option<&PlanFit> {
    curve.iter().reduce(|best, f| {
        let faster = f.tokens_per_s > best.tokens_per_s;
        let as_fast_smaller =
            f.tokens_per_s == best.tokens_per_s && f.budget_units < best.budget_units;
        if faster || as_fast_smaller {
            f
        } else {
            best
        }
    })
}

/// The compute model of `spec`'s runs for this mechanism's expert size (the geometry, the
/// preset, the config or the overrides), as the engine resolves it; `None` without timing.
fn compute_model(
    spec: &PlanSpec,
    map: &policies::UnitMap,
    w: &Workload,
) -> Result<Option<crate::model_profile::ComputeModel>> {
    let Some(t) = spec.base.timing.as_ref() else {
        return Ok(None);
    };
    Ok(Some(crate::model_profile::ComputeModel::new(
        t.compute,
        &w.trace.trace.header.model,
        map.expert_bytes,
        &t.profile,
        &t.overrides,
    )?))
}

/// Bytes of the context's KV caches: batch x `context_tokens` x KV bytes per token.
fn kv_context_bytes(spec: &PlanSpec, c: &crate::model_profile::ComputeModel) -> f64 {
    spec.retention.batching.batch as f64 * spec.context_tokens as f64 * c.kv_bytes_per_token
}

/// `spec` with its context's KV caches (`c`: its compute model): batch x `context_tokens` x
/// KV bytes per token are reserved in VRAM beside the non-expert weights, and every step's
/// attention reads them: each MoE layer's non-expert compute grows by batch x
/// `context_tokens` x the KV read time per token and layer, as the trace's own tokens of KV
/// are priced ([`crate::model_profile::ComputeModel::kv_us_per_token`]). Unchanged without a
/// context.
fn with_context(
    spec: &PlanSpec,
    c: Option<&crate::model_profile::ComputeModel>,
) -> Result<PlanSpec> {
    let Some(c) = c.filter(|_| spec.context_tokens > 0) else {
        return Ok(spec.clone());
    };
    let tokens = spec.retention.batching.batch as f64 * spec.context_tokens as f64;
    let mut out = spec.clone();
    if let Some(t) = out.base.timing.as_mut() {
        t.overrides.nonexpert_mib =
            Some((c.nonexpert_bytes + kv_context_bytes(spec, c)) / crate::MIB);
        t.overrides.nonexpert_us = Some(c.nonexpert_us + tokens * c.kv_us_per_token);
    }
    Ok(out)
}

/// Where the VRAM goes at `f`: its experts, the non-expert weights of `c` by part, the
/// context's `kv_context` bytes of KV, the trace's KV at the peak, and what is left free.
fn memory(f: &PlanFit, c: &crate::model_profile::ComputeModel, kv_context: f64) -> Memory {
    Memory::of(
        f.budget_bytes as f64,
        f.peak_mapped_mib,
        f.usable_mib,
        c,
        kv_context,
    )
}

impl Memory {
    /// `experts` bytes of expert units, the non-expert weights of `c` by part, `kv_context`
    /// bytes of context KV; the trace's KV is what `peak_mapped_mib` holds beyond them.
    pub fn of(
        experts: f64,
        peak_mapped_mib: f64,
        usable_mib: f64,
        c: &crate::model_profile::ComputeModel,
        kv_context: f64,
    ) -> Memory {
        let mib = |b: f64| b / crate::MIB;
        let (mut parts, mut unknown) = (Vec::new(), Vec::new());
        if let Some((p, bpp)) = &c.nonexpert_parts {
            let named = [
                ("attention", Some(p.attention)),
                ("routers", Some(p.routers)),
                ("shared experts", Some(p.shared_experts)),
                ("dense MLPs", Some(p.dense_mlps)),
                ("norms", Some(p.norms)),
                ("embeddings", p.embeddings),
                ("LM head", p.lm_head),
            ];
            for (name, v) in named {
                match v {
                    Some(x) if x > 0.0 => parts.push((name.to_string(), mib(x * bpp))),
                    Some(_) => {}
                    None => unknown.push(name.to_string()),
                }
            }
        }
        let experts = mib(experts);
        let nonexpert = mib(c.nonexpert_bytes);
        let context = mib(kv_context);
        Memory {
            experts_mib: experts,
            nonexpert_parts: parts,
            unknown_parts: unknown,
            nonexpert_mib: nonexpert,
            nonexpert_bytes_per_param: c.nonexpert_parts.map(|(_, b)| b),
            kv_context_mib: context,
            kv_trace_mib: (peak_mapped_mib - experts - nonexpert - context).max(0.0),
            peak_mapped_mib,
            free_mib: usable_mib - peak_mapped_mib,
            usable_mib,
        }
    }

    /// One line per use of the VRAM, under `title`.
    pub fn text(&self, title: &str) -> String {
        let m = self;
        let n = |x: f64| {
            let sign = if x < 0.0 { "-" } else { "" };
            if x.abs() >= 10.0 {
                format!(
                    "{sign}{}",
                    reports::sizes::thousands(x.abs().round() as u64)
                )
            } else {
                format!("{x:.1}")
            }
        };
        let parts: Vec<String> = m
            .nonexpert_parts
            .iter()
            .map(|(name, x)| format!("{name} {}", n(*x)))
            .collect();
        let per = m
            .nonexpert_bytes_per_param
            .map(|b| format!(" at {} B a parameter", reports::metrics::fmt(b)))
            .unwrap_or_default();
        let detail = if parts.is_empty() {
            " (--nonexpert-mib)".to_string()
        } else {
            format!("{per}: {}", parts.join(", "))
        };
        let unknown = if m.unknown_parts.is_empty() {
            String::new()
        } else {
            format!(
                "\n  not counted        {}: the trace does not record the vocabulary; give --model-config (the model's config.json) or --nonexpert-mib",
                m.unknown_parts.join(" and ")
            )
        };
        format!(
            "{title}, MiB of {} usable:\n  experts            {}\n  non-expert weights {}{detail}{unknown}\n  KV cache           {}: context {}, the trace's tokens {} at the peak\n  workspace          not modelled (activations and the CUDA context are not in the profile)\n  free               {}{}",
            n(m.usable_mib),
            n(m.experts_mib),
            n(m.nonexpert_mib),
            n(m.kv_context_mib + m.kv_trace_mib),
            n(m.kv_context_mib),
            n(m.kv_trace_mib),
            n(m.free_mib),
            if m.free_mib < 0.0 {
                " (past usable VRAM: priced on the oversubscription curve)"
            } else {
                ""
            },
        )
    }
}

/// The largest budget in `1..=bank` at which `run` fits, with its report, assuming fitting
/// is monotone in the budget; `Ok(Err(why))` when not even 1 fits.
fn largest_fitting<T>(
    bank: u64,
    run: impl Fn(u64) -> Result<Trial<T>>,
) -> Result<std::result::Result<(u64, T), String>> {
    let mut best = match run(1)? {
        Trial::Fits(r) => (1, r),
        Trial::Over(why) => return Ok(Err(why)),
    };
    // invariant: `best.0` fits; `hi` is the smallest budget known not to (bank + 1: none yet)
    let mut hi = bank + 1;
    let mut probe = bank;
    while best.0 + 1 < hi {
        match run(probe)? {
            Trial::Fits(r) => best = (probe, r),
            Trial::Over(_) => hi = probe,
        }
        probe = best.0 + (hi - best.0) / 2;
    }
    Ok(Ok(best))
}

/// Sizes of a mechanism's bank, for converting a budget in units to bytes and experts.
struct Bank {
    units: u64,
    experts: u64,
    committed: u128,
    useful: u128,
    expert_bytes: u64,
}

impl Bank {
    fn of(map: &policies::UnitMap, w: &Workload) -> Bank {
        Bank {
            units: map.num_units() as u64,
            experts: w.trace.trace.keyspace().num_keys() as u64,
            committed: map.units.iter().map(|u| u.committed_bytes as u128).sum(),
            useful: map.units.iter().map(|u| u.useful_bytes as u128).sum(),
            expert_bytes: map.expert_bytes.max(1),
        }
    }

    fn fit(&self, units: u64, r: &RunReport) -> PlanFit {
        let share = |total: u128| (total * units as u128 / self.units.max(1) as u128) as u64;
        let timing = r.timing.as_ref();
        let cache = r.cache.as_ref();
        PlanFit {
            budget_units: units,
            budget_bytes: share(self.committed),
            experts_kept: (share(self.useful) / self.expert_bytes).min(self.experts),
            tokens_per_s: timing.map_or(0.0, |t| t.tokens_per_s),
            step_ms_p50: timing.map_or(0.0, |t| t.step_ms_p50),
            peak_mapped_mib: timing.map_or(0.0, |t| t.peak_mapped_mib),
            miss_rate: cache.map_or(0.0, |c| c.miss_rate),
            page_ins_per_token: cache.map_or(0.0, |c| c.page_ins_per_token),
            oversubscribed_page_ins: r
                .timing_detail
                .as_ref()
                .map_or(0, |d| d.oversubscribed_page_ins),
            usable_mib: r.timing_detail.as_ref().map_or(0.0, |d| d.usable_mib),
            outside_range: r
                .timing_detail
                .as_ref()
                .map(|d| d.outside_range.clone())
                .unwrap_or_default(),
        }
    }
}

/// A byte size for reading (`6.40 GiB`, `512 MiB`).
fn size_text(bytes: u64) -> String {
    reports::sizes::size_text(bytes as f64)
}

impl Plan {
    /// The one-line answer: the fastest online configuration that fits, its budget in bytes,
    /// units and experts, and its tokens/s; or why nothing fits.
    pub fn recommendation(&self) -> String {
        let Some(r) = self.recommended.map(|i| &self.rows[i]) else {
            let why = self
                .rows
                .iter()
                .find_map(|r| r.does_not_fit.as_deref().or(r.error.as_deref()))
                .unwrap_or("no online configuration was planned");
            return format!(
                "nothing fits on `{}` at batch {}: {why}",
                self.hw, self.batch
            );
        };
        let f = r.fit.as_ref().expect("a recommended row fits");
        let units = if r.units_total == r.experts_total {
            String::new()
        } else {
            format!(" ({} units)", reports::sizes::thousands(f.budget_units))
        };
        let cpu = r
            .placement
            .as_ref()
            .map(|c| format!(", experts placed by --cpu-experts {c},"))
            .unwrap_or_default();
        let outside = match f.outside_mark() {
            m if m.is_empty() => m,
            m => format!(" ({m}: see docs/DESIGN.md, --outside-range)"),
        };
        format!(
            "use {} + {}{cpu} with {}{units} = {} of {} experts on the GPU: {} tok/s{outside}",
            r.mechanism,
            r.evict,
            size_text(f.budget_bytes),
            reports::sizes::thousands(f.experts_kept),
            reports::sizes::thousands(r.experts_total),
            reports::metrics::fmt(f.tokens_per_s)
        )
    }

    /// Why the recommended budget is the best of its configuration: the largest budget that
    /// fits, and what a larger one would cost or why none fits; empty when nothing fits.
    pub fn why(&self) -> String {
        let Some(r) = self.recommended.map(|i| &self.rows[i]) else {
            return String::new();
        };
        let (Some(f), Some(top)) = (&r.fit, r.curve.last()) else {
            return String::new();
        };
        let tried = reports::metrics::count(r.curve.len() as u64, "fitting budget");
        let at = |f: &PlanFit| {
            format!(
                "{} at {} tok/s",
                size_text(f.budget_bytes),
                reports::metrics::fmt(f.tokens_per_s)
            )
        };
        let because = if f.budget_units < top.budget_units {
            let over = if top.oversubscribed_page_ins > f.oversubscribed_page_ins {
                format!(
                    ": {} of its page-ins map past 90% of usable VRAM, where the oversubscription curve prices them higher",
                    reports::sizes::thousands(top.oversubscribed_page_ins)
                )
            } else {
                String::new()
            };
            format!("the largest budget that fits, {}{over}", at(top))
        } else if top.budget_units == r.units_total {
            "the whole bank fits at this budget".to_string()
        } else {
            "it is also the largest budget that fits: one unit more does not admit the whole batch under the cap".to_string()
        };
        format!(
            "why: the fastest of {tried} run for {}; {because}",
            r.name()
        )
    }

    /// Where the VRAM goes at the recommended budget, one line per use; empty when nothing
    /// fits.
    pub fn memory(&self) -> String {
        self.recommended
            .and_then(|i| self.rows[i].memory.as_ref())
            .map_or_else(String::new, |m| m.text("VRAM at the best budget"))
    }

    /// Tokens/s against budget of the recommended configuration, one line per budget run
    /// (at most [`CURVE_LINES`], evenly picked, the best and the largest always among them),
    /// with a bar scaled to the fastest; empty when nothing fits.
    pub fn curve(&self) -> String {
        let Some(r) = self.recommended.map(|i| &self.rows[i]) else {
            return String::new();
        };
        let (Some(best), Some(top)) = (&r.fit, r.curve.last()) else {
            return String::new();
        };
        let max = best.tokens_per_s.max(f64::MIN_POSITIVE);
        let mut out = format!("tokens/s against budget, {}:\n", r.name());
        for f in shown(&r.curve, best.budget_units) {
            let bar = "#".repeat((CURVE_BAR as f64 * f.tokens_per_s / max).round() as usize);
            let mark =
                if f.budget_units == best.budget_units && best.budget_units == top.budget_units {
                    "  <- best, the largest that fits"
                } else if f.budget_units == best.budget_units {
                    "  <- best"
                } else if f.budget_units == top.budget_units {
                    "  <- the largest that fits"
                } else {
                    ""
                };
            push_row(
                &mut out,
                format!(
                    "{:>11} {:>10} tok/s  {bar:<CURVE_BAR$}{mark}",
                    size_text(f.budget_bytes),
                    reports::metrics::fmt(f.tokens_per_s)
                ),
            );
        }
        out.pop();
        out
    }

    /// The ranked table, one row per configuration, then a line on the cap.
    pub fn table(&self) -> String {
        let names: Vec<String> = self.rows.iter().map(PlanRow::name).collect();
        // 22 columns, wider only when a placement's name needs it
        let w = names.iter().map(|n| n.len()).max().unwrap_or(0).max(22);
        let mut out = format!(
            "{:<4} {:<w$} {:>11} {:>15} {:>10} {:>9} {:>9} {:>11}  {}\n",
            "rank",
            "mechanism + policy",
            "budget",
            "experts",
            "tokens/s",
            "p50 ms",
            "miss",
            "peak MiB",
            "note"
        );
        for (i, (r, name)) in self.rows.iter().zip(&names).enumerate() {
            let mut note = match (&r.fit, &r.does_not_fit, &r.error) {
                (Some(_), _, _) if r.bound => "the offline bound, not a choice".to_string(),
                (Some(f), _, _) if f.budget_units == r.units_total => "the whole bank fits".into(),
                (Some(_), _, _) => String::new(),
                (None, Some(why), _) => format!("does not fit: {why}"),
                (None, None, Some(e)) => format!("not run: {e}"),
                (None, None, None) => String::new(),
            };
            if let Some(mark) = r.fit.as_ref().map(PlanFit::outside_mark) {
                if !mark.is_empty() {
                    note = if note.is_empty() {
                        mark
                    } else {
                        format!("{note}; {mark}")
                    };
                }
            }
            let Some(f) = &r.fit else {
                push_row(
                    &mut out,
                    format!(
                        "{:<4} {name:<w$} {:>11} {:>15} {:>10} {:>9} {:>9} {:>11}  {note}",
                        "-", "-", "-", "-", "-", "-", "-"
                    ),
                );
                continue;
            };
            let experts = format!(
                "{} of {}",
                reports::sizes::thousands(f.experts_kept),
                reports::sizes::thousands(r.experts_total)
            );
            push_row(
                &mut out,
                format!(
                    "{:<4} {name:<w$} {:>11} {experts:>15} {:>10} {:>9} {:>8}% {:>11}  {note}",
                    i + 1,
                    size_text(f.budget_bytes),
                    reports::metrics::fmt(f.tokens_per_s),
                    reports::metrics::fmt(f.step_ms_p50),
                    reports::metrics::fmt(100.0 * f.miss_rate),
                    reports::metrics::fmt(f.peak_mapped_mib.round()),
                ),
            );
        }
        let limit = self
            .limit_mib
            .map(|l| format!(" = {} MiB", reports::metrics::fmt(l.round())))
            .unwrap_or_default();
        out.push_str(&format!(
            "budgets: the fastest of those that fit under {} x usable VRAM of `{}`{limit} with non-expert weights and the KV caches of {}\n",
            self.admission_cap,
            self.hw,
            reports::metrics::count(self.batch as u64, "sequence"),
        ));
        if self.context_tokens > 0 {
            out.pop();
            out.push_str(&format!(
                ", each holding {} tokens of context\n",
                reports::sizes::thousands(self.context_tokens)
            ));
        }
        out
    }
}

/// Most lines of [`Plan::curve`].
const CURVE_LINES: usize = 12;

/// Width of the fastest budget's bar in [`Plan::curve`].
const CURVE_BAR: usize = 30;

/// At most [`CURVE_LINES`] points of `curve` (smallest budget first), evenly picked, with the
/// point at `best` units and the last (largest) point always kept.
fn shown(curve: &[PlanFit], best: u64) -> Vec<&PlanFit> {
    let n = curve.len();
    if n <= CURVE_LINES {
        return curve.iter().collect();
    }
    let mut keep: Vec<usize> = (0..CURVE_LINES - 1)
        .map(|k| k * (n - 1) / (CURVE_LINES - 1))
        .collect();
    keep.push(n - 1);
    if let Some(b) = curve.iter().position(|f| f.budget_units == best) {
        keep.push(b);
    }
    keep.sort_unstable();
    keep.dedup();
    keep.into_iter().map(|i| &curve[i]).collect()
}

/// Append one table row without the padding its empty last column leaves.
fn push_row(out: &mut String, row: String) {
    out.push_str(row.trim_end());
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_finds_the_largest_fitting_budget() {
        for bank in [1u64, 2, 3, 10, 777, 6144] {
            for limit in [0u64, 1, 2, 5, 500, 6144, 10_000] {
                let runs = std::cell::Cell::new(0);
                let got = largest_fitting(bank, |u| {
                    runs.set(runs.get() + 1);
                    assert!((1..=bank).contains(&u), "probe {u} outside 1..={bank}");
                    Ok(if u <= limit {
                        Trial::Fits(())
                    } else {
                        Trial::Over(format!("{u} > {limit}"))
                    })
                })
                .unwrap();
                let want = limit.min(bank);
                match got {
                    Ok((u, _)) => assert_eq!(u, want, "bank {bank} limit {limit}"),
                    Err(why) => assert!(want == 0 && why == "1 > 0", "{why}"),
                }
                // 1, then the bank, then a bisection of 1..bank
                let bound = 2 + (64 - bank.leading_zeros()) as usize;
                let runs = runs.get();
                assert!(runs <= bound, "{runs} runs for a bank of {bank}");
            }
        }
    }

    /// A fit at `units` running at `tps` tokens/s (the other figures do not matter here).
    fn point(units: u64, tps: f64) -> PlanFit {
        PlanFit {
            budget_units: units,
            budget_bytes: units,
            experts_kept: units,
            tokens_per_s: tps,
            step_ms_p50: 0.0,
            peak_mapped_mib: 0.0,
            miss_rate: 0.0,
            page_ins_per_token: 0.0,
            oversubscribed_page_ins: 0,
            usable_mib: 0.0,
            outside_range: Vec::new(),
        }
    }

    /// Tokens/s that rise with the budget up to `peak` and fall past it (a page-in saved
    /// per unit below the peak, the oversubscription curve's price above it).
    fn peaked(peak: u64) -> impl Fn(u64) -> f64 {
        move |u| {
            if u <= peak {
                10.0 + u as f64
            } else {
                10.0 + peak as f64 - 3.0 * (u - peak) as f64
            }
        }
    }

    #[test]
    fn the_budget_search_finds_the_peak_not_the_largest_budget() {
        for largest in [1u64, 2, 7, 8, 9, 33, 263, 6144] {
            for peak in [
                1,
                2,
                largest / 3,
                largest * 5 / 6,
                largest.saturating_sub(1),
                largest,
            ] {
                let peak = peak.clamp(1, largest);
                let tps = peaked(peak);
                let curve = best_budget(largest, point(largest, tps(largest)), &|u| {
                    assert!((1..=largest).contains(&u));
                    Ok(Trial::Fits((point(u, tps(u)), ())))
                })
                .unwrap();
                let best = best_of(&curve).unwrap();
                // the independent answer: a scan of every budget
                let want = (1..=largest)
                    .max_by(|&a, &b| tps(a).total_cmp(&tps(b)).then(b.cmp(&a)))
                    .unwrap();
                assert_eq!(best.budget_units, want, "largest {largest} peak {peak}");
                assert!(curve
                    .windows(2)
                    .all(|w| w[0].budget_units < w[1].budget_units));
                assert_eq!(curve.last().unwrap().budget_units, largest);
                // a few rounds of 8, not a scan of a large bank
                assert!(curve.len() <= 48, "{} runs for {largest}", curve.len());
            }
        }
    }

    #[test]
    fn equally_fast_budgets_recommend_the_smallest() {
        // a plateau from 5 units up: every budget above 5 is dominated by 5
        let tps = |u: u64| u.min(5) as f64;
        let curve = best_budget(40, point(40, tps(40)), &|u| {
            Ok(Trial::Fits((point(u, tps(u)), ())))
        })
        .unwrap();
        assert_eq!(best_of(&curve).unwrap().budget_units, 5);
    }
}
