//! The discrete-event replay: prices a [`Plans`] on four resource timelines.
//!
//! Resources (each a timeline of busy spans, one job at a time, FIFO):
//! - the compute stream: per group, non-expert compute (weights + the batch's KV read), then,
//!   once every unit the group accesses is resident, the expert compute;
//! - the driver (CPU side, serialized): VMM commits of page-ins and decommits of evictions;
//! - the copy engine: H2D copies, one at a time, `latency + bytes / bandwidth`;
//! - the fault handler: OS demand paging, one batch of pages per group at the fault rate.
//!
//! Per group, at the router (end of non-expert compute): evictions of units resident before the
//! group are decommitted first (critical path), or queued as background driver work with
//! `deferred_unmap` (the driver runs them when it is idle; demand work goes first, a started
//! decommit finishes; a page-in that would map past the oversubscription curve's start runs the
//! oldest first, on the critical path); then each demand page-in commits on the driver and
//! copies on the copy engine (the next unit's commit overlaps this unit's copy, unless
//! `serial_loader`: one CPU thread doing synchronous copies); prefetches for the group `window`
//! groups ahead are issued the same way, once the predictor has seen the history up to this
//! group. A prefetch a group then pages in is used (late when still in flight at that group's
//! router); one no group paged in is queued for unmapping once its target group has passed
//! (wasted), as a deferred decommit is. Units paged in and evicted by the same group are
//! decommitted once its expert compute ends (the kernels read them until then) and the host has
//! learnt it (one round trip). OS-paged evictions hold the fault handler for the fault time
//! they add (the cost model's eviction price). A unit counts as read once a group's expert
//! compute has run over it; VMM calls are priced with the read live set (the read slopes).
//! Deferred work lives in an [`EventQueue`] keyed by (time, push order).

use super::plan::{GroupRec, Plans};
use super::predict::{Learning, Predictor, PredictorKind, Target};
use super::prefetch::{PrefetchCounts, PrefetchIssue};
use super::queue::EventQueue;
use super::report::{StepParts, TimingDetail, TimingReport};
use super::timeline::{Resource, Span, Timeline};
use crate::cost::{Band, CostModel, LiveDomain, OutsideRange, Paging, ReadLive};
use crate::model_profile::ComputeModel;
use policies::UnitMap;
use profile::ProfileError;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use traces::KeySpace;

mod cpu_lane;
pub mod cut_curve;
mod issue;
mod tiers;
pub use cpu_lane::CpuCounts;
pub use tiers::TierCounts;

/// Engine switches (`sim run` timing flags).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineOptions {
    /// Decommit evicted units off the critical path (`--deferred-unmap`).
    pub deferred_unmap: bool,
    /// One loader thread: a unit's copy blocks the driver (synchronous copies).
    pub serial_loader: bool,
    pub predictor: PredictorKind,
    /// Prefetch lead, in MoE layers (groups), >= 1 when a predictor is on.
    pub window: usize,
    /// How prefetches share the driver and copy engine with demand work (`--prefetch-issue`).
    pub issue: PrefetchIssue,
    /// At most this many committed bytes of started prefetches unfinished at once
    /// (`--prefetch-cap`; demand-first only); `None`: no cap.
    pub prefetch_cap: Option<u64>,
    /// A staging buffer of this many unit slots for started prefetches
    /// (`--prefetch-buffer`; demand-first and idle-only); `None`: no bound.
    pub prefetch_buffer: Option<usize>,
    /// The predictors' confidence cut (`--prefetch-min-score`): a fraction of each
    /// prediction's best score; `None`: no cut.
    pub min_score: Option<f64>,
    /// Seed of the oversubscription jitter.
    pub seed: u64,
    /// Record spans for `--timeline`, at most this many (0 = off).
    pub timeline_cap: usize,
    /// Record, per group, the keys the CPU lane ran ([`Replay::cpu_keys`]): what a composed
    /// validation replays on the host CPU.
    pub record_cpu_keys: bool,
}

/// A finished replay.
#[derive(Debug)]
pub struct Replay {
    pub timing: TimingReport,
    pub detail: TimingDetail,
    /// Latency of every step, µs, in order (for tests and plots); empty when the pricer
    /// kept no steps ([`Pricer::new`]'s `keep_steps`).
    pub step_us: Vec<f64>,
    /// Each step's time split by resource, in step order (same length as `step_us`).
    pub step_parts: Vec<StepParts>,
    /// Selected keys summed over the groups (each group's distinct keys).
    pub keys: u64,
    /// Mean latency of the steps that process no prompt token, µs; `None` without one.
    pub decode_step_us_mean: Option<f64>,
    /// Peak mapped bytes (the same figure as `peak_mapped_mib`, unrounded).
    pub peak_mapped_bytes: f64,
    pub timeline: Option<Timeline>,
    /// What became of the prefetches (all zero without a predictor).
    pub prefetch: PrefetchCounts,
    /// The CPU lane's totals (all zero without `--cpu-experts`).
    pub cpu: CpuCounts,
    /// The DRAM and SSD tiers' totals (all zero without `--dram`).
    pub tiers: TierCounts,
    /// Per group (plan order), the keys the CPU lane ran, ascending; `None` unless
    /// [`EngineOptions::record_cpu_keys`] and a CPU lane.
    pub cpu_keys: Option<Vec<Vec<u32>>>,
}

/// Errors of a replay.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// A prefetch lead outside 1 ..= the MoE layers of a step.
    #[error("prefetch window {window} is out of range: a predictor needs a lead of 1 to {moe_layers} MoE layers (one step)")]
    Window { window: usize, moe_layers: usize },
    #[error("{0}")]
    Invalid(String),
}

