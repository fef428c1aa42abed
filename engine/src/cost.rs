//! The cost model: cost = structure / rate. The structure (granules mapped, bytes copied,
//! bytes faulted) comes from the mechanism's units; every rate and per-call time comes from
//! the hardware profile with its provenance. A rate the profile lacks is an error naming it
//! (never a default), raised when the model is built for a run that needs it.
//!
//! Per VMM unit of `g` granules and `b` useful bytes (times in µs):
//! - commit = `vmm_commit_fixed` (if measured) + g x (`vmm_commit`, or `cu_mem_create` +
//!   `cu_mem_map` + `cu_mem_set_access`); with a handle pool, g x (`cu_mem_map` +
//!   `cu_mem_set_access`) (the pooled handle is reused: no create). `sim calibrate` fits
//!   the per-unit line through the page-in arm's cycles that follow the release of units of
//!   the same size (a mechanism's page-ins follow its own evictions), on relative residuals,
//!   when the measurement set has them; older sets keep their unweighted fit through the
//!   cycles that follow another size's release, which price small units high
//!   (docs/history/calibration.md, "Same-size cycles");
//! - copy = `h2d_latency` (if measured) + b / `h2d_bandwidth`; in page-cache mode
//!   (`--dram-mode page-cache`: the experts are copied out of the `mmap`ed file's page
//!   cache, pageable memory) b / `h2d_pageable_bandwidth` instead, for page-ins and VMM
//!   prefetches (activations keep `h2d_bandwidth`);
//! - decommit = `vmm_decommit_fixed` (if measured) + g x (`vmm_decommit`, or `cu_mem_unmap` +
//!   `cu_mem_release`); with a handle pool, g x `cu_mem_unmap` (the handle goes back to the pool).
//!
//! A commit granule that cannot reuse a granule released earlier in the run (the footprint
//! grows: a cache warming up) costs `vmm_commit_fresh` more, when measured (the engine keeps
//! the count of released granules not yet reused).
//!
//! When the profile holds the live-mapping slopes (`vmm_commit_live_slope`,
//! `vmm_decommit_live_slope`; measured by `sim calibrate`), `slope x live / 1024` is added per
//! granule, `live` being the granules mapped at that moment. The slopes measured with kernels
//! running between the calls (`vmm_commit_busy_live_slope`, `vmm_decommit_busy_live_slope`:
//! the live-set arm, GPU busy) replace them when present, since every decode step the engine
//! prices runs kernels between its VMM calls. On the H200 the slopes are under
//! 1% of the call cost per 1024 live granules (docs/history/calibration.md, "Live mappings,
//! dense faults, router, kernel fit").
//! When it holds the read slopes (`vmm_commit_read_slope`, `vmm_decommit_read_slope`),
//! `slope x read / 1024` is added per granule as well, `read` being the mapped granules that
//! expert kernels have read since they were mapped (an LRU cache's resident units; a
//! streaming replay has almost none): `sim calibrate`'s read-live-set arm measures it. On the
//! H200 that arm found the premium comes from GPU work issued between the calls, growing with
//! the live units, not from the live set having been read (docs/history/calibration.md,
//! "Interference arms"): the read count is the engine's proxy for "an LRU cache's live set while
//! its kernels run between the calls". The unit slopes (`vmm_commit_read_unit_slope`,
//! `vmm_decommit_read_unit_slope`) add `slope x read units / 1024` per granule instead, where the
//! arm's premium follows the count of read units (runs of granules) rather than of granules.
//!
//! Per group of OS-paged units of `c` committed bytes in `r` contiguous runs: fault =
//! r x `fault_run_latency` + c / `fault_dense_bandwidth` when the profile has that fit (dense
//! kernel reads of whole experts), else c / `fault_bandwidth`; or c / `prefetch_bandwidth`
//! when prefetched (only where the profile has prefetch hints). Evicting OS pages (a
//! cuMemPrefetchAsync back to host memory per run, on a side stream) slows the faults it
//! overlaps: it holds the fault handler for r x `os_evict_overlap_run_latency` + c /
//! `os_evict_overlap_bandwidth` when the profile has that fit (faults of a group's experts
//! while the previous group's migrate back, against the same faults alone; either term may be
//! absent), else for r x `os_evict_run_latency` when measured (the migration's own per-run
//! time, docs/history/calibration.md, "Paging at the replay's granularity").
//!
//! Per group, the host waits for the router's result before it can issue page-ins or launch
//! the experts: `router_sync` (when measured) delays everything the host does after the router.
//!
//! Oversubscription: with mapped memory at fill f of `vram_usable`, page-in costs are
//! multiplied by `first_touch_<band>` / `first_touch_below_90` for the bands f < 0.9,
//! 0.9 <= f <= 1.0, f > 1.0 (the measured first-touch curve), times a seeded jitter drawn
//! uniformly within +-half the band constant's measured relative spread, when one is recorded.
//! Touches of resident memory (compute reading weights and KV cache) degrade only past 100% of
//! usable VRAM, by the above-100% factor: below it the memory is resident and reads run at
//! device speed; past it the driver must demote and re-fault pages, priced like a first touch
//! in the oversubscribed band (rtx4060: 618 / 210 µs, docs/reference/measurements.md).

use profile::{ConstantName as C, Profile, ProfileError, Regressor};
use serde::Serialize;

