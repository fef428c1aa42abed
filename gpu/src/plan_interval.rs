//! `sim plan --intervals N`: the 90% interval of the tokens/s of the plan's best two online
//! answers, each at its best budget ([`crate::run_interval`]: the run under `N` profiles
//! drawn from the constants' measured spread), and whether the two overlap: when they do,
//! the ranking between them is within what the constants' spread can move.

use crate::engine::cpu::CpuExperts;
use crate::plan::{Plan, PlanRow, PlanSpec};
use crate::run_interval::{run_interval, RunInterval};
use crate::runner::{self, RunConfig, Workload};
use anyhow::{Context, Result};
use policies::Budget;
use serde::Serialize;

/// One ranked answer and its interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankedInterval {
    /// The row's name (`e1 + lru`).
    pub row: String,
    /// Its budget, commit units.
    pub budget_units: u64,
    /// Its tokens/s as the plan priced it.
    pub tokens_per_s: f64,
    pub interval: RunInterval,
}

/// The intervals of the best two answers (`intervals` in `sim plan --json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanIntervals {
    /// Best first.
    pub ranked: Vec<RankedInterval>,
    /// Whether the best two tokens/s intervals overlap; absent with fewer than two known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_two_overlap: Option<bool>,
}

impl PlanIntervals {
    /// The text block of `sim plan`.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for r in &self.ranked {
            let i = &r.interval;
            let band = match i.tokens_per_s {
                Some(t) => format!(
                    "[{:.2}, {:.2}] (90% over {} drawn profiles)",
                    t[0], t[1], i.draws
                ),
                None => format!("interval unknown: {}", i.unknown.as_deref().unwrap_or("-")),
            };
            out.push_str(&format!(
                "interval  {} at {} units: {:.2} tokens/s {band}\n",
                r.row, r.budget_units, r.tokens_per_s
            ));
        }
        match self.best_two_overlap {
            Some(true) => out.push_str("the best two overlap: which is faster is within the constants' measured spread\n"),
            Some(false) => out.push_str("the best two do not overlap: the ranking holds over the constants' measured spread\n"),
            None => {}
        }
        out
    }
}

/// The intervals of the first two fitting online rows of `plan` (planned from `spec`).
pub fn plan_intervals(
    spec: &PlanSpec,
    plan: &Plan,
    w: &Workload,
    draws: u32,
) -> Result<PlanIntervals> {
    let mut ranked = Vec::new();
    for row in plan
        .rows
        .iter()
        .filter(|r| r.fit.is_some() && !r.bound)
        .take(2)
    {
        let fit = row.fit.as_ref().expect("filtered on a fit");
        let cfg = config_of(spec, row, fit.budget_units)?;
        let report = runner::run(&cfg, w)?;
        let interval = run_interval(&cfg, &report, draws, |c| runner::run(c, w))?;
        ranked.push(RankedInterval {
            row: row.name(),
            budget_units: fit.budget_units,
            tokens_per_s: fit.tokens_per_s,
            interval,
        });
    }
    let best_two_overlap = match (
        ranked.first().and_then(|r| r.interval.tokens_per_s),
        ranked.get(1).and_then(|r| r.interval.tokens_per_s),
    ) {
        (Some(a), Some(b)) => Some(a[0] <= b[1] && b[0] <= a[1]),
        _ => None,
    };
    Ok(PlanIntervals {
        ranked,
        best_two_overlap,
    })
}

/// The run configuration of `row` at `units` (as the plan's search ran it).
fn config_of(spec: &PlanSpec, row: &PlanRow, units: u64) -> Result<RunConfig> {
    let policy = spec
        .policies
        .iter()
        .copied()
        .find(|p| p.name() == row.evict)
        .with_context(|| format!("the plan's policy {} is not among --evict", row.evict))?;
    let placement = match &row.placement {
        None => CpuExperts::None,
        Some(p) => spec
            .placements
            .iter()
            .copied()
            .find(|c| c.to_string() == *p)
            .with_context(|| format!("the plan's placement {p} is not among --cpu-experts"))?,
    };
    let mut base = spec.base.clone();
    if let Some(t) = base.timing.as_mut() {
        t.cpu_experts = placement;
    }
    let mut retention = spec.retention.clone();
    retention.cache.policy = policy;
    retention.cache.budget = Budget::Units(units);
    Ok(RunConfig {
        policy: row.mechanism.clone(),
        retention: Some(retention),
        ..base
    })
}
