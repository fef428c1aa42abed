//! What a predictor's prefetches came to: the counts a replay keeps, and the `prefetch`
//! block of a run report, which prices the same plan again without prefetch and with the
//! oracle to say how much of the stall the predictor hid.

use super::predict::{Learning, PredictorKind};
use super::replay::Replay;
use reports::run::{CutPoint, PrefetchReport};
use serde::Serialize;

/// How the engine issues prefetches on the driver and copy engine (`--prefetch-issue`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum PrefetchIssue {
    /// Every prediction is paged in at once, in order with the demand page-ins, never
    /// cancelled (the engine before issue 44; the engine's own default, so its tests and the
    /// golden corpus keep their figures).
    #[default]
    Legacy,
    /// As MoE-Infinity's task pool: prefetches wait in a queue that the driver serves only
    /// when no demand work is waiting; one already started (its commit, then its copy)
    /// finishes; a queued one is dropped once its target group's router is reached or a
    /// demand page-in takes its unit (DESIGN.md, "Prefetch issue policies").
    DemandFirst,
    /// Demand first, and a queued prefetch starts only when its commit and its copy end
    /// before the next demand work could claim the driver or the copy engine, so a prefetch
    /// never delays demand work (DESIGN.md, "Prefetch issue policies").
    IdleOnly,
}

impl PrefetchIssue {
    /// The policy that applies under `paging`: OS-paged prefetches run on the copy engine,
    /// which demand faults do not use, so they keep the legacy path.
    pub fn under(self, paging: crate::cost::Paging) -> Self {
        match paging {
            crate::cost::Paging::Vmm => self,
            crate::cost::Paging::Os => PrefetchIssue::Legacy,
        }
    }

    /// The flag's value, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            PrefetchIssue::Legacy => "legacy",
            PrefetchIssue::DemandFirst => "demand-first",
            PrefetchIssue::IdleOnly => "idle-only",
        }
    }
}

/// The fate of a replay's prefetches; `issued = used + late + wasted + cancelled`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PrefetchCounts {
    pub issued: u64,
    /// Paged in by a group, resident by that group's router.
    pub used: u64,
    /// Paged in by a group while still in flight at its router.
    pub late: u64,
    /// Unmapped unused once their target group passed.
    pub wasted: u64,
    /// Useful bytes of the wasted ones.
    pub wasted_bytes: u64,
    /// Queued and dropped before they started (demand-first only): nothing was mapped.
    pub cancelled: u64,
    /// Time demand work waited, past its issue, for prefetches already started on the
    /// driver or the copy engine (which cannot be preempted), µs; demand-first only.
    pub blocked_us: f64,
    /// Per cut of [`super::replay::cut_curve::CUTS`], the issued prefetches scoring at
    /// least it and the caught (used or late) among them.
    pub curve: super::replay::cut_curve::CutCurve,
}

/// The `prefetch` block of a run that replayed a plan with predictor `kind` at `window`
/// (learning from `learning`, issued per `issue` with at most `cap` bytes in flight and a
/// staging buffer of `buffer` units, cut at
/// `min_score`) as
/// `run`; `price(k)` replays the same plan with predictor `k`
/// (`none`, and `oracle` unless `kind` is the oracle).
#[allow(clippy::too_many_arguments)]
pub fn report<E>(
    kind: PredictorKind,
    window: usize,
    issue: PrefetchIssue,
    cap: Option<u64>,
    buffer: Option<usize>,
    min_score: Option<f64>,
    learning: &Learning<'_>,
    run: &Replay,
    mut price: impl FnMut(PredictorKind) -> Result<Replay, E>,
) -> Result<PrefetchReport, E> {
    let stall = |r: &Replay| r.timing.stall_ms_per_step;
    let none = stall(&price(PredictorKind::None)?);
    let oracle = if kind == PredictorKind::Oracle {
        stall(run)
    } else {
        stall(&price(PredictorKind::Oracle)?)
    };
    let c = run.prefetch;
    let page_ins = run.detail.page_ins;
    let caught = (c.used + c.late) as f64;
    let hidden = none - stall(run);
    Ok(PrefetchReport {
        predictor: kind.name().to_string(),
        window,
        learns_from: kind.learns_from(learning).as_str().to_string(),
        issued: c.issued,
        used: c.used,
        late: c.late,
        wasted: c.wasted,
        page_ins,
        precision: (c.issued > 0).then(|| caught / c.issued as f64),
        recall: (page_ins > 0).then(|| caught / page_ins as f64),
        wasted_bytes_per_token: c.wasted_bytes as f64 / run.detail.tokens.max(1) as f64,
        stall_ms_per_step: stall(run),
        stall_ms_per_step_none: none,
        stall_ms_per_step_oracle: oracle,
        stall_hidden_ms_per_step: hidden,
        stall_hidden_of_oracle: (none - oracle > 0.0).then(|| hidden / (none - oracle)),
        // legacy leaves these out, so its reports read as they did before the policies
        issue: (issue != PrefetchIssue::Legacy).then(|| issue.name().to_string()),
        cap_mib: cap.map(|b| b as f64 / crate::MIB),
        buffer_units: buffer,
        min_score,
        min_score_auto: None,
        cancelled: (issue != PrefetchIssue::Legacy).then_some(c.cancelled),
        blocked_ms_per_step: (issue != PrefetchIssue::Legacy)
            .then(|| c.blocked_us / run.detail.steps.max(1) as f64 / 1e3),
        cut_curve: (issue != PrefetchIssue::Legacy).then(|| cut_points(&c, page_ins)),
    })
}

/// The run's precision and recall at each cut of the curve (against the plan's `page_ins`).
fn cut_points(c: &PrefetchCounts, page_ins: u64) -> Vec<CutPoint> {
    use super::replay::cut_curve::CUTS;
    (0..CUTS.len())
        .map(|i| {
            let (issued, caught) = (c.curve.issued[i], c.curve.caught[i] as f64);
            CutPoint {
                min_score: CUTS[i],
                issued,
                precision: (issued > 0).then(|| caught / issued as f64),
                recall: (page_ins > 0).then(|| caught / page_ins as f64),
            }
        })
        .collect()
}