/// What pricing does with a live-set slope used past its measured live set (`--outside-range`;
/// docs/DESIGN.md, "Outside the measured range"). Every such use is reported either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OutsideRange {
    /// Price the slope term at the domain's edge (the default): a term fitted to a small
    /// residual inside its range adds no more than it did at the largest live set measured.
    #[default]
    Clamp,
    /// Extend the fitted line past the range.
    Extrapolate,
    /// Refuse the run (an error naming the constant and the distance).
    Refuse,
}

impl OutsideRange {
    /// Whether this is the default (left out of the echoed settings).
    pub fn is_default(&self) -> bool {
        *self == OutsideRange::Clamp
    }
}

/// A live-set slope with a measured live-set range: the constant that priced it and the
/// smallest and largest live count its fit saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiveDomain {
    pub constant: C,
    pub min_live: f64,
    pub max_live: f64,
}

/// The live-set domain of the slope `name` in `p`, when its value is not 0 (a zero slope
/// prices nothing anywhere) and its domain records live granules.
fn live_domain(p: &Profile, name: C) -> Option<LiveDomain> {
    let c = p.constant(name)?;
    if c.value == 0.0 {
        return None;
    }
    let span = c.domain.as_ref()?.span(Regressor::LiveGranules)?;
    Some(LiveDomain {
        constant: name,
        min_live: span.min,
        max_live: span.max,
    })
}

/// A concave live-set term: `scale_us x (live / 1024)^exponent` µs per granule
/// (`vmm_commit_live_power` / `vmm_decommit_live_power` and their exponents).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LivePower {
    pub scale_us: f64,
    pub exponent: f64,
}

impl LivePower {
    /// The term of `p`'s constants `scale` and `exp`, when both are present.
    fn of(p: &Profile, scale: C, exp: C) -> Option<LivePower> {
        Some(LivePower {
            scale_us: p.get(scale)?,
            exponent: p.get(exp)?,
        })
    }

    /// Time added per granule at `live` granules, µs.
    #[inline]
    pub fn per_granule_us(&self, live: f64) -> f64 {
        self.scale_us * (live.max(0.0) / 1024.0).powf(self.exponent)
    }
}

/// The fill level (mapped / usable VRAM) where the oversubscription curve's first band
/// begins: the lowest band of the profiles' first-touch measurements (`first_touch_below_90`
/// and `first_touch_90_100`, `sim calibrate`'s fill sweep).
pub const CURVE_START_FILL: f64 = 0.9;

/// The mapped memory kernels have read since it was mapped: what the read slopes price.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReadLive {
    /// Granules of the read units.
    pub granules: f64,
    /// Read units (runs of granules committed together).
    pub units: f64,
}

/// How a mechanism's units are committed (VMM granules or OS pages): the parsed mechanism
/// states it ([`policies::Mechanism::paging`]) and the unit map carries it.
pub use policies::Paging;

/// What the run asks of the cost model (which constants become required).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostOptions {
    /// Reuse pooled physical handles (`--handle-pool`).
    pub handle_pool: bool,
    /// A predictor will issue prefetches.
    pub prefetch: bool,
}

/// One band of the fill-level curve: its cost factor relative to below 90% and the relative
/// spread for jitter. `None` = the band's constant is absent from the profile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Band {
    pub factor: f64,
    pub spread: Option<f64>,
}

