//! The exact curves `sim compare` records for its report's budget plot when time is not
//! simulated: per trace and mechanism, LRU's and Belady/MIN's page-ins at every budget
//! (sampled to [`reports::results::CURVE_POINTS`] budgets), from one pass over the trace
//! ([`sim::bounded::curve::curve_file`], `sim curve`'s method).
//!
//! A curve is kept only where it equals, at every budget of the grid, the page-ins of the
//! grid's own run of that policy: the curve steps one token per sequence under the global
//! split, so a grid whose runs step otherwise (batches, forward passes, a DRAM tier, a
//! per-layer split) gets no curve rather than one that disagrees with its table.

use policies::mechanisms::SizeOptions;
use policies::PolicyKind;
use reports::{BudgetCurve, RunEntry};
use sim::bounded::curve::{curve_file, CurveConfig};
use sim::cache::{Semantics, Split};
use std::path::Path;
use traces::PhaseSel;

/// What the curves are recorded over: the grid's traces (names and files), phase, sizes and
/// semantics.
pub struct Inputs<'a> {
    pub names: &'a [String],
    pub files: &'a [std::path::PathBuf],
    pub phase: PhaseSel,
    pub sizes: SizeOptions,
    pub semantics: Semantics,
}

/// The curves of every (trace, mechanism) whose own global-split LRU or Belady runs the
/// curves reproduce; empty when none does.
pub fn record(inp: &Inputs, runs: &[RunEntry]) -> Vec<BudgetCurve> {
    let mut out = Vec::new();
    for (name, file) in inp.names.iter().zip(inp.files) {
        let mut mechs: Vec<&str> = Vec::new();
        for r in runs
            .iter()
            .filter(|r| &r.grid.trace == name && !r.grid.is_cross())
        {
            if r.grid.evict.is_some() && !mechs.contains(&r.grid.mechanism.as_str()) {
                mechs.push(&r.grid.mechanism);
            }
        }
        for mech in mechs {
            let of = |k: PolicyKind| -> Vec<&RunEntry> {
                runs.iter()
                    .filter(|r| {
                        &r.grid.trace == name
                            && !r.grid.is_cross()
                            && r.grid.mechanism == mech
                            && r.grid.split.as_deref() == Some(Split::Global.name())
                            && r.grid.evict.as_deref() == Some(k.name())
                    })
                    .collect()
            };
            out.extend(of_mechanism(inp, file, name, mech, &of));
        }
    }
    out
}

/// The curves of one trace and mechanism that agree with `of(policy)`, the grid's runs.
fn of_mechanism<'a>(
    inp: &Inputs,
    file: &Path,
    name: &str,
    mech: &str,
    of: &dyn Fn(PolicyKind) -> Vec<&'a RunEntry>,
) -> Vec<BudgetCurve> {
    let kinds: Vec<PolicyKind> = [PolicyKind::Lru, PolicyKind::Belady]
        .into_iter()
        .filter(|&k| !of(k).is_empty())
        .collect();
    if kinds.is_empty() {
        return Vec::new();
    }
    let cfg = CurveConfig {
        mechanism: mech.to_string(),
        phase: inp.phase,
        sizes: inp.sizes,
        policies: kinds,
        split: Split::Global,
        semantics: inp.semantics,
    };
    // a trace the runs read is readable: an error here drops the curve, never the report
    let Ok(report) = curve_file(&cfg, file, None, &|_| {}) else {
        return Vec::new();
    };
    let units = report.units as u64;
    report
        .curves
        .iter()
        .filter(|c| {
            of(c.evict).iter().all(|r| {
                r.cache().is_some_and(|cr| {
                    cr.budget_units >= 1 && c.at(cr.budget_units as usize) == cr.page_ins
                })
            })
        })
        .map(|c| BudgetCurve {
            trace: name.to_string(),
            mechanism: mech.to_string(),
            split: Split::Global.name().to_string(),
            evict: c.evict.name().to_string(),
            units,
            points: BudgetCurve::sample_budgets(units)
                .into_iter()
                .map(|b| (b, c.at(b as usize)))
                .collect(),
        })
        .collect()
}