struct State<'a> {
    cost: &'a CostModel,
    units: &'a UnitMap,
    compute: &'a ComputeModel,
    opts: EngineOptions,
    compute_free: f64,
    copy_free: f64,
    driver_free: f64,
    fault_free: f64,
    busy_compute: f64,
    busy_copy: f64,
    busy_driver: f64,
    busy_fault: f64,
    /// Driver time in commits and in decommits (their sum is `busy_driver`).
    busy_commit: f64,
    busy_decommit: f64,
    /// Expert compute (part of `busy_compute`).
    busy_expert: f64,
    stall: f64,
    /// Resident per the plan (the retention driver's view).
    resident: Vec<bool>,
    /// Prefetched and not yet consumed by a page-in.
    inflight: Vec<bool>,
    ready_at: Vec<f64>,
    /// Committed bytes of units mapped now (resident, in flight, awaiting deferred decommit).
    mapped_units: f64,
    /// VMM granules released and not yet reused by a commit (a commit beyond them is fresh).
    released_granules: u64,
    /// Units mapped and read by a group's expert compute since they were mapped, and their
    /// granules (the read live set the read slopes price); tracked only when a slope is set.
    read: Vec<bool>,
    read_granules: u64,
    read_units: u64,
    track_reads: bool,
    /// Non-expert weights + the current step's KV cache, bytes.
    mapped_base: f64,
    peak_mapped: f64,
    /// Most granules live at once (`live_granules` at its peak), for the validated-region check.
    peak_live: f64,
    /// Queued decommits: (unit, generation); an entry whose generation is stale was
    /// already run early (the unit was paged in again first) and is skipped.
    deferred: EventQueue<(u32, u32)>,
    /// Generation of each unit's queued decommit; `pending[u]` while one is queued.
    generation: Vec<u32>,
    pending: Vec<bool>,
    rng: Pcg64,
    map_calls: u64,
    unmap_calls: u64,
    bytes_in: u64,
    oversubscribed: u64,
    /// Uses of the live-set slopes past their measured live set, commit then decommit.
    outside: [OutsideLive; 2],
    /// Prefetches issued, consumed by a page-in (of which late: still in flight at that
    /// group's router), and unmapped unused (with their useful bytes).
    prefetch_issued: u64,
    prefetch_used: u64,
    prefetch_late: u64,
    prefetch_wasted: u64,
    prefetch_wasted_bytes: u64,
    /// Demand-first issue: the queued prefetches, their per-unit state, the started ones
    /// the cap counts, and the counts ([`issue`]).
    issue: issue::IssueQueue,
    /// Each unit's score when last prefetched, and the cut curve ([`cut_curve`]).
    score_of: Vec<f64>,
    curve: cut_curve::CutCurve,
    timeline: Option<Timeline>,
    step: u32,
    layer: u32,
    /// The CPU lane: when it is free, and its totals.
    cpu_free: f64,
    cpu: CpuCounts,
    /// Per group, the keys the CPU lane ran (when recorded).
    cpu_keys: Option<Vec<Vec<u32>>>,
    /// The plan has a DRAM tier (`--dram`): page-ins are DRAM hits or SSD reads.
    tiered: bool,
    /// Units the current group reads from SSD (marked per group from the plan).
    from_ssd: Vec<bool>,
    /// When the SSD is free (one read at a time), and the tiers' totals.
    ssd_free: f64,
    tiers: TierCounts,
}