/// Rates and per-call times resolved from a profile for one run, in µs and bytes per µs.
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    pub profile: String,
    pub paging: Paging,
    pub commit_fixed_us: f64,
    pub commit_per_granule_us: f64,
    pub decommit_fixed_us: f64,
    pub decommit_per_granule_us: f64,
    pub h2d_latency_us: f64,
    /// Copy engine rate, bytes per µs.
    pub h2d_bytes_per_us: f64,
    pub fault_bytes_per_us: f64,
    /// Prefetch rate (bytes per µs): H2D for VMM units, `prefetch_bandwidth` for OS pages.
    pub prefetch_bytes_per_us: f64,
    /// Usable VRAM (bytes); the fill-level curve and the admission cap are relative to it.
    pub usable_bytes: f64,
    /// Bands 90-100% and above 100%; `Err(constant)` when absent (an error if reached).
    pub band_90_100: Result<Band, &'static str>,
    pub band_above_100: Result<Band, &'static str>,
    /// Commit / decommit time added per granule per 1024 granules mapped: the busy slope
    /// (kernels between the calls) when measured, else the idle one, else 0 (the per-call
    /// constants are then used as measured).
    pub commit_live_slope_us: f64,
    pub decommit_live_slope_us: f64,
    /// The concave live-set curves, when the profile has them (`sim calibrate
    /// --live-set-from`): they replace the live slopes above (set to 0 then).
    pub commit_live_power: Option<LivePower>,
    pub decommit_live_power: Option<LivePower>,
    /// The live-set ranges those slopes (or curves) were fitted over; `None` when the profile
    /// records none (or the slope is absent or 0).
    pub commit_live_domain: Option<LiveDomain>,
    pub decommit_live_domain: Option<LiveDomain>,
    /// What pricing does with a live set past those ranges.
    pub outside_range: OutsideRange,
    /// Fixed fault time per contiguous run of OS pages (0 without the dense-fault fit).
    pub fault_run_latency_us: f64,
    /// Extra commit time per fresh granule (one that reuses no released granule), µs
    /// (`vmm_commit_fresh`; 0 when not measured).
    pub commit_fresh_us: f64,
    /// Fault-handler time per contiguous run of OS pages evicted, µs
    /// (`os_evict_run_latency`; 0 when not measured).
    pub os_evict_run_latency_us: f64,
    /// Fault time added per evicted run of OS pages overlapping faults, µs
    /// (`os_evict_overlap_run_latency`); `None` when not measured.
    pub os_evict_overlap_run_us: Option<f64>,
    /// Evicted bytes per µs of fault time added (`os_evict_overlap_bandwidth`); `None` when
    /// not measured.
    pub os_evict_overlap_bytes_per_us: Option<f64>,
    /// Commit / decommit time added per granule per 1024 mapped granules kernels have read
    /// (`vmm_commit_read_slope`, `vmm_decommit_read_slope`; 0 when not measured).
    pub commit_read_slope_us: f64,
    pub decommit_read_slope_us: f64,
    /// Commit / decommit time added per granule per 1024 mapped units kernels have read
    /// (`vmm_commit_read_unit_slope`, `vmm_decommit_read_unit_slope`; 0 when not measured).
    pub commit_read_unit_slope_us: f64,
    pub decommit_read_unit_slope_us: f64,
    /// Host round trip from the router's kernel to the host's next action, µs per group
    /// (`router_sync`; 0 when not measured: the host is then assumed to react at once).
    pub host_sync_us: f64,
    /// `device_read_bandwidth / host_read_bandwidth`: how much slower compute reads memory
    /// demoted to host RAM than VRAM. `None` when either rate is absent; touches past usable
    /// VRAM then follow the fill-level curve's above-100% band instead.
    pub spill_read_ratio: Option<f64>,
    /// The CPU lane's prices (`--cpu-experts` other than `none`); `None`: every expert runs
    /// on the GPU. Set by the run after [`CostModel::new`] (it needs the trace and dtype).
    pub cpu: Option<crate::engine::cpu::CpuLane>,
    /// SSD read rate of the DRAM tier's misses, bytes per µs (`host_ssd_read_bandwidth`,
    /// queue depth 1); `None` when absent (a run that reads from SSD then names it).
    pub ssd_bytes_per_us: Option<f64>,
    /// H2D rate from pageable host memory, bytes per µs (`h2d_pageable_bandwidth`: `sim
    /// calibrate`'s cuMemcpyHtoDAsync of 256 MiB from a `Vec<u8>`, median); `None` when absent.
    pub h2d_pageable_bytes_per_us: Option<f64>,
    /// The copy rate of VMM page-ins and prefetches when it is not `h2d_bytes_per_us`: the
    /// pageable rate in page-cache mode ([`CostModel::with_page_cache`]); `None` otherwise.
    pub page_in_pageable_bytes_per_us: Option<f64>,
}

fn band(p: &Profile, name: C) -> Result<Band, &'static str> {
    let base = p
        .get(C::FirstTouchBelow90)
        .ok_or(C::FirstTouchBelow90.as_str())?;
    let c = p.constant(name).ok_or(name.as_str())?;
    let v = p.get(name).ok_or(name.as_str())?;
    Ok(Band {
        factor: v / base,
        spread: c.relative_spread(),
    })
}

impl CostModel {
    /// Resolve the constants the run needs; errors name the first missing one.
    pub fn new(p: &Profile, paging: Paging, opt: CostOptions) -> Result<CostModel, ProfileError> {
        let opt_or_zero = |n: C| p.get(n).unwrap_or(0.0); // optional additive terms only
        let usable_bytes = p.require(
            C::VramUsable,
            "memory accounting (fill level, admission cap)",
        )?;
        let mut m = CostModel {
            profile: p.name.clone(),
            paging,
            commit_fixed_us: 0.0,
            commit_per_granule_us: 0.0,
            decommit_fixed_us: 0.0,
            decommit_per_granule_us: 0.0,
            h2d_latency_us: opt_or_zero(C::H2dLatency),
            h2d_bytes_per_us: 0.0,
            fault_bytes_per_us: 0.0,
            prefetch_bytes_per_us: 0.0,
            usable_bytes,
            band_90_100: band(p, C::FirstTouch90To100),
            band_above_100: band(p, C::FirstTouchAbove100),
            commit_live_slope_us: 0.0,
            decommit_live_slope_us: 0.0,
            commit_live_power: None,
            decommit_live_power: None,
            commit_live_domain: None,
            decommit_live_domain: None,
            outside_range: OutsideRange::default(),
            fault_run_latency_us: 0.0,
            host_sync_us: opt_or_zero(C::RouterSync),
            commit_fresh_us: 0.0,
            os_evict_run_latency_us: 0.0,
            os_evict_overlap_run_us: None,
            os_evict_overlap_bytes_per_us: None,
            commit_read_slope_us: 0.0,
            decommit_read_slope_us: 0.0,
            commit_read_unit_slope_us: 0.0,
            decommit_read_unit_slope_us: 0.0,
            cpu: None,
            ssd_bytes_per_us: p.get(C::HostSsdReadBandwidth),
            h2d_pageable_bytes_per_us: p.get(C::H2dPageableBandwidth),
            page_in_pageable_bytes_per_us: None,
            spill_read_ratio: p
                .get(C::DeviceReadBandwidth)
                .zip(p.get(C::HostReadBandwidth))
                .map(|(device, host)| device / host),
        };
        match paging {
            Paging::Vmm => m.add_vmm_costs(p, opt)?,
            Paging::Os => m.add_os_costs(p, opt)?,
        }
        Ok(m)
    }

