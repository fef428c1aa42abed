//! The inverse question: the smallest budget that reaches a tokens-per-second target when
//! every page-in crosses the link (the transfer floor).

use super::{Budget, CacheConfig, CacheError, Workload};
use policies::UnitMap;

/// Answer of a target search (the `target` block of a run report); defined beside the other
/// report blocks.
pub use reports::run::TargetReport;

/// Smallest unit budget for `cfg` (its `budget` is ignored) whose bytes per token over a
/// `link_gbps` GB/s link gives at least `target` tokens per second. Binary search over unit
/// counts when the policy is monotone in the budget, else a scan from 1 upwards.
pub fn smallest_budget(
    w: &Workload,
    map: &UnitMap,
    cfg: &CacheConfig,
    target: f64,
    link_gbps: f64,
) -> Result<TargetReport, CacheError> {
    smallest_budget_by(map.num_units(), cfg, (target, link_gbps), |c| {
        Ok(w.run(map, c)?.cache.bytes_per_token)
    })
}

/// Set `cfg`'s budget to the one the search `t` found over a bank of `units` units (the
/// whole bank when no budget reaches the target).
pub fn resolve_budget(cfg: &mut CacheConfig, t: &TargetReport, units: usize) {
    cfg.budget = Budget::Units(t.budget_units.unwrap_or(units as u64));
}

/// [`smallest_budget`] over a bank of `units` units, each budget tried by `eval` (the bytes
/// per token of the run of that configuration): for a caller that replays the stream
/// itself, such as one that streams it from a trace file.
pub fn smallest_budget_by<E: From<CacheError>>(
    units: usize,
    cfg: &CacheConfig,
    (target, link_gbps): (f64, f64),
    mut eval: impl FnMut(&CacheConfig) -> Result<f64, E>,
) -> Result<TargetReport, E> {
    let positive = |x: f64| x > 0.0 && x.is_finite();
    if !positive(target) || !positive(link_gbps) {
        return Err(CacheError::TargetNotPositive { target, link_gbps }.into());
    }
    let link = link_gbps * 1e9;
    let mut evaluations = 0u64;
    let mut bpt = |units: usize| -> Result<f64, E> {
        evaluations += 1;
        eval(&CacheConfig {
            budget: Budget::Units(units as u64),
            ..cfg.clone()
        })
    };
    let ok = |b: f64| b == 0.0 || link / b >= target;
    let n = units;
    let monotone = cfg.policy.monotone_in_budget();
    let mut found = None;
    if monotone {
        let (mut lo, mut hi) = (1usize, n);
        if ok(bpt(n)?) {
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if ok(bpt(mid)?) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            found = Some(lo);
        }
    } else {
        for units in 1..=n {
            if ok(bpt(units)?) {
                found = Some(units);
                break;
            }
        }
    }
    let at = found.unwrap_or(n);
    let b = bpt(at)?;
    Ok(TargetReport {
        target_tokens_per_s: target,
        link_gbps,
        budget_units: found.map(|u| u as u64),
        bytes_per_token: b,
        tokens_per_s: (b > 0.0).then(|| link / b),
        search: if monotone { "binary" } else { "scan" }.into(),
        evaluations,
    })
}
