//! Batch admission under a cap: the largest batch whose mapped memory (non-expert weights,
//! KV caches, committed expert units) stays within `cap x usable VRAM` for the whole replay.

use super::plan::Plans;
use super::predict::Learning;
use super::replay::{replay_learning, EngineOptions, Replay};
use crate::cost::CostModel;
use crate::model_profile::ComputeModel;
use policies::UnitMap;
use traces::KeySpace;

/// The outcome of admission (the `admission` block of a run report); defined beside the
/// other report blocks.
pub use reports::run::Admission;

/// Not even one sequence fits under the admission cap: the error of [`admit`], typed so that
/// a grid (`sim compare`, `sim plan`) can mark the configuration "does not fit" and go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the admission cap admits no sequence: one sequence maps {need_mib:.0} MiB at its peak{} but {cap} x usable VRAM of profile '{profile}' is {limit_mib:.0} MiB; lower the budget, raise --admission-cap or pick a larger GPU", if *.priced_by_replay { " (as replayed, with prefetches and deferred unmaps)" } else { "" })]
pub struct NoSequenceFits {
    /// The peak mapped memory that refused the smallest batch tried (one sequence), MiB:
    /// always above `limit_mib`.
    pub need_mib: f64,
    /// Whether that peak is the replay's (prefetches and deferred unmaps included) rather
    /// than the plan's own.
    pub priced_by_replay: bool,
    /// The cap, a fraction of usable VRAM.
    pub cap: f64,
    /// The hardware profile's name.
    pub profile: String,
    /// cap x usable VRAM, MiB.
    pub limit_mib: f64,
}

impl NoSequenceFits {
    /// The same for a budget of one unit, without advice on the budget, for a grid that
    /// chooses the budget itself (`sim plan` searches it from one unit up).
    pub fn at_one_unit(&self) -> String {
        let replay = if self.priced_by_replay {
            " (as replayed, with prefetches and deferred unmaps)"
        } else {
            ""
        };
        format!(
            "the admission cap admits no sequence even at a budget of one unit: one sequence maps {:.0} MiB at its peak{replay} but {} x usable VRAM of profile '{}' is {:.0} MiB",
            self.need_mib, self.cap, self.profile, self.limit_mib
        )
    }
}

/// Peak mapped bytes of `plans` with every decommit immediate and no prefetch (the memory
/// the plan itself needs), counted like the engine counts it.
pub fn plan_peak_bytes(plans: &Plans, units: &UnitMap, compute: &ComputeModel) -> f64 {
    let mut resident = vec![false; units.num_units()];
    let mut mapped = 0.0f64;
    for &u in &plans.preloaded {
        if !resident[u as usize] {
            resident[u as usize] = true;
            mapped += units.units[u as usize].committed_bytes as f64;
        }
    }
    let mut peak = 0.0f64;
    for g in &plans.groups {
        let s = plans.steps[g.step as usize];
        let base = compute.nonexpert_bytes + s.kv_tokens as f64 * compute.kv_bytes_per_token;
        let mut late = 0.0;
        for &u in plans.evicted(g) {
            if resident[u as usize] {
                resident[u as usize] = false;
                mapped -= units.units[u as usize].committed_bytes as f64;
            } else {
                late += units.units[u as usize].committed_bytes as f64;
            }
        }
        for &u in plans.page_ins(g) {
            resident[u as usize] = true;
            mapped += units.units[u as usize].committed_bytes as f64;
        }
        peak = peak.max(base + mapped);
        for &u in plans.evicted(g) {
            resident[u as usize] = false;
        }
        mapped -= late;
    }
    peak
}

/// Admit sequences under `cap`: from `requested` down, build the plans of `n` sequences with
/// `build(n)` and keep the first `n` whose replay (the predictor learning from `learning`)
/// never maps more than `cap x usable VRAM`; returns the admission, that plan and its replay.
/// Errors when even one sequence does not fit, naming the memory it needs.
#[allow(clippy::too_many_arguments)]
pub fn admit(
    requested: usize,
    cap: f64,
    units: &UnitMap,
    ks: &KeySpace,
    cost: &CostModel,
    compute: &ComputeModel,
    opts: EngineOptions,
    learning: Learning<'_>,
    mut build: impl FnMut(usize) -> anyhow::Result<Plans>,
) -> anyhow::Result<(Admission, Plans, Replay)> {
    anyhow::ensure!(
        cap > 0.0 && cap.is_finite(),
        "--admission-cap {cap} must be a positive fraction of usable VRAM, e.g. 0.90"
    );
    let limit = cap * cost.usable_bytes;
    // The peak that refused each batch size: the plan's own when it is over the cap, else the
    // replay's (prefetch and deferred unmaps map more than the plan); the smallest is reported.
    let mut smallest_need = f64::INFINITY;
    let mut priced_by_replay = false;
    for n in (1..=requested).rev() {
        let plans = build(n)?;
        let need = plan_peak_bytes(&plans, units, compute);
        if need > limit {
            if need < smallest_need {
                (smallest_need, priced_by_replay) = (need, false);
            }
            continue;
        }
        let r = replay_learning(&plans, units, ks, cost, compute, opts, learning)?;
        if r.peak_mapped_bytes > limit {
            if r.peak_mapped_bytes < smallest_need {
                (smallest_need, priced_by_replay) = (r.peak_mapped_bytes, true);
            }
            continue;
        }
        let admission = Admission {
            requested,
            admitted: n,
            cap: Some(cap),
            limit_mib: Some(limit / crate::MIB),
        };
        return Ok((admission, plans, r));
    }
    Err(NoSequenceFits {
        need_mib: smallest_need / crate::MIB,
        priced_by_replay,
        cap,
        profile: cost.profile.clone(),
        limit_mib: limit / crate::MIB,
    }
    .into())
}