impl State<'_> {
    #[inline]
    fn granules(&self, u: u32) -> u64 {
        let info = &self.units.units[u as usize];
        info.committed_bytes
            .div_ceil(self.units.granule_bytes.max(1))
    }

    #[inline]
    fn span(&mut self, resource: Resource, name: &'static str, start_us: f64, dur_us: f64) {
        if let Some(t) = &mut self.timeline {
            t.push(Span {
                resource,
                name,
                start_us,
                dur_us,
                step: self.step,
                layer: self.layer,
            });
        }
    }

    /// Cost factor of a page-in that brings mapped memory to `self.mapped_*`.
    #[inline]
    fn oversub_factor(&mut self) -> Result<f64, EngineError> {
        let mapped = self.mapped_base + self.mapped_units;
        let band = self.cost.band_at(mapped);
        self.band_factor(band, mapped, "page-ins", true)
    }

    /// Cost factor of compute touching resident memory (weights, KV cache) with the current
    /// mapped memory: above 100% of usable VRAM the demoted share is read at the host read
    /// rate when the profile has it, else the touches degrade along the curve.
    #[inline]
    fn touch_factor(&mut self) -> Result<f64, EngineError> {
        let mapped = self.mapped_base + self.mapped_units;
        if let Some(f) = self.cost.spill_factor_at(mapped) {
            return Ok(f);
        }
        let band = self.cost.touch_band_at(mapped);
        self.band_factor(band, mapped, "compute touches of resident memory", false)
    }

    /// What a missing constant of the oversubscription curve was needed for, at `mapped`
    /// bytes: the fill and what fills it (experts, non-expert weights, the KV cache, which
    /// grows with every token of a sequence), and how to stay below the curve.
    fn past_the_curve(&self, what: &str, mapped: f64) -> String {
        let mib = |b: f64| b.max(0.0) / crate::MIB;
        format!(
            "pricing {what} at {:.1}% of usable VRAM (the oversubscription curve), where {:.0} MiB of experts, {:.0} MiB of non-expert weights and {:.0} MiB of KV cache are mapped; lower the batch, the budget or the KV cache (--kv-bytes-per-token, or shorter sequences: it grows with every token), or pass --admission-cap",
            100.0 * mapped / self.cost.usable_bytes,
            mib(mapped - self.mapped_base),
            mib(self.compute.nonexpert_bytes),
            mib(self.mapped_base - self.compute.nonexpert_bytes),
        )
    }

    #[inline]
    fn band_factor(
        &mut self,
        band: Option<Result<Band, &'static str>>,
        mapped: f64,
        what: &str,
        count: bool,
    ) -> Result<f64, EngineError> {
        match band {
            None => Ok(1.0),
            Some(Err(constant)) => Err(ProfileError::Missing {
                profile: self.cost.profile.clone(),
                constant,
                needed_for: self.past_the_curve(what, mapped),
            }
            .into()),
            Some(Ok(b)) => {
                if count {
                    self.oversubscribed += 1;
                }
                let jitter = match b.spread {
                    Some(s) if s > 0.0 => 1.0 + self.rng.gen_range(-0.5 * s..=0.5 * s),
                    _ => 1.0,
                };
                Ok(b.factor * jitter)
            }
        }
    }

    /// Granules mapped now (VMM units; the live count the driver's calls depend on).
    #[inline]
    fn live_granules(&self) -> f64 {
        self.mapped_units / self.units.granule_bytes.max(1) as f64
    }

    #[inline]
    fn note_mapped(&mut self) {
        let m = self.mapped_base + self.mapped_units;
        if m > self.peak_mapped {
            self.peak_mapped = m;
        }
        self.peak_live = self.peak_live.max(self.live_granules());
    }

    /// Run queued background decommits that can start before `t` (a started one finishes).
    #[inline]
    fn drain_deferred(&mut self, t: f64) {
        while let Some(ev) = self.deferred.peek() {
            let start = self.driver_free.max(ev.at);
            if start >= t {
                break;
            }
            let payload = ev.payload;
            self.deferred.pop();
            self.decommit_queued(payload, start);
        }
    }

    /// Run the queued decommit `(u, generation)` from `start`, unless it went stale (`u` was
    /// paged in again, or decommitted, since it was queued).
    #[inline]
    fn decommit_queued(&mut self, (u, gen): (u32, u32), start: f64) {
        if self.pending[u as usize] && self.generation[u as usize] == gen {
            self.pending[u as usize] = false;
            self.decommit_now(u, start);
        }
    }

    /// Run queued background decommits now, oldest first, while mapping `bytes` more at `t`
    /// would reach the oversubscription curve ([`CostModel::curve_start_bytes`]): a runtime
    /// unmaps what it no longer needs before it maps past its memory. Without this a driver
    /// that is never idle (a budget below one token's units, prefetches wasted at every group)
    /// would hold every wasted or evicted mapping to the end of the run.
    #[inline]
    fn relieve(&mut self, bytes: u64, t: f64) {
        let limit = self.cost.curve_start_bytes();
        while self.mapped_base + self.mapped_units + bytes as f64 >= limit {
            let Some(ev) = self.deferred.pop() else {
                return;
            };
            self.decommit_queued(ev.payload, t.max(ev.at));
        }
    }

    /// If `u`'s old mapping still awaits a deferred decommit, run it now, so a unit never
    /// holds two mappings (the queued entry goes stale).
    #[inline]
    fn release_pending(&mut self, u: u32, t: f64) {
        if self.pending[u as usize] {
            self.pending[u as usize] = false;
            self.decommit_now(u, t);
        }
    }

    /// Queue a background decommit of `u` at time `t`. A unit has at most one live entry, so
    /// once stale entries (their unit paged in again first) outnumber the units, they are
    /// dropped: a driver that is never idle (prefetches wasted at every group) would otherwise
    /// grow the queue with the run, 24 bytes a wasted prefetch.
    #[inline]
    fn defer(&mut self, u: u32, t: f64) {
        let ui = u as usize;
        self.generation[ui] = self.generation[ui].wrapping_add(1);
        self.pending[ui] = true;
        self.deferred.push(t, (u, self.generation[ui]));
        if self.deferred.len() > 2 * self.pending.len() + STALE_SLACK {
            let (pending, generation) = (&self.pending, &self.generation);
            self.deferred
                .retain(|&(v, gen)| pending[v as usize] && generation[v as usize] == gen);
        }
    }

    /// Decommit `u` on the driver starting no earlier than `t`; returns the end time.
    #[inline]
    fn decommit_now(&mut self, u: u32, t: f64) -> f64 {
        let start = self.driver_free.max(t);
        let bytes = self.units.units[u as usize].committed_bytes as f64;
        let live = self.live_granules();
        let read = self.read_live();
        self.mapped_units -= bytes;
        if self.cost.paging == Paging::Os {
            return start; // the OS reclaims pages inside the fault path: no driver call
        }
        let g = self.granules(u);
        if self.read[u as usize] {
            self.read[u as usize] = false;
            self.read_granules -= g;
            self.read_units -= 1;
        }
        let d = self.cost.decommit_us_at(g, live, read);
        self.outside[1].note(self.cost.decommit_live_domain, live, d);
        self.unmap_calls += g;
        self.released_granules += g;
        self.driver_free = start + d;
        self.busy_driver += d;
        self.busy_decommit += d;
        self.span(Resource::Driver, "unmap+release", start, d);
        self.driver_free
    }

    /// Evict `u`: now on the critical path, or queued for when the driver is idle.
    #[inline]
    fn evict(&mut self, u: u32, t: f64) {
        if self.opts.deferred_unmap && self.cost.paging == Paging::Vmm {
            self.defer(u, t);
        } else {
            self.decommit_now(u, t);
        }
    }

    /// Page in VMM unit `u` (commit, then copy) no earlier than `t`; returns when resident.
    #[inline]
    fn vmm_page_in(&mut self, u: u32, t: f64, name: &'static str) -> Result<f64, EngineError> {
        self.vmm_page_in_after(u, t, name, 0.0)
    }

    /// [`State::vmm_page_in`] of a unit whose bytes are in host memory from `data_at` on (an
    /// SSD read ends then; 0: already there): the copy starts no earlier.
    #[inline]
    fn vmm_page_in_after(
        &mut self,
        u: u32,
        t: f64,
        name: &'static str,
        data_at: f64,
    ) -> Result<f64, EngineError> {
        self.drain_deferred(t);
        self.release_pending(u, t);
        let info = &self.units.units[u as usize];
        let (useful, committed) = (info.useful_bytes, info.committed_bytes);
        self.relieve(committed, t);
        let live = self.live_granules();
        self.mapped_units += committed as f64;
        self.note_mapped();
        let f = self.oversub_factor()?;
        let g = self.granules(u);
        let (c, x) = self.page_in_prices(u, live, f);
        self.outside[0].note(self.cost.commit_live_domain, live, c);
        self.released_granules -= g.min(self.released_granules);
        let d_start = self.driver_free.max(t);
        self.driver_free = d_start + c;
        self.busy_driver += c;
        self.busy_commit += c;
        self.map_calls += g;
        self.span(Resource::Driver, "map", d_start, c);
        let x_start = self.copy_free.max(self.driver_free).max(data_at);
        self.copy_free = x_start + x;
        self.busy_copy += x;
        self.bytes_in += useful;
        self.span(Resource::Copy, name, x_start, x);
        if self.opts.serial_loader {
            self.driver_free = self.copy_free;
        }
        Ok(self.copy_free)
    }

    /// Driver and copy time of paging in VMM unit `u` with `live` granules mapped before it,
    /// at cost factor `f`: commit (fresh granules beyond the released ones priced extra),
    /// then the H2D copy of its useful bytes.
    #[inline]
    fn page_in_prices(&self, u: u32, live: f64, f: f64) -> (f64, f64) {
        let g = self.granules(u);
        let fresh = (g - g.min(self.released_granules)) as f64 * self.cost.commit_fresh_us;
        let c = (self.cost.commit_us_at(g, live, self.read_live()) + fresh) * f;
        let useful = self.units.units[u as usize].useful_bytes;
        (c, self.cost.page_in_copy_us(useful) * f)
    }

    /// The read live set now.
    #[inline]
    fn read_live(&self) -> ReadLive {
        ReadLive {
            granules: self.read_granules as f64,
            units: self.read_units as f64,
        }
    }

    /// After a group's expert compute: its resident units count as read (VMM, when tracked).
    #[inline]
    fn mark_read(&mut self, units: &[u32]) {
        if !self.track_reads {
            return;
        }
        for &u in units {
            let ui = u as usize;
            if self.resident[ui] && !self.read[ui] {
                self.read[ui] = true;
                self.read_granules += self.granules(u);
                self.read_units += 1;
            }
        }
    }

    /// Evict OS-paged `units` no earlier than `t`: their memory leaves the mapped count and
    /// the fault handler spends the per-run eviction cost (pages of one expert are consecutive
    /// units: a new run starts at a gap).
    fn os_evict_batch(&mut self, units: &[u32], t: f64) {
        if units.is_empty() {
            return;
        }
        let (mut bytes, mut runs, mut prev) = (0u64, 0u64, None::<u32>);
        for &u in units {
            bytes += self.units.units[u as usize].committed_bytes;
            if prev.map(|v| v + 1) != Some(u) {
                runs += 1;
            }
            prev = Some(u);
        }
        self.mapped_units -= bytes as f64;
        let d = self.cost.os_evict_us(runs, bytes);
        if d > 0.0 {
            let s = self.fault_free.max(t);
            self.fault_free = s + d;
            self.busy_fault += d;
            self.span(Resource::Faults, "evict to host", s, d);
        }
    }

    /// Fault in (or prefetch) a batch of OS pages of `bytes` committed bytes in `runs`
    /// contiguous runs, no earlier than `t`; returns when resident.
    #[inline]
    fn os_batch(
        &mut self,
        bytes: u64,
        runs: u64,
        t: f64,
        prefetch: bool,
    ) -> Result<f64, EngineError> {
        let f = self.oversub_factor()?;
        self.bytes_in += bytes;
        if prefetch {
            let d = self.cost.prefetch_us(bytes) * f;
            let s = self.copy_free.max(t);
            self.copy_free = s + d;
            self.busy_copy += d;
            self.span(Resource::Copy, "prefetch", s, d);
            Ok(self.copy_free)
        } else {
            let d = self.cost.fault_runs_us(bytes, runs) * f;
            let s = self.fault_free.max(t);
            self.fault_free = s + d;
            self.busy_fault += d;
            self.span(Resource::Faults, "faults", s, d);
            Ok(self.fault_free)
        }
    }
}