    /// The VMM terms: H2D copies, commits and decommits (per call with `--handle-pool`, else
    /// the fitted per-granule sums), and the live-set and read slopes when measured.
    fn add_vmm_costs(&mut self, p: &Profile, opt: CostOptions) -> Result<(), ProfileError> {
        let opt_or_zero = |n: C| p.get(n).unwrap_or(0.0); // optional additive terms only
        let why = "VMM page-ins (e*, region:*)";
        self.h2d_bytes_per_us = p.require(C::H2dBandwidth, why)?;
        self.prefetch_bytes_per_us = self.h2d_bytes_per_us;
        if opt.handle_pool {
            let why = "--handle-pool (per-call VMM costs)";
            self.commit_per_granule_us =
                p.require(C::CuMemMap, why)? + p.require(C::CuMemSetAccess, why)?;
            self.decommit_per_granule_us = p.require(C::CuMemUnmap, why)?;
        } else {
            self.commit_fixed_us = opt_or_zero(C::VmmCommitFixed);
            self.decommit_fixed_us = opt_or_zero(C::VmmDecommitFixed);
            self.commit_per_granule_us = match p.get(C::VmmCommit) {
                Some(v) => v,
                None => {
                    p.require(C::CuMemCreate, why)?
                        + p.require(C::CuMemMap, why)?
                        + p.require(C::CuMemSetAccess, why)?
                }
            };
            self.decommit_per_granule_us = match p.get(C::VmmDecommit) {
                Some(v) => v,
                None => {
                    p.require(C::CuMemUnmap, "VMM evictions")?
                        + p.require(C::CuMemRelease, "VMM evictions")?
                }
            };
            // the live-mapping slopes, when measured, add to the per-call sums; the
            // fit's intercept (calls on an idle GPU, one granule at a time) is not
            // used: replays on a busy GPU run at or above the per-call sums
            // a decode step always has kernels running between its VMM calls: the busy
            // slopes, when measured, replace the idle GPU's
            let pick = |busy: C, idle: C| if p.get(busy).is_some() { busy } else { idle };
            let commit = pick(C::VmmCommitBusyLiveSlope, C::VmmCommitLiveSlope);
            let decommit = pick(C::VmmDecommitBusyLiveSlope, C::VmmDecommitLiveSlope);
            self.commit_live_slope_us = opt_or_zero(commit);
            self.decommit_live_slope_us = opt_or_zero(decommit);
            self.commit_live_domain = live_domain(p, commit);
            self.decommit_live_domain = live_domain(p, decommit);
            self.add_live_powers(p);
            self.commit_fresh_us = opt_or_zero(C::VmmCommitFresh);
            self.commit_read_slope_us = opt_or_zero(C::VmmCommitReadSlope);
            self.decommit_read_slope_us = opt_or_zero(C::VmmDecommitReadSlope);
            self.commit_read_unit_slope_us = opt_or_zero(C::VmmCommitReadUnitSlope);
            self.decommit_read_unit_slope_us = opt_or_zero(C::VmmDecommitReadUnitSlope);
        }
        Ok(())
    }

    /// The concave live-set curves, when measured: each replaces its call's live slope, and
    /// its domain the slope's.
    fn add_live_powers(&mut self, p: &Profile) {
        self.commit_live_power = LivePower::of(p, C::VmmCommitLivePower, C::VmmCommitLivePowerExp);
        if self.commit_live_power.is_some() {
            self.commit_live_slope_us = 0.0;
            self.commit_live_domain = live_domain(p, C::VmmCommitLivePower);
        }
        self.decommit_live_power =
            LivePower::of(p, C::VmmDecommitLivePower, C::VmmDecommitLivePowerExp);
        if self.decommit_live_power.is_some() {
            self.decommit_live_slope_us = 0.0;
            self.decommit_live_domain = live_domain(p, C::VmmDecommitLivePower);
        }
    }

    /// The OS-paging terms: demand faults (a per-run latency and dense bandwidth when
    /// measured, else one bandwidth), evictions, and prefetch hints with a predictor.
    fn add_os_costs(&mut self, p: &Profile, opt: CostOptions) -> Result<(), ProfileError> {
        self.os_evict_run_latency_us = p.get(C::OsEvictRunLatency).unwrap_or(0.0);
        self.os_evict_overlap_run_us = p.get(C::OsEvictOverlapRunLatency);
        self.os_evict_overlap_bytes_per_us = p.get(C::OsEvictOverlapBandwidth);
        match (p.get(C::FaultRunLatency), p.get(C::FaultDenseBandwidth)) {
            (Some(lat), Some(bw)) => {
                self.fault_run_latency_us = lat;
                self.fault_bytes_per_us = bw;
            }
            _ => self.fault_bytes_per_us = p.require(C::FaultBandwidth, "os* demand faults")?,
        }
        if opt.prefetch {
            let hints = p.os_paging.as_ref().map(|o| o.prefetch_hints);
            if hints == Some(false) {
                return Err(ProfileError::Missing {
                    profile: p.name.clone(),
                    constant: C::PrefetchBandwidth.as_str(),
                    needed_for: format!(
                        "--predictor with os* (this profile has no prefetch hints: {}; use --predictor none)",
                        p.os_paging.as_ref().map(|o| o.note.as_str()).unwrap_or("")
                    ),
                });
            }
            self.prefetch_bytes_per_us = p.require(
                C::PrefetchBandwidth,
                "--predictor with os* (prefetch hints)",
            )?;
        }
        Ok(())
    }

