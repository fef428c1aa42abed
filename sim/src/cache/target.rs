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
    let positive = |x: f64| x > 0.0 && x.is_finite();
    if !positive(target) || !positive(link_gbps) {
        return Err(CacheError::TargetNotPositive { target, link_gbps });
    }
    let link = link_gbps * 1e9;
    let mut evaluations = 0u64;
    let mut bpt = |units: usize| -> Result<f64, CacheError> {
        evaluations += 1;
        let c = CacheConfig {
            budget: Budget::Units(units as u64),
            ..cfg.clone()
        };
        Ok(w.run(map, &c)?.cache.bytes_per_token)
    };
    let ok = |b: f64| b == 0.0 || link / b >= target;
    let n = map.num_units();
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