/// Stale entries the deferred-decommit queue may hold beyond twice the unit count before they
/// are dropped (a compaction then removes at least this many, so its cost per decommit stays
/// constant; any value gives the same order of decommits).
const STALE_SLACK: usize = 1024;

/// Longest step time the latency histogram records: 2^53 ns (about 104 days), the largest
/// count of nanoseconds an f64 holds exactly and far inside the histogram's u64 range.
const MAX_STEP_NS: f64 = (1u64 << 53) as f64;

/// A step time in µs as whole nanoseconds for the latency histogram. A time that is not finite
/// or above [`MAX_STEP_NS`] is an error: `as u64` would saturate it (to u64::MAX, or 0 for
/// NaN) and the percentiles would stop meaning anything.
fn step_ns(us: f64) -> Result<u64, EngineError> {
    let ns = (us * 1e3).round();
    if !(0.0..=MAX_STEP_NS).contains(&ns) {
        return Err(EngineError::Invalid(format!(
            "a decode step took {us} µs in the model, beyond the {:.0} days the latency \
             histogram records; check the expert size (--expert-mib), the budget and the profile",
            MAX_STEP_NS / 86_400e9
        )));
    }
    Ok(ns as u64)
}

/// Replay `plans` (made for `units`) on the resources, priced by `cost` and `compute`.
/// `ks` is the trace's key space (for the predictors); a learning predictor learns online.
pub fn replay(
    plans: &Plans,
    units: &UnitMap,
    ks: &KeySpace,
    cost: &CostModel,
    compute: &ComputeModel,
    opts: EngineOptions,
) -> Result<Replay, EngineError> {
    replay_learning(plans, units, ks, cost, compute, opts, Learning::Online)
}

/// [`replay`] with the predictor learning from `learning`.
///
/// Each group runs the same phases in order: step bookkeeping, non-expert compute up to the
/// router, evictions of units resident before the group, demand page-ins, prefetches for
/// the group `window` ahead, expert compute, evictions of units the group paged in and out,
/// and the unmapping of prefetches aimed at this group that no group used.
pub fn replay_learning(
    plans: &Plans,
    units: &UnitMap,
    ks: &KeySpace,
    cost: &CostModel,
    compute: &ComputeModel,
    opts: EngineOptions,
    learning: Learning<'_>,
) -> Result<Replay, EngineError> {
    check_window(opts, plans.moe_layers)?;
    let page_cache;
    let cost = if plans.page_cache {
        page_cache = cost.with_page_cache()?;
        &page_cache
    } else {
        cost
    };
    let mut pricer = Pricer::new(plans, units, ks, cost, compute, opts, learning, true)?;
    pricer.price(plans, plans.end_group())?;
    pricer.finish(plans.tokens())
}

/// With a predictor, a prefetch lead of 1 ..= `moe_layers` groups (one step).
fn check_window(opts: EngineOptions, moe_layers: usize) -> Result<(), EngineError> {
    let predicting = opts.predictor != PredictorKind::None;
    if predicting && (opts.window == 0 || opts.window > moe_layers.max(1)) {
        return Err(EngineError::Window {
            window: opts.window,
            moe_layers,
        });
    }
    Ok(())
}

/// A replay priced window by window, for plans recorded a window at a time: the engine's
/// state (resource clocks, residency, queued decommits, the predictor) carries from one
/// [`Pricer::price`] call to the next, and per-step figures are reduced as the steps end
/// (the latency histogram, sums, maximum), so memory does not grow with the steps unless
/// `keep_steps` asks for every step's latency and split. [`replay_learning`] is one window.
pub struct Pricer<'a> {
    st: State<'a>,
    prefetch: Option<Prefetcher<'a>>,
    evictions: Evictions,
    place: cpu_lane::Scratch,
    log: StepLog,
    /// Index in the plan's retained `ssd_reads` of the next group's first SSD read.
    ssd_cursor: usize,
    /// The number of the next group to price.
    next: usize,
    /// Selected keys over the priced groups (the CPU lane's share).
    keys: u64,
    page_ins: u64,
}

impl<'a> Pricer<'a> {
    /// A pricer for the plan whose first window is `plans` (its preloaded units and tiers
    /// are read here; `cost` must already be the page-cache variant when `plans.page_cache`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        plans: &Plans,
        units: &'a UnitMap,
        ks: &'a KeySpace,
        cost: &'a CostModel,
        compute: &'a ComputeModel,
        opts: EngineOptions,
        learning: Learning<'a>,
        keep_steps: bool,
    ) -> Result<Self, EngineError> {
        check_window(opts, plans.moe_layers)?;
        let prefetch = (opts.predictor != PredictorKind::None).then(|| {
            Prefetcher::new(
                Predictor::new(
                    opts.predictor,
                    units,
                    ks,
                    opts.window,
                    learning,
                    opts.min_score,
                ),
                opts.window,
            )
        });
        let mut st = State::new(cost, units, compute, opts);
        st.preload(&plans.preloaded);
        st.tiered = plans.tiered;
        Ok(Pricer {
            st,
            prefetch,
            evictions: Evictions::default(),
            place: cpu_lane::Scratch::new(units.num_units()),
            log: StepLog::new(keep_steps),
            ssd_cursor: 0,
            next: 0,
            keys: 0,
            page_ins: 0,
        })
    }

    /// Keep every step's latency for [`TimingDetail::step_latency`] (set by
    /// [`Pricer::finish`]): 4 bytes a step ([`super::report::CentiLatencies`]), without the
    /// per-step splits `keep_steps` keeps.
    pub fn keep_latencies(&mut self) {
        self.log.latencies = Some(Default::default());
    }

    /// The number of the next group to price.
    pub fn next_group(&self) -> usize {
        self.next
    }

    /// Price the groups from the next one up to group number `upto` (exclusive) of `plans`,
    /// which must hold them and, with a predictor, the `window` groups after them (or end).
    pub fn price(&mut self, plans: &Plans, upto: usize) -> Result<(), EngineError> {
        let st = &mut self.st;
        for gi in self.next..upto {
            let g = plans.group(gi);
            self.keys += plans.keys(&g).len() as u64;
            self.page_ins += plans.page_ins(&g).len() as u64;
            self.log.enter_group(st, &g, plans);
            let router = st.nonexpert_compute(plans.step(g.step as usize).kv_tokens as f64)?;
            let demand = !plans.page_ins(&g).is_empty() || !plans.evicted(&g).is_empty();
            st.drain_for_demand(router, demand)?;
            if let Some(p) = &self.prefetch {
                p.cancel_queued(st, gi);
            }
            st.evict_resident(plans.evicted(&g), router, &mut self.evictions);
            st.mark_ssd(plans, gi, &mut self.ssd_cursor, true);
            let placed = match &st.cost.cpu {
                None => cpu_lane::Placed::gpu(
                    st.demand_page_ins(plans.page_ins(&g), router)?,
                    &g,
                    plans,
                ),
                Some(lane) => st.place_group(lane, plans, &g, router, &mut self.place)?,
            };
            st.mark_ssd(plans, gi, &mut self.ssd_cursor, false);
            let mut ready = placed.ready;
            if let Some(p) = &mut self.prefetch {
                ready = st.await_prefetched(plans.accessed(&g), ready);
                p.issue(st, plans, gi, router)?;
            }
            let gpu_done =
                st.expert_compute(placed.slots, placed.keys, plans.accessed(&g), ready)?;
            let done = st.join_cpu(gpu_done, placed.cpu_done);
            if !self.evictions.late.is_empty() {
                st.drain_for_demand(done + st.cost.host_sync_us, true)?;
            }
            st.evict_late(&mut self.evictions, done);
            if let Some(p) = &self.prefetch {
                p.reclaim_unused(st, gi);
            }
            self.next = gi + 1;
        }
        Ok(())
    }

    /// Note that `plans.retire` dropped `ssd_dropped` SSD reads (all of priced groups).
    pub fn retired(&mut self, ssd_dropped: usize) {
        self.ssd_cursor -= ssd_dropped;
    }

    /// End the replay (every group priced) of a plan producing `tokens` tokens.
    pub fn finish(mut self, tokens: u64) -> Result<Replay, EngineError> {
        self.log.close_step(&self.st);
        self.st.drain_deferred(f64::INFINITY);
        let latencies = self.log.latencies.take();
        let mut r = self.st.finish(self.log, tokens, self.page_ins)?;
        r.keys = self.keys;
        r.detail.step_latency = latencies.map(|l| l.finish());
        Ok(r)
    }
}

