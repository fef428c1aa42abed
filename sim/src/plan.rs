//! `sim plan`: what fits on the GPU, and what is fastest.
//!
//! For every mechanism and retention policy asked for, the largest expert budget (in units)
//! whose timed replay passes the engine's admission check ([`crate::engine::admit`]: the whole
//! requested batch admitted, mapped memory = non-expert weights + KV caches + committed expert
//! units never above `cap x usable VRAM`), found by binary search on the budget; then the
//! configurations ranked by tokens per second. The search assumes that mapped memory does not
//! shrink as the budget grows (a larger budget keeps at least as many units resident), which
//! holds for every registered policy: all of them fill the budget before they evict.
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
    /// The largest budget that fits; `None` when not even one unit does, or on an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit: Option<PlanFit>,
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
    fn name(&self) -> String {
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
    /// Index into `rows` of the recommended configuration: the fastest online one that fits.
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
    let spec = &with_context(spec, &map, w)?;
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
        fit: None,
        does_not_fit: None,
        error: None,
        runs: 0,
    };
    let mut limit = None;
    match largest_fitting(bank.units.max(1), |units| {
        row.runs += 1;
        trial(spec, mechanism, policy, units, w)
    }) {
        Ok(Ok((units, r))) => {
            limit = r.admission.as_ref().and_then(|a| a.limit_mib);
            row.fit = Some(bank.fit(units, &r));
        }
        Ok(Err(why)) => row.does_not_fit = Some(why),
        Err(e) => row.error = Some(format!("{e:#}")),
    }
    Ok((row, limit))
}

/// `spec` with its context's KV caches reserved: the non-expert memory override raised by
/// batch x `context_tokens` x KV bytes per token, both resolved as the engine resolves them
/// for this mechanism's expert size (the geometry, the preset, or the overrides). Unchanged
/// without a context.
fn with_context(spec: &PlanSpec, map: &policies::UnitMap, w: &Workload) -> Result<PlanSpec> {
    let Some(t) = spec
        .base
        .timing
        .as_ref()
        .filter(|_| spec.context_tokens > 0)
    else {
        return Ok(spec.clone());
    };
    let c = crate::model_profile::ComputeModel::new(
        t.compute,
        &w.trace.trace.header.model,
        map.expert_bytes,
        &t.profile,
        &t.overrides,
    )?;
    let batch = spec.retention.batching.batch as f64;
    let kv = batch * spec.context_tokens as f64 * c.kv_bytes_per_token;
    let mut out = spec.clone();
    if let Some(t) = out.base.timing.as_mut() {
        t.overrides.nonexpert_mib = Some((c.nonexpert_bytes + kv) / crate::MIB);
    }
    Ok(out)
}

/// The largest budget in `1..=bank` at which `run` fits, with its report, assuming fitting
/// is monotone in the budget; `Ok(Err(why))` when not even 1 fits.
fn largest_fitting<T>(
    bank: u64,
    mut run: impl FnMut(u64) -> Result<Trial<T>>,
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
            "budgets: the largest that fits under {} x usable VRAM of `{}`{limit} with non-expert weights and the KV caches of {}\n",
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
                let mut runs = 0;
                let got = largest_fitting(bank, |u| {
                    runs += 1;
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
                assert!(runs <= bound, "{runs} runs for a bank of {bank}");
            }
        }
    }
}