    /// Driver time (µs) to commit a unit of `granules` granules, before oversubscription.
    #[inline]
    pub fn commit_us(&self, granules: u64) -> f64 {
        self.commit_fixed_us + granules as f64 * self.commit_per_granule_us
    }

    /// Driver time (µs) to decommit (unmap, release) a unit of `granules` granules.
    #[inline]
    pub fn decommit_us(&self, granules: u64) -> f64 {
        self.decommit_fixed_us + granules as f64 * self.decommit_per_granule_us
    }

    /// Whether any read slope is set (the engine then tracks the read live set).
    pub fn prices_reads(&self) -> bool {
        [
            self.commit_read_slope_us,
            self.decommit_read_slope_us,
            self.commit_read_unit_slope_us,
            self.decommit_read_unit_slope_us,
        ]
        .iter()
        .any(|&s| s != 0.0)
    }

    /// Driver time (µs) to commit `granules` granules while `live` granules are mapped, `read`
    /// of them read by kernels since they were mapped.
    #[inline]
    pub fn commit_us_at(&self, granules: u64, live: f64, read: ReadLive) -> f64 {
        let live = self.priced_live(self.commit_live_domain, live);
        if let Some(c) = self.commit_live_power {
            return self.commit_us(granules)
                + granules as f64
                    * (c.per_granule_us(live)
                        + (self.commit_read_slope_us * read.granules
                            + self.commit_read_unit_slope_us * read.units)
                            / 1024.0);
        }
        self.commit_us(granules)
            + granules as f64
                * (self.commit_live_slope_us * live
                    + self.commit_read_slope_us * read.granules
                    + self.commit_read_unit_slope_us * read.units)
                / 1024.0
    }

    /// Driver time (µs) to decommit `granules` granules while `live` granules are mapped,
    /// `read` of them read by kernels since they were mapped.
    #[inline]
    pub fn decommit_us_at(&self, granules: u64, live: f64, read: ReadLive) -> f64 {
        let live = self.priced_live(self.decommit_live_domain, live);
        if let Some(c) = self.decommit_live_power {
            return self.decommit_us(granules)
                + granules as f64
                    * (c.per_granule_us(live)
                        + (self.decommit_read_slope_us * read.granules
                            + self.decommit_read_unit_slope_us * read.units)
                            / 1024.0);
        }
        self.decommit_us(granules)
            + granules as f64
                * (self.decommit_live_slope_us * live
                    + self.decommit_read_slope_us * read.granules
                    + self.decommit_read_unit_slope_us * read.units)
                / 1024.0
    }

    /// The live count a slope of domain `d` is priced at: `live`, or the domain's edge when
    /// clamping past it.
    #[inline]
    fn priced_live(&self, d: Option<LiveDomain>, live: f64) -> f64 {
        match d {
            Some(d) if self.outside_range == OutsideRange::Clamp => live.min(d.max_live),
            _ => live,
        }
    }

    /// Copy engine time (µs) for `bytes` host to device.
    #[inline]
    pub fn copy_us(&self, bytes: u64) -> f64 {
        self.h2d_latency_us + bytes as f64 / self.h2d_bytes_per_us
    }

    /// Copy engine time (µs) of a VMM page-in or prefetch of `bytes`: [`CostModel::copy_us`],
    /// or at the pageable rate in page-cache mode.
    #[inline]
    pub fn page_in_copy_us(&self, bytes: u64) -> f64 {
        let rate = self
            .page_in_pageable_bytes_per_us
            .unwrap_or(self.h2d_bytes_per_us);
        self.h2d_latency_us + bytes as f64 / rate
    }

    /// This model in page-cache mode (`--dram-mode page-cache`): page-ins and VMM prefetches
    /// copy from pageable memory at `h2d_pageable_bandwidth`; an error names it when absent.
    pub fn with_page_cache(&self) -> Result<CostModel, ProfileError> {
        let rate = self
            .h2d_pageable_bytes_per_us
            .ok_or_else(|| ProfileError::Missing {
                profile: self.profile.clone(),
                constant: C::H2dPageableBandwidth.as_str(),
                needed_for: "--dram-mode page-cache (copies from the page cache's pageable memory): use a profile whose `sim calibrate` measured it, or --dram-mode pinned".into(),
            })?;
        let mut m = self.clone();
        m.page_in_pageable_bytes_per_us = Some(rate);
        Ok(m)
    }

    /// Fault handler time (µs) to demand-fault `bytes` in one contiguous run.
    #[inline]
    pub fn fault_us(&self, bytes: u64) -> f64 {
        self.fault_runs_us(bytes, 1)
    }

    /// Fault handler time (µs) to demand-fault `bytes` spread over `runs` contiguous runs.
    #[inline]
    pub fn fault_runs_us(&self, bytes: u64, runs: u64) -> f64 {
        runs as f64 * self.fault_run_latency_us + bytes as f64 / self.fault_bytes_per_us
    }

    /// Fault-handler time (µs) of evicting `bytes` of OS pages in `runs` contiguous runs: the
    /// fault time the migration adds to the faults it overlaps when measured (per run and
    /// per byte, each term when present), else the per-run part of the migration itself.
    #[inline]
    pub fn os_evict_us(&self, runs: u64, bytes: u64) -> f64 {
        match (
            self.os_evict_overlap_run_us,
            self.os_evict_overlap_bytes_per_us,
        ) {
            (None, None) => runs as f64 * self.os_evict_run_latency_us,
            (run, bw) => runs as f64 * run.unwrap_or(0.0) + bw.map_or(0.0, |bw| bytes as f64 / bw),
        }
    }