/// Steps as they end: each one's latency and its time split by resource, reduced to the
/// latency histogram, sums and maximum (and kept, with `keep`).
struct StepLog {
    keep: bool,
    /// Every step's latency alone, compactly (for [`TimingDetail::step_latency`]), when
    /// [`Pricer::keep_latencies`] asked.
    latencies: Option<super::report::CentiLatencies>,
    step_us: Vec<f64>,
    step_parts: Vec<StepParts>,
    /// Step latencies as whole nanoseconds ([`step_ns`]), for the percentiles.
    hist: hdrhistogram::Histogram<u64>,
    /// The first step time the histogram refused (reported once the replay ends).
    bad: Option<EngineError>,
    steps: u64,
    sum_us: f64,
    max_us: f64,
    /// Steps that process no prompt token: their count and latency sum.
    decode_steps: u64,
    decode_sum_us: f64,
    /// The running sums at the current step's start; each step's parts are the differences.
    at_start: StepParts,
    groups_in_step: u32,
    step_start: f64,
    cur_prefill: bool,
    /// The current step, `u32::MAX` before the first group.
    cur_step: u32,
}

impl StepLog {
    fn new(keep: bool) -> Self {
        // an empty sum, as `Iterator::sum` starts it
        let zero: f64 = std::iter::empty::<f64>().sum();
        StepLog {
            keep,
            latencies: None,
            step_us: Vec::new(),
            step_parts: Vec::new(),
            hist: hdrhistogram::Histogram::<u64>::new(3).expect("3 significant digits is valid"),
            bad: None,
            steps: 0,
            sum_us: zero,
            max_us: 0.0,
            decode_steps: 0,
            decode_sum_us: zero,
            at_start: StepParts::default(),
            groups_in_step: 0,
            step_start: 0.0,
            cur_prefill: false,
            cur_step: u32::MAX,
        }
    }

    /// Enter group `g`: at a new step, close the last one and map the new step's KV cache.
    #[inline]
    fn enter_group(&mut self, st: &mut State, g: &GroupRec, plans: &Plans) {
        if g.step != self.cur_step {
            self.close_step(st);
            self.at_start = st.sums(0);
            self.groups_in_step = 0;
            self.cur_step = g.step;
            self.step_start = st.compute_free;
            let s = plans.step(g.step as usize);
            self.cur_prefill = s.prefill;
            st.mapped_base =
                st.compute.nonexpert_bytes + s.kv_tokens as f64 * st.compute.kv_bytes_per_token;
            st.note_mapped();
        }
        st.step = g.step;
        st.layer = g.moe_layer;
        self.groups_in_step += 1;
    }

    /// Record the current step (if any) as ending now.
    #[inline]
    fn close_step(&mut self, st: &State) {
        if self.cur_step == u32::MAX {
            return;
        }
        let us = st.compute_free - self.step_start;
        self.record(us);
        if let Some(l) = &mut self.latencies {
            l.push(us);
        }
        if !self.keep {
            return;
        }
        self.step_us.push(us);
        let now = st.sums(self.groups_in_step);
        let start = &self.at_start;
        self.step_parts.push(StepParts {
            compute_us: now.compute_us - start.compute_us,
            expert_us: now.expert_us - start.expert_us,
            host_sync_us: now.host_sync_us,
            commit_us: now.commit_us - start.commit_us,
            decommit_us: now.decommit_us - start.decommit_us,
            copy_us: now.copy_us - start.copy_us,
            fault_us: now.fault_us - start.fault_us,
            stall_us: now.stall_us - start.stall_us,
            groups: now.groups,
        });
    }

    /// Add one step's latency to the reductions.
    #[inline]
    fn record(&mut self, us: f64) {
        self.steps += 1;
        self.sum_us += us;
        self.max_us = self.max_us.max(us);
        if !self.cur_prefill {
            self.decode_steps += 1;
            self.decode_sum_us += us;
        }
        if self.bad.is_some() {
            return;
        }
        let recorded = step_ns(us).and_then(|ns| {
            self.hist
                .record(ns)
                .map_err(|e| EngineError::Invalid(format!("step time {us} µs: {e}")))
        });
        self.bad = recorded.err();
    }

    /// The p-quantiles of the step latencies, ms, each at most the largest step.
    fn quantiles<const N: usize>(&mut self, ps: [f64; N]) -> Result<[f64; N], EngineError> {
        if let Some(e) = self.bad.take() {
            return Err(e);
        }
        let max_us = self.max_us;
        Ok(ps.map(|p| (self.hist.value_at_quantile(p) as f64 / 1e6).min(max_us / 1e3)))
    }
}

/// The per-group eviction lists, reused across groups (nothing is allocated per group).
#[derive(Default)]
struct Evictions {
    /// Units the group pages in and evicts itself: evicted once its expert compute ends.
    late: Vec<u32>,
    /// OS-paged units evicted in one batch.
    os: Vec<u32>,
}

/// Counts the contiguous runs in a sequence of unit ids (pages of one expert are consecutive
/// units: a new run starts at a gap).
#[derive(Default)]
struct Runs {
    runs: u64,
    prev: Option<u32>,
}

impl Runs {
    #[inline]
    fn push(&mut self, u: u32) {
        if self.prev.map(|v| v + 1) != Some(u) {
            self.runs += 1;
        }
        self.prev = Some(u);
    }
}

/// The prefetch side of a replay with a predictor: what it issued for each target group.
struct Prefetcher<'p> {
    predictor: Predictor<'p>,
    window: usize,
    /// Prefetches issued for each target group, in a ring of `window + 1` slots.
    targets: Vec<Vec<u32>>,
    /// The predictor's output for one group (reused).
    predicted: Vec<u32>,
}

