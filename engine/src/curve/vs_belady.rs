//! "Policy or working set?" for a configuration over an in-memory workload (`sim plan
//! --vs-belady`): at a budget, the policy's page-ins, Belady/MIN's from its exact curve, and
//! the budget the policy needs to match them (LRU's exact curve for lru, bisection over runs
//! of the cache regime for the other policies), as `sim run --vs-belady` reports for a file.

use super::{bisect_budget, budget_reaching, of_workload};
use crate::cache::{Budget, CacheConfig, CacheError, Semantics, Split, Workload};
use policies::{PolicyKind, UnitMap};
use reports::run::VsBelady;

/// The `vs_belady` block of `policy` at `budget_units` units of `map` (global split) over
/// `w` under `semantics` (`seed`: the random policy's).
pub fn of_workload_at(
    w: &Workload,
    map: &UnitMap,
    policy: PolicyKind,
    budget_units: u64,
    semantics: Semantics,
    seed: u64,
) -> Result<VsBelady, CacheError> {
    let mut kinds = vec![PolicyKind::Belady];
    if policy == PolicyKind::Lru {
        kinds.insert(0, PolicyKind::Lru);
    }
    let curves = of_workload(w, map, &kinds, Split::Global, semantics)?;
    let min = curves.last().expect("Belady's curve is recorded");
    let belady = min.at(budget_units as usize);
    let run = |units: usize| -> Result<u64, CacheError> {
        let cfg = CacheConfig {
            policy,
            budget: Budget::Units(units as u64),
            split: Split::Global,
            semantics,
            dram: None,
            seed,
        };
        Ok(w.run(map, &cfg)?.cache.page_ins)
    };
    let own = curves.iter().find(|c| c.evict == policy);
    let matching = match own {
        Some(c) => budget_reaching(c, belady),
        None => bisect_budget(min.page_ins.len(), belady, run)?,
    };
    let policy_page_ins = match own {
        Some(c) => c.at(budget_units as usize),
        None => run(budget_units as usize)?,
    };
    Ok(VsBelady {
        policy,
        budget_units,
        policy_page_ins,
        belady_page_ins: belady,
        policy_budget_matching_belady: matching.map(|b| b as u64),
        matched_by: if own.is_some() {
            "exact-curve"
        } else {
            "bisection"
        }
        .to_string(),
    })
}