    /// Cost factor of touching resident memory (compute reads) with `mapped_bytes` mapped:
    /// `None` up to 100% of usable VRAM (factor 1), else the above-100% band, or
    /// `Err(constant)` when the profile lacks it.
    #[inline]
    pub fn touch_band_at(&self, mapped_bytes: f64) -> Option<Result<Band, &'static str>> {
        (mapped_bytes > self.usable_bytes).then_some(self.band_above_100)
    }

    /// Cost factor of compute reads past usable VRAM when the profile gives the host read
    /// rate: the driver demotes the excess `s = (mapped - usable) / mapped` of memory to host
    /// RAM, and reads are spread evenly over mapped memory, so a read costs
    /// `(1 - s) + s x device_read_bandwidth / host_read_bandwidth` times a VRAM read.
    /// `None` at or below usable VRAM or when [`CostModel::spill_read_ratio`] is unknown.
    #[inline]
    pub fn spill_factor_at(&self, mapped_bytes: f64) -> Option<f64> {
        let ratio = self.spill_read_ratio?;
        (mapped_bytes > self.usable_bytes).then(|| {
            let s = (mapped_bytes - self.usable_bytes) / mapped_bytes;
            1.0 + s * (ratio - 1.0)
        })
    }

    /// Time (µs) to prefetch `bytes` (copy engine).
    #[inline]
    pub fn prefetch_us(&self, bytes: u64) -> f64 {
        match self.paging {
            Paging::Vmm => self.page_in_copy_us(bytes),
            Paging::Os => bytes as f64 / self.prefetch_bytes_per_us,
        }
    }

    /// Mapped bytes from which page-ins are priced along the oversubscription curve:
    /// [`CURVE_START_FILL`] of usable VRAM.
    pub fn curve_start_bytes(&self) -> f64 {
        CURVE_START_FILL * self.usable_bytes
    }

    /// The fill-level band at `mapped_bytes`: `None` below [`CURVE_START_FILL`] of usable
    /// VRAM (factor 1), else the band, or `Err(constant)` when the profile lacks it.
    #[inline]
    pub fn band_at(&self, mapped_bytes: f64) -> Option<Result<Band, &'static str>> {
        let fill = mapped_bytes / self.usable_bytes;
        if fill < CURVE_START_FILL {
            None
        } else if fill <= 1.0 {
            Some(self.band_90_100)
        } else {
            Some(self.band_above_100)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A constant of the shipped H200 profile read straight from its JSON (value in its
    /// unit, µs or MB/s = B/µs here), independently of the `profile` crate's conversion.
    fn h200_file(name: &str) -> Option<f64> {
        let text = include_str!("../../profile/profiles/h200-linux.json");
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        let c = &v["constants"][name];
        if c.is_null() {
            return None;
        }
        let unit = c["unit"].as_str().unwrap();
        assert!(unit == "us" || unit == "MB/s", "{name}: {unit}");
        c["value"].as_f64()
    }

    #[test]
    fn h200_vmm_costs_follow_the_profile_file() {
        let p = profile::load("h200-linux").unwrap();
        let m = CostModel::new(&p, Paging::Vmm, CostOptions::default()).unwrap();
        let f = |n: &str| h200_file(n).unwrap();
        let opt = |n: &str| h200_file(n).unwrap_or(0.0);
        // per unit of g granules: the measured per-unit fit when the profile has one, else the
        // sum of the per-call medians
        let commit = h200_file("vmm_commit")
            .unwrap_or_else(|| f("cu_mem_create") + f("cu_mem_map") + f("cu_mem_set_access"));
        let decommit =
            h200_file("vmm_decommit").unwrap_or_else(|| f("cu_mem_unmap") + f("cu_mem_release"));
        for g in [1u64, 2, 8, 128] {
            let want = opt("vmm_commit_fixed") + g as f64 * commit;
            assert!((m.commit_us(g) - want).abs() < 1e-9, "{g}");
            let want = opt("vmm_decommit_fixed") + g as f64 * decommit;
            assert!((m.decommit_us(g) - want).abs() < 1e-9, "{g}");
            // with 2048 granules live, the live slopes add twice their value per granule
            let slope = |busy: &str, idle: &str| h200_file(busy).unwrap_or(opt(idle));
            let live =
                2.0 * g as f64 * slope("vmm_commit_busy_live_slope", "vmm_commit_live_slope");
            let none = ReadLive::default();
            assert!((m.commit_us_at(g, 2048.0, none) - m.commit_us(g) - live).abs() < 1e-9);
            // with 1024 granules in 512 units read: the granule slope once, the unit slope
            // half, per granule
            let r = ReadLive {
                granules: 1024.0,
                units: 512.0,
            };
            let read =
                g as f64 * (opt("vmm_commit_read_slope") + 0.5 * opt("vmm_commit_read_unit_slope"));
            let at = m.commit_us_at(g, 2048.0, r);
            assert!((at - m.commit_us(g) - live - read).abs() < 1e-9);
            let dread = g as f64
                * (opt("vmm_decommit_read_slope") + 0.5 * opt("vmm_decommit_read_unit_slope"));
            let dlive =
                2.0 * g as f64 * slope("vmm_decommit_busy_live_slope", "vmm_decommit_live_slope");
            let at = m.decommit_us_at(g, 2048.0, r);
            assert!((at - m.decommit_us(g) - dlive - dread).abs() < 1e-9);
        }
        assert_eq!(m.commit_fresh_us, opt("vmm_commit_fresh"));
        // 16 MiB with the pinned H2D fit: latency + bytes / (MB/s = B/µs)
        let copy = f("h2d_latency") + 16777216.0 / f("h2d_bandwidth");
        assert!((m.copy_us(16 << 20) - copy).abs() < 1e-6);
        let pooled = CostModel::new(
            &p,
            Paging::Vmm,
            CostOptions {
                handle_pool: true,
                prefetch: false,
            },
        )
        .unwrap();
        assert!((pooled.commit_us(1) - (f("cu_mem_map") + f("cu_mem_set_access"))).abs() < 1e-9);
        assert!((pooled.decommit_us(1) - f("cu_mem_unmap")).abs() < 1e-9);
        // the H200 profile has no 90-100% first-touch point
        assert_eq!(m.band_90_100, Err("first_touch_90_100"));
        // os pages: per run + bytes / dense rate, evictions per run
        let o = CostModel::new(&p, Paging::Os, CostOptions::default()).unwrap();
        let want = 8.0 * f("fault_run_latency") + 2433024.0 * 8.0 / f("fault_dense_bandwidth");
        assert!((o.fault_runs_us(8 * 2433024, 8) - want).abs() < 1e-6);
        // evictions: the overlap fit when the profile has it, else the per-run migration time
        let ev = match (
            h200_file("os_evict_overlap_run_latency"),
            h200_file("os_evict_overlap_bandwidth"),
        ) {
            (None, None) => 8.0 * opt("os_evict_run_latency"),
            (run, bw) => 8.0 * run.unwrap_or(0.0) + bw.map_or(0.0, |bw| 8.0 * 2433024.0 / bw),
        };
        assert!((o.os_evict_us(8, 8 * 2433024) - ev).abs() < 1e-9);
    }

    #[test]
    fn live_slopes_clamp_at_their_measured_live_set_unless_told_to_extrapolate() {
        // h200-linux: commit slope 2.0, decommit 1.28 µs per granule per 1024 live granules,
        // both measured over 0..6,144 live granules
        let p = profile::load("h200-linux").unwrap();
        let mut m = CostModel::new(&p, Paging::Vmm, CostOptions::default()).unwrap();
        assert_eq!(m.outside_range, OutsideRange::Clamp);
        let d = m.commit_live_domain.unwrap();
        assert_eq!(
            (d.constant, d.min_live, d.max_live),
            (C::VmmCommitBusyLiveSlope, 0.0, 6144.0)
        );
        let none = ReadLive::default();
        let commit = |m: &CostModel, live| m.commit_us_at(8, live, none) - m.commit_us(8);
        let decommit = |m: &CostModel, live| m.decommit_us_at(8, live, none) - m.decommit_us(8);
        // inside: 8 x 2.0 x 3 = 48 µs in every mode
        assert!((commit(&m, 3072.0) - 48.0).abs() < 1e-9);
        // past it, clamped at 6,144: 8 x 2.0 x 6 = 96 µs, 8 x 1.28 x 6 = 61.44 µs
        assert!((commit(&m, 12288.0) - 96.0).abs() < 1e-9);
        assert!((decommit(&m, 12288.0) - 61.44).abs() < 1e-9);
        m.outside_range = OutsideRange::Extrapolate;
        // extrapolated: 8 x 2.0 x 12 = 192 µs, 8 x 1.28 x 12 = 122.88 µs
        assert!((commit(&m, 12288.0) - 192.0).abs() < 1e-9);
        assert!((decommit(&m, 12288.0) - 122.88).abs() < 1e-9);
        assert!((commit(&m, 3072.0) - 48.0).abs() < 1e-9);
    }

    #[test]
    fn h100_prices_the_live_set_on_its_concave_curve() {
        // h100-linux (sim calibrate --live-set-from live-set/l1.json,l2.json): commit 1.27957 x
        // (L / 1024)^0.59, decommit 1.67325 x (L / 1024)^0.22 µs per granule, measured over
        // 0..36,248 live granules. By hand (python, 8-granule units): at 16,384 live, 8 x
        // 1.2795696277 x 16^0.59 = 52.5514 µs and 8 x 1.6732537075 x 16^0.22 = 24.6353 µs;
        // at 36,248: 83.9565 µs commit; extrapolated to 73,728: 127.6380 µs
        let p = profile::load("h100-linux").unwrap();
        let mut m = CostModel::new(&p, Paging::Vmm, CostOptions::default()).unwrap();
        let none = ReadLive::default();
        let commit = |m: &CostModel, live| m.commit_us_at(8, live, none) - m.commit_us(8);
        let decommit = |m: &CostModel, live| m.decommit_us_at(8, live, none) - m.decommit_us(8);
        assert!((commit(&m, 16384.0) - 52.551_449_5).abs() < 1e-6);
        assert!((decommit(&m, 16384.0) - 24.635_318_4).abs() < 1e-6);
        assert!((commit(&m, 36248.0) - 83.956_538_5).abs() < 1e-6);
        assert_eq!(commit(&m, 0.0), 0.0);
        // the curve replaces the linear busy slope (0.5873 µs per 1024, over 0..6,144)
        assert_eq!(m.commit_live_slope_us, 0.0);
        let d = m.commit_live_domain.unwrap();
        assert_eq!(
            (d.constant, d.min_live, d.max_live),
            (C::VmmCommitLivePower, 0.0, 36248.0)
        );
        // past the domain: clamped at 36,248 by default, the curve continued when extrapolating
        assert!((commit(&m, 73728.0) - 83.956_538_5).abs() < 1e-6);
        m.outside_range = OutsideRange::Extrapolate;
        assert!((commit(&m, 73728.0) - 127.638_027_2).abs() < 1e-6);
        // without the curve's constants the profile prices linearly, as before
        let mut lin = p.clone();
        for n in [C::VmmCommitLivePower, C::VmmCommitLivePowerExp] {
            lin.constants.remove(n.as_str());
        }
        let l = CostModel::new(&lin, Paging::Vmm, CostOptions::default()).unwrap();
        assert_eq!(l.commit_live_power, None);
        // 8 x 0.5873164568 x 4 = 18.7941 µs at 4,096 live
        assert!((commit(&l, 4096.0) - 18.794_126_6).abs() < 1e-6);
        assert_eq!(
            l.commit_live_domain.unwrap().constant,
            C::VmmCommitBusyLiveSlope
        );
        // the decommit curve stays
        assert!((decommit(&l, 16384.0) - 24.635_318_4).abs() < 1e-6);
    }

    #[test]
    fn busy_live_slopes_replace_the_idle_ones_when_measured() {
        let mut p = profile::load("h200-linux").unwrap();
        let set = |p: &mut Profile, n: C, v: f64| {
            p.set(
                n,
                profile::Constant::measured(
                    v,
                    "us",
                    profile::Measurement {
                        gpu: "test".into(),
                        driver: "test".into(),
                        cuda: "test".into(),
                        date: "2026-12-01".into(),
                        method: "set by the test".into(),
                        repetitions: None,
                        spread: None,
                        statistic: None,
                        source: None,
                    },
                ),
            );
        };
        for n in [C::VmmCommitBusyLiveSlope, C::VmmDecommitBusyLiveSlope] {
            p.constants.remove(n.as_str());
        }
        set(&mut p, C::VmmCommitLiveSlope, 0.5);
        set(&mut p, C::VmmDecommitLiveSlope, 0.25);
        let none = ReadLive::default();
        let idle = CostModel::new(&p, Paging::Vmm, CostOptions::default()).unwrap();
        // 8 granules with 3072 live: 8 x 0.5 x 3 = 12 µs more commit, 8 x 0.25 x 3 = 6 decommit
        assert!((idle.commit_us_at(8, 3072.0, none) - idle.commit_us(8) - 12.0).abs() < 1e-9);
        assert!((idle.decommit_us_at(8, 3072.0, none) - idle.decommit_us(8) - 6.0).abs() < 1e-9);
        set(&mut p, C::VmmCommitBusyLiveSlope, 1.75);
        set(&mut p, C::VmmDecommitBusyLiveSlope, 1.0);
        let busy = CostModel::new(&p, Paging::Vmm, CostOptions::default()).unwrap();
        // 8 x 1.75 x 3 = 42 µs, 8 x 1.0 x 3 = 24 µs: the busy slopes, not idle + busy
        assert!((busy.commit_us_at(8, 3072.0, none) - busy.commit_us(8) - 42.0).abs() < 1e-9);
        assert!((busy.decommit_us_at(8, 3072.0, none) - busy.decommit_us(8) - 24.0).abs() < 1e-9);
    }

    #[test]
    fn rtx_reads_past_usable_vram_at_the_host_read_rate() {
        let p = profile::load("rtx4060-laptop-wddm").unwrap();
        let m = CostModel::new(&p, Paging::Vmm, CostOptions::default()).unwrap();
        // docs/reference/measurements.md: device-resident weight read about 178 GB/s, zero-copy read of
        // host-registered memory about 5.9 GB/s
        let ratio = 178.0 / 5.9;
        assert!((m.spill_read_ratio.unwrap() - ratio).abs() < 1e-12);
        let usable = m.usable_bytes;
        assert_eq!(m.spill_factor_at(usable), None);
        assert_eq!(m.spill_factor_at(0.5 * usable), None);
        // 25% over usable: a fifth of mapped memory lives in host RAM
        let f = m.spill_factor_at(1.25 * usable).unwrap();
        assert!((f - (0.8 + 0.2 * ratio)).abs() < 1e-9, "{f}");
        // the H200 profile has no host read rate: the curve's band applies instead
        let h = profile::load("h200-linux").unwrap();
        let hm = CostModel::new(&h, Paging::Vmm, CostOptions::default()).unwrap();
        assert_eq!(hm.spill_factor_at(2.0 * hm.usable_bytes), None);
    }

    #[test]
    fn rtx_refuses_handle_pool_and_os_prefetch_naming_the_constant() {
        let p = profile::load("rtx4060-laptop-wddm").unwrap();
        let e = CostModel::new(
            &p,
            Paging::Vmm,
            CostOptions {
                handle_pool: true,
                prefetch: false,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("cu_mem_map") && e.contains("rtx4060-laptop-wddm"),
            "{e}"
        );
        let e = CostModel::new(
            &p,
            Paging::Os,
            CostOptions {
                handle_pool: false,
                prefetch: true,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("prefetch_bandwidth") && e.contains("WDDM"),
            "{e}"
        );
        let m = CostModel::new(&p, Paging::Vmm, CostOptions::default()).unwrap();
        // 407 / 210 and 618 / 210
        assert!((m.band_90_100.unwrap().factor - 407.0 / 210.0).abs() < 1e-12);
        assert!((m.band_above_100.unwrap().factor - 618.0 / 210.0).abs() < 1e-12);
    }
}