impl<'p> Prefetcher<'p> {
    fn new(predictor: Predictor<'p>, window: usize) -> Self {
        Prefetcher {
            predictor,
            window,
            targets: vec![Vec::new(); window + 1],
            predicted: Vec::new(),
        }
    }

    /// At group `gi` of `plans`, show the predictor the history up to `gi`, then prefetch
    /// what it names for the group `window` ahead, issued from the router time `router`.
    #[inline]
    fn issue(
        &mut self,
        st: &mut State,
        plans: &Plans,
        gi: usize,
        router: f64,
    ) -> Result<(), EngineError> {
        let history = plans.history(gi);
        self.predictor.observe(&history);
        let gt = gi + self.window;
        let Some(target) = plans.get_group(gt) else {
            return Ok(());
        };
        let target = Target {
            group: gt,
            moe_layer: target.moe_layer as usize,
            page_ins: plans.page_ins(target),
        };
        self.predicted.clear();
        self.predictor
            .predict(&history, target, &mut self.predicted);
        let slots = self.targets.len();
        let slot = &mut self.targets[gt % slots];
        slot.clear();
        st.prefetch(&self.predicted, self.predictor.scores(), slot, router)
    }

    /// At group `gi`'s router (demand-first): its prefetches that have not started are
    /// dropped; a unit it pages in is then paged in on demand.
    #[inline]
    fn cancel_queued(&self, st: &mut State, gi: usize) {
        for &u in &self.targets[gi % self.targets.len()] {
            if st.issue.is_queued(u) {
                st.cancel_prefetch(u);
            }
        }
    }

    /// After group `gi`: prefetches aimed at it that no group used are unmapped again.
    #[inline]
    fn reclaim_unused(&self, st: &mut State, gi: usize) {
        for &u in &self.targets[gi % self.targets.len()] {
            if st.issue.is_queued(u) {
                st.cancel_prefetch(u);
            } else if st.inflight[u as usize] {
                st.inflight[u as usize] = false;
                st.issue
                    .free_slot(st.compute_free.max(st.ready_at[u as usize]));
                st.prefetch_wasted += 1;
                st.prefetch_wasted_bytes += st.units.units[u as usize].useful_bytes;
                let at = st.ready_at[u as usize];
                st.defer(u, at);
            }
        }
    }
}

impl<'a> State<'a> {
    fn new(
        cost: &'a CostModel,
        units: &'a UnitMap,
        compute: &'a ComputeModel,
        opts: EngineOptions,
    ) -> Self {
        let n = units.num_units();
        State {
            cost,
            units,
            compute,
            opts,
            compute_free: 0.0,
            copy_free: 0.0,
            driver_free: 0.0,
            fault_free: 0.0,
            busy_compute: 0.0,
            busy_copy: 0.0,
            busy_driver: 0.0,
            busy_fault: 0.0,
            busy_commit: 0.0,
            busy_decommit: 0.0,
            busy_expert: 0.0,
            stall: 0.0,
            resident: vec![false; n],
            inflight: vec![false; n],
            score_of: vec![1.0; n],
            curve: cut_curve::CutCurve::default(),
            ready_at: vec![0.0; n],
            mapped_units: 0.0,
            released_granules: 0,
            read: vec![false; n],
            read_granules: 0,
            read_units: 0,
            track_reads: cost.paging == Paging::Vmm && cost.prices_reads(),
            mapped_base: compute.nonexpert_bytes,
            peak_mapped: 0.0,
            peak_live: 0.0,
            deferred: EventQueue::default(),
            generation: vec![0; n],
            pending: vec![false; n],
            rng: Pcg64::seed_from_u64(opts.seed),
            map_calls: 0,
            unmap_calls: 0,
            bytes_in: 0,
            oversubscribed: 0,
            outside: [OutsideLive::default(); 2],
            prefetch_issued: 0,
            prefetch_used: 0,
            prefetch_late: 0,
            prefetch_wasted: 0,
            prefetch_wasted_bytes: 0,
            issue: issue::IssueQueue::new(
                n,
                // a buffer bounds queued prefetches only (the legacy path has no queue)
                opts.prefetch_buffer
                    .filter(|_| opts.issue != PrefetchIssue::Legacy && cost.paging == Paging::Vmm),
            ),
            timeline: (opts.timeline_cap > 0).then(|| Timeline::with_cap(opts.timeline_cap)),
            step: 0,
            layer: 0,
            cpu_free: 0.0,
            cpu: CpuCounts::default(),
            cpu_keys: opts.record_cpu_keys.then(Vec::new),
            tiered: false,
            from_ssd: vec![false; n],
            ssd_free: 0.0,
            tiers: TierCounts::default(),
        }
    }

    /// Units resident before the first step: mapped, at no cost.
    fn preload(&mut self, preloaded: &[u32]) {
        for &u in preloaded {
            if !self.resident[u as usize] {
                self.resident[u as usize] = true;
                self.mapped_units += self.units.units[u as usize].committed_bytes as f64;
            }
        }
    }

    /// The running sums a step's parts are differences of; `groups` groups so far.
    #[inline]
    fn sums(&self, groups: u32) -> StepParts {
        StepParts {
            compute_us: self.busy_compute,
            expert_us: self.busy_expert,
            host_sync_us: groups as f64 * self.cost.host_sync_us,
            commit_us: self.busy_commit,
            decommit_us: self.busy_decommit,
            copy_us: self.busy_copy,
            fault_us: self.busy_fault,
            stall_us: self.stall,
            groups,
        }
    }

    /// Non-expert compute of a group over `kv_tokens` tokens of KV cache; returns when the
    /// host knows the router's selection (one round trip after it) and acts from then on.
    #[inline]
    fn nonexpert_compute(&mut self, kv_tokens: f64) -> Result<f64, EngineError> {
        let touch = self.touch_factor()?;
        let ne = (self.compute.nonexpert_us + kv_tokens * self.compute.kv_us_per_token) * touch;
        let ne_start = self.compute_free;
        self.compute_free += ne;
        self.busy_compute += ne;
        self.span(Resource::Compute, "attention+router", ne_start, ne);
        Ok(self.compute_free + self.cost.host_sync_us)
    }

    /// Evict at `router` the units of `evicted` resident before the group, first, freeing
    /// memory; the others (paged in by this group) go to `ev.late`.
    #[inline]
    fn evict_resident(&mut self, evicted: &[u32], router: f64, ev: &mut Evictions) {
        ev.late.clear();
        ev.os.clear();
        for &u in evicted {
            if self.resident[u as usize] {
                self.resident[u as usize] = false;
                match self.cost.paging {
                    Paging::Vmm => self.evict(u, router),
                    Paging::Os => ev.os.push(u),
                }
            } else {
                ev.late.push(u);
            }
        }
        self.os_evict_batch(&ev.os, router);
    }

