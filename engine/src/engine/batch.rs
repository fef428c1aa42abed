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
    let mut p = PlanPeak::new(plans, units, compute);
    p.scan(plans, plans.end_group());
    p.peak
}

/// [`plan_peak_bytes`] of a plan recorded and retired window by window: each window's groups
/// are scanned before they are retired, in group order, so the peak is the whole plan's.
pub struct PlanPeak<'a> {
    units: &'a UnitMap,
    compute: &'a ComputeModel,
    resident: Vec<bool>,
    /// Committed bytes of the resident units.
    mapped: f64,
    /// The largest mapped bytes (with the step's non-expert weights and KV cache) so far.
    pub peak: f64,
    /// The number of the next group to scan.
    next: usize,
}

impl<'a> PlanPeak<'a> {
    /// Nothing scanned yet of the plan whose first window is `plans` (its preloaded units
    /// are resident from the start).
    pub fn new(plans: &Plans, units: &'a UnitMap, compute: &'a ComputeModel) -> Self {
        let mut p = PlanPeak {
            units,
            compute,
            resident: vec![false; units.num_units()],
            mapped: 0.0,
            peak: 0.0,
            next: 0,
        };
        for &u in &plans.preloaded {
            if !p.resident[u as usize] {
                p.resident[u as usize] = true;
                p.mapped += p.bytes(u);
            }
        }
        p
    }

    fn bytes(&self, u: u32) -> f64 {
        self.units.units[u as usize].committed_bytes as f64
    }

    /// Scan the groups from the next one up to group number `upto` (exclusive) of `plans`.
    pub fn scan(&mut self, plans: &Plans, upto: usize) {
        for gi in self.next..upto {
            let g = plans.group(gi);
            let s = plans.step(g.step as usize);
            let base =
                self.compute.nonexpert_bytes + s.kv_tokens as f64 * self.compute.kv_bytes_per_token;
            let mut late = 0.0;
            for &u in plans.evicted(&g) {
                if self.resident[u as usize] {
                    self.resident[u as usize] = false;
                    self.mapped -= self.bytes(u);
                } else {
                    late += self.bytes(u);
                }
            }
            for &u in plans.page_ins(&g) {
                self.resident[u as usize] = true;
                self.mapped += self.bytes(u);
            }
            self.peak = self.peak.max(base + self.mapped);
            for &u in plans.evicted(&g) {
                self.resident[u as usize] = false;
            }
            self.mapped -= late;
        }
        self.next = self.next.max(upto);
    }
}

/// The bookkeeping of an admission search under a cap: the limit, and the peak that refused
/// each batch size tried (the plan's own when it is over the cap, else the replay's, since
/// prefetches and deferred unmaps map more than the plan); the smallest is reported.
pub struct AdmissionSearch {
    requested: usize,
    cap: f64,
    /// cap x usable VRAM, bytes.
    pub limit: f64,
    profile: String,
    smallest_need: f64,
    priced_by_replay: bool,
}

impl AdmissionSearch {
    /// A search from `requested` sequences down under `cap` x `cost`'s usable VRAM; errors
    /// unless the cap is a positive finite fraction.
    pub fn new(requested: usize, cap: f64, cost: &CostModel) -> anyhow::Result<Self> {
        anyhow::ensure!(
            cap > 0.0 && cap.is_finite(),
            "--admission-cap {cap} must be a positive fraction of usable VRAM, e.g. 0.90"
        );
        Ok(AdmissionSearch {
            requested,
            cap,
            limit: cap * cost.usable_bytes,
            profile: cost.profile.clone(),
            smallest_need: f64::INFINITY,
            priced_by_replay: false,
        })
    }

    /// Whether a peak of `need` bytes (the replay's when `by_replay`, else the plan's) fits;
    /// a refused one is noted.
    pub fn fits(&mut self, need: f64, by_replay: bool) -> bool {
        // a NaN peak is not over the cap (as the comparison has always read)
        let over = need > self.limit;
        if !over {
            return true;
        }
        if need < self.smallest_need {
            (self.smallest_need, self.priced_by_replay) = (need, by_replay);
        }
        false
    }

    /// The admission of `n` sequences.
    pub fn admitted(&self, n: usize) -> Admission {
        Admission {
            requested: self.requested,
            admitted: n,
            cap: Some(self.cap),
            limit_mib: Some(self.limit / crate::MIB),
        }
    }

    /// The error once every batch size was refused.
    pub fn none_fits(self) -> NoSequenceFits {
        NoSequenceFits {
            need_mib: self.smallest_need / crate::MIB,
            priced_by_replay: self.priced_by_replay,
            cap: self.cap,
            profile: self.profile,
            limit_mib: self.limit / crate::MIB,
        }
    }
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
    let mut search = AdmissionSearch::new(requested, cap, cost)?;
    for n in (1..=requested).rev() {
        let plans = build(n)?;
        if !search.fits(plan_peak_bytes(&plans, units, compute), false) {
            continue;
        }
        let r = replay_learning(&plans, units, ks, cost, compute, opts, learning)?;
        if !search.fits(r.peak_mapped_bytes, true) {
            continue;
        }
        return Ok((search.admitted(n), plans, r));
    }
    Err(search.none_fits().into())
}