    /// Map OS-paged unit `u` (its pages are faulted in later, in a batch) no earlier than `t`;
    /// returns its committed bytes.
    #[inline]
    fn map_os_unit(&mut self, u: u32, t: f64) -> u64 {
        self.release_pending(u, t);
        let c = self.units.units[u as usize].committed_bytes;
        self.relieve(c, t);
        self.mapped_units += c as f64;
        c
    }

    /// Demand page-ins of a group from `router` (or consume a prefetch); returns when they
    /// are all resident.
    #[inline]
    fn demand_page_ins(&mut self, page_ins: &[u32], router: f64) -> Result<f64, EngineError> {
        let mut ready = router;
        let mut os_bytes = 0u64;
        let mut os_runs = Runs::default();
        for &u in page_ins {
            let ui = u as usize;
            self.resident[ui] = true;
            if self.issue.is_queued(u) {
                self.cancel_prefetch(u);
            }
            if self.inflight[ui] {
                self.inflight[ui] = false;
                self.issue.free_slot(router.max(self.ready_at[ui]));
                self.curve.catch(self.score_of[ui]);
                self.prefetch_used += 1;
                if self.ready_at[ui] > router {
                    self.prefetch_late += 1;
                }
                ready = ready.max(self.ready_at[ui]);
                continue;
            }
            match self.cost.paging {
                Paging::Vmm if self.tiered => ready = ready.max(self.tiered_page_in(u, router)?),
                Paging::Vmm => ready = ready.max(self.vmm_page_in(u, router, "h2d")?),
                Paging::Os => {
                    os_bytes += self.map_os_unit(u, router);
                    os_runs.push(u);
                }
            }
        }
        if os_bytes > 0 {
            self.note_mapped();
            ready = ready.max(self.os_batch(os_bytes, os_runs.runs, router, false)?);
        }
        Ok(ready)
    }

    /// Units a group accesses that were already resident may still be in flight from a
    /// prefetch an earlier group consumed: the group waits for them too.
    #[inline]
    fn await_prefetched(&self, accessed: &[u32], mut ready: f64) -> f64 {
        for &u in accessed {
            ready = ready.max(self.ready_at[u as usize]);
        }
        ready
    }

    /// Prefetch the `predicted` units not resident or in flight from `router`, recording
    /// them in `slot` (the target group's prefetches).
    #[inline]
    fn prefetch(
        &mut self,
        predicted: &[u32],
        scores: Option<&[f64]>,
        slot: &mut Vec<u32>,
        router: f64,
    ) -> Result<(), EngineError> {
        let mut os_bytes = 0u64;
        for (i, &u) in predicted.iter().enumerate() {
            let ui = u as usize;
            if self.resident[ui] || self.inflight[ui] {
                continue;
            }
            self.inflight[ui] = true;
            self.score_of[ui] = scores.and_then(|s| s.get(i).copied()).unwrap_or(1.0);
            self.curve.issue(self.score_of[ui]);
            slot.push(u);
            self.prefetch_issued += 1;
            match self.cost.paging {
                Paging::Vmm if self.demand_first() => self.enqueue_prefetch(u, router),
                Paging::Vmm => {
                    let t = self.vmm_page_in(u, router, "prefetch")?;
                    self.ready_at[ui] = t;
                }
                Paging::Os => os_bytes += self.map_os_unit(u, router),
            }
        }
        if os_bytes > 0 {
            self.note_mapped();
            let t = self.os_batch(os_bytes, 1, router, true)?;
            for &u in slot.iter() {
                self.ready_at[u as usize] = t;
            }
        }
        Ok(())
    }

    /// Expert compute of a group over `keys` distinct keys and `slots` slots on the GPU once
    /// every unit is resident (at `ready`): the kernel surface over its slots and keys. The `accessed` units count
    /// as read. Returns when it ends.
    #[inline]
    fn expert_compute(
        &mut self,
        slots: u32,
        keys: usize,
        accessed: &[u32],
        ready: f64,
    ) -> Result<f64, EngineError> {
        let start = self.compute_free.max(ready);
        self.stall += start - self.compute_free;
        let ex = if keys > 0 {
            let mut t = self.compute.expert_group_fixed_us + keys as f64 * self.compute.expert_us;
            let repeats = (slots as usize).saturating_sub(keys);
            if repeats > 0 && self.compute.expert_repeat_us > 0.0 {
                t += repeats as f64 * self.compute.expert_repeat_us;
            }
            t * self.touch_factor()?
        } else {
            0.0
        };
        self.compute_free = start + ex;
        self.busy_compute += ex;
        self.busy_expert += ex;
        self.span(Resource::Compute, "experts", start, ex);
        self.mark_read(accessed);
        Ok(start + ex)
    }

    /// Evict the units a group paged in and evicted itself (streamed, or a budget below one
    /// group) once its expert kernels are done at `done` (they read them until then).
    #[inline]
    fn evict_late(&mut self, ev: &mut Evictions, done: f64) {
        ev.os.clear();
        for &u in &ev.late {
            if self.resident[u as usize] {
                self.resident[u as usize] = false;
                match self.cost.paging {
                    // the host learns the kernels are done one round trip later
                    Paging::Vmm => self.evict(u, done + self.cost.host_sync_us),
                    Paging::Os => ev.os.push(u),
                }
            }
        }
        self.os_evict_batch(&ev.os, done);
    }

    /// The finished replay: latency percentiles of `log`'s steps and the run's totals.
    /// The replay's report from its step log, for a plan producing `tokens` tokens with
    /// `page_ins` page-ins.
    fn finish(self, mut log: StepLog, tokens: u64, page_ins: u64) -> Result<Replay, EngineError> {
        let steps = log.steps.max(1) as f64;
        let total_us = self.compute_free;
        let [p50, p90, p99] = log.quantiles([0.50, 0.90, 0.99])?;
        let max_us = log.max_us;
        let timing = TimingReport {
            step_ms_p50: p50,
            step_ms_p90: p90,
            step_ms_p99: p99,
            step_ms_max: max_us / 1e3,
            step_ms_mean: log.sum_us / steps / 1e3,
            tokens_per_s: if total_us > 0.0 {
                tokens as f64 / (total_us / 1e6)
            } else {
                0.0
            },
            compute_ms_per_step: self.busy_compute / steps / 1e3,
            h2d_ms_per_step: self.busy_copy / steps / 1e3,
            vmm_ms_per_step: self.busy_driver / steps / 1e3,
            fault_ms_per_step: self.busy_fault / steps / 1e3,
            stall_ms_per_step: self.stall / steps / 1e3,
            peak_mapped_mib: self.peak_mapped / crate::MIB,
            map_calls: self.map_calls,
            unmap_calls: self.unmap_calls,
            prefetch_issued: self.prefetch_issued,
            prefetch_used: self.prefetch_used,
        };
        let detail = TimingDetail {
            profile: self.cost.profile.clone(),
            steps: log.steps,
            tokens,
            total_ms: total_us / 1e3,
            page_ins,
            prefetch_wasted: self.prefetch_wasted,
            bytes_in: self.bytes_in,
            oversubscribed_page_ins: self.oversubscribed,
            usable_mib: self.cost.usable_bytes / crate::MIB,
            tiers: self.tiered.then(|| reports::tier_timing::TierTiming {
                dram_hits: self.tiers.dram_hits,
                ssd_reads: self.tiers.ssd_reads,
                dram_copy_ms_per_step: self.tiers.dram_copy_us / steps / 1e3,
                ssd_read_ms_per_step: self.tiers.ssd_read_us / steps / 1e3,
                ssd_copy_ms_per_step: self.tiers.ssd_copy_us / steps / 1e3,
            }),
            step_latency: None,
            outside_range: outside_range(&self.outside, self.cost, total_us),
            peak_live_granules: (self.cost.paging == Paging::Vmm && self.peak_live > 0.0)
                .then_some(self.peak_live),
        };
        if self.cost.outside_range == OutsideRange::Refuse && !detail.outside_range.is_empty() {
            let lines: Vec<String> = detail.outside_range.iter().map(|o| o.line()).collect();
            return Err(EngineError::Invalid(format!(
                "--outside-range refuse: the run prices constants outside their measured range ({}); pass --outside-range clamp or extrapolate to price it anyway",
                lines.join("; ")
            )));
        }
        let decode_step_us_mean =
            (log.decode_steps > 0).then(|| log.decode_sum_us / log.decode_steps as f64);
        Ok(Replay {
            timing,
            detail,
            step_us: log.step_us,
            step_parts: log.step_parts,
            keys: 0,
            decode_step_us_mean,
            peak_mapped_bytes: self.peak_mapped,
            timeline: self.timeline,
            prefetch: PrefetchCounts {
                issued: self.prefetch_issued,
                used: self.prefetch_used - self.prefetch_late,
                late: self.prefetch_late,
                wasted: self.prefetch_wasted,
                wasted_bytes: self.prefetch_wasted_bytes,
                cancelled: self.issue.cancelled,
                curve: self.curve,
                blocked_us: self.issue.blocked_us,
            },
            cpu: self.cpu,
            tiers: self.tiers,
            cpu_keys: self.cpu_keys,
        })
    }
}

/// The uses of one live-set slope past its measured live set.
#[derive(Clone, Copy, Debug, Default)]
struct OutsideLive {
    /// Largest live count priced past the range (0: none).
    max_live: f64,
    /// Priced time of the calls past the range, µs.
    us: f64,
}

impl OutsideLive {
    /// Note a call of priced time `us` at `live` granules under a slope of domain `d`.
    #[inline]
    fn note(&mut self, d: Option<LiveDomain>, live: f64, us: f64) {
        if let Some(d) = d {
            if live > d.max_live {
                self.max_live = self.max_live.max(live);
                self.us += us;
            }
        }
    }
}

/// The report entries of the live-set slopes used past their range, commit then decommit.
fn outside_range(
    seen: &[OutsideLive; 2],
    cost: &CostModel,
    total_us: f64,
) -> Vec<reports::run::OutsideRange> {
    [cost.commit_live_domain, cost.decommit_live_domain]
        .iter()
        .zip(seen)
        .filter_map(|(d, o)| {
            let d = (*d)?;
            (o.max_live > 0.0).then(|| reports::run::OutsideRange {
                constant: d.constant.as_str().to_string(),
                regressor: profile::Regressor::LiveGranules.words().to_string(),
                value: o.max_live,
                measured_min: d.min_live,
                measured_max: d.max_live,
                distance: o.max_live / d.max_live,
                share: if total_us > 0.0 { o.us / total_us } else { 0.0 },
                priced: match cost.outside_range {
                    OutsideRange::Clamp => "clamped",
                    _ => "extrapolated",
                }
                .to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod step_ns_tests {
    use super::*;

    #[test]
    fn step_times_become_nanoseconds_or_an_error_never_a_saturated_value() {
        assert_eq!(step_ns(0.0).unwrap(), 0);
        assert_eq!(step_ns(12.3456).unwrap(), 12_346);
        // 2^53 ns exactly is the largest accepted
        assert_eq!(step_ns(MAX_STEP_NS / 1e3).unwrap(), 1u64 << 53);
        for bad in [
            MAX_STEP_NS / 1e3 * 2.0,
            1e300,
            f64::INFINITY,
            f64::NAN,
            -1.0,
        ] {
            let e = step_ns(bad).unwrap_err().to_string();
            assert!(e.contains("--expert-mib"), "{bad}: {e}");
        }
    }
}

#[cfg(test)]
mod deferred_tests {
    use super::*;
    use crate::engine::tests::{compute, test_profile, unit_map, vmm_cost};

    /// `check` on the replay state of four 1 MiB VMM units (one MoE layer) and its cost model.
    fn with_state(check: impl FnOnce(&mut State, &CostModel)) {
        let (p, units, compute) = (
            test_profile(None),
            unit_map(1, 4, 1 << 20, 1 << 20),
            compute(0.0, 0.0),
        );
        let cost = vmm_cost(&p);
        check(
            &mut State::new(&cost, &units, &compute, EngineOptions::default()),
            &cost,
        );
    }

    /// A driver that is never idle drains nothing, and every wasted prefetch of a unit queues
    /// a decommit that makes its earlier one stale: the queue stays within twice the units
    /// plus the slack, and holds the latest decommit of each unit.
    #[test]
    fn stale_deferred_decommits_do_not_grow_the_queue() {
        with_state(|st, _| {
            st.driver_free = f64::INFINITY;
            for i in 0..100_000u32 {
                st.defer(i % 4, i as f64);
                st.drain_deferred(i as f64);
                assert!(st.deferred.len() <= 2 * 4 + STALE_SLACK + 1);
            }
            let mut live = Vec::new();
            while let Some(e) = st.deferred.pop() {
                let (u, gen) = e.payload;
                if st.pending[u as usize] && st.generation[u as usize] == gen {
                    live.push((u, e.at));
                }
            }
            live.sort_by_key(|&(u, _)| u);
            assert_eq!(
                live,
                vec![(0, 99_996.0), (1, 99_997.0), (2, 99_998.0), (3, 99_999.0)]
            );
        });
    }

    /// With the driver never idle, a page-in that would map past the curve's start first
    /// runs the oldest queued decommits, only as many as it needs: with room for 2.5 units
    /// of 1 MiB and units 0 and 1 queued, paging in unit 2 decommits unit 0 alone.
    #[test]
    fn queued_decommits_run_before_a_page_in_past_the_curve() {
        with_state(|st, cost| {
            let mib = (1u64 << 20) as f64;
            st.mapped_base = cost.curve_start_bytes() - 2.5 * mib;
            st.vmm_page_in(0, 0.0, "h2d").unwrap();
            st.vmm_page_in(1, 0.0, "h2d").unwrap();
            st.driver_free = 1e12;
            st.defer(0, 1.0);
            st.defer(1, 2.0);
            let unmaps = st.unmap_calls;
            st.vmm_page_in(2, 3.0, "h2d").unwrap();
            assert_eq!((st.pending[0], st.pending[1]), (false, true));
            assert_eq!(
                st.mapped_units,
                2.0 * mib,
                "units 1 (queued) and 2 stay mapped"
            );
            assert_eq!(st.unmap_calls - unmaps, st.granules(0));
            assert!(st.peak_mapped < cost.curve_start_bytes());
            assert_eq!(st.deferred.len(), 1);
        });
    }
}
