//! GPU calibration: measures the cost constants of the simulator on the local GPU.
//!
//! Every arm runs one discarded warm-up, then `reps` repetitions; where several arms share a
//! phase they are interleaved repetition by repetition, so slow drifts (clocks, temperature)
//! hit all arms alike. Each arm reports the median and the spread of its repetitions.
//! The expert-kernel arms live in `kernel_arms` ([`calibrate_kernels`] runs them alone).

use crate::device::DeviceInfo;
pub use crate::stats::Line;
use crate::stats::{LinearFit, Summary};
use crate::vmm;
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream, DevicePtr};
use kernels::Kernels;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

mod interference_arms;
mod kernel_arms;
mod live_set_arms;
mod paging_arms;
use interference_arms::{measure_fault_evict_overlap, measure_read_page_in};
pub use interference_arms::{
    FaultEvictPoint, ReadMode, ReadPageInPoint, EVICT_OVERLAP_K, READ_CYCLES, READ_CYCLE_UNITS,
    READ_GRANULES, READ_LIVE_GRANULES, READ_MODES,
};
pub use kernel_arms::{calibrate_kernels, KernelCalibration, KernelPoint, ReadLaunch, ShapedRead};
use kernel_arms::{measure_kernels, measure_shaped_reads, measure_stream_read};
use live_set_arms::measure_live_set;
pub use live_set_arms::{
    block_order, calibrate_live_set, fit_levels, GpuWork, LiveSetArm, LiveSetCalibration,
    LiveSetLevel, LiveSetPoint, LiveSetProbe, GPU_WORK, LIVE_SET_BLOCKS, LIVE_SET_HEADROOM,
    LIVE_SET_LEVELS, LIVE_SET_PROBE_LAUNCHES, LIVE_SET_READ_GRANULES, LIVE_SET_SAMPLES,
    LIVE_SET_UNIT_GRANULES, LIVE_SET_WIDE_LEVELS,
};
use paging_arms::{measure_fault_launches, measure_page_in};
pub use paging_arms::{
    FaultLaunchPoint, PageInPoint, FAULT_GEOMETRIES, FAULT_KS, FRESH_GRANULES, FRESH_UNITS,
    PAGE_IN_GRANULES, PAGE_IN_UNITS,
};

/// How much to measure.
#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    /// A fast pass (fewer repetitions, sizes and fill levels): about ten seconds on an H200.
    pub quick: bool,
    /// CUDA device ordinal.
    pub device: usize,
    /// Seed of the expert choices of the kernel arms.
    pub seed: u64,
}

/// VMM call latencies at one fill level, µs per 2 MiB granule (one call per granule).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VmmAtFill {
    /// Fraction of total VRAM allocated (by others and by the filler) while measuring.
    pub fill_fraction: f64,
    /// Granules created, mapped, touched, unmapped and released per repetition.
    pub granules: u32,
    /// cuMemCreate per granule, µs.
    pub create_us: Summary,
    /// cuMemMap per granule, µs.
    pub map_us: Summary,
    /// cuMemSetAccess per granule, µs.
    pub set_access_us: Summary,
    /// cuMemsetD8 over all granules + synchronize, divided by the granule count.
    pub first_touch_us: Summary,
    /// cuMemUnmap per granule, µs.
    pub unmap_us: Summary,
    /// cuMemRelease per granule, µs.
    pub release_us: Summary,
}

/// Commit and decommit per granule, one granule at a time as a page-in does it, while `live`
/// other granules (each its own cuMemCreate handle, mapped and accessible) are mapped.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VmmAtLive {
    /// Granules already mapped (and accessible) while measuring.
    pub live_granules: u64,
    /// Granules committed and decommitted per repetition.
    pub granules: u32,
    /// cuMemCreate + cuMemMap + cuMemSetAccess per granule, µs.
    pub commit_us: Summary,
    /// cuMemUnmap + cuMemRelease per granule, µs.
    pub decommit_us: Summary,
    /// Commit per granule while the live set grew to this level (granules created, mapped and
    /// given access one at a time, none released in between: the footprint grows as in a
    /// cache that warms up), µs, one sample over `grown` granules; `None` at level 0.
    #[serde(default)]
    pub grow_commit_us: Option<f64>,
    /// Granules committed to grow the live set to this level.
    #[serde(default)]
    pub grown: u64,
}

/// Dense reads (one load per 16 B) of contiguous runs of host-resident managed memory: demand
/// faults as an expert kernel that reads whole experts causes them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DenseFaultPoint {
    /// Bytes of one run.
    pub run_bytes: u64,
    /// Runs per repetition (one launch each, back to back, runs one run apart).
    pub runs: u32,
    /// Kernel time per run, µs.
    pub per_run_us: Summary,
}

/// One copy size: median time in µs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CopyPoint {
    /// Bytes of one copy.
    pub bytes: u64,
    /// Time of one copy, µs (CUDA events).
    pub time_us: Summary,
}

/// H2D copies of one host-memory kind over sizes, and the fit of `latency + bytes / bandwidth`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CopyCurve {
    /// One point per copy size, sizes ascending.
    pub points: Vec<CopyPoint>,
    /// Fit over the medians of all sizes.
    pub fit: Option<LinearFit>,
}

/// Managed memory touched from the GPU with one read per `stride` bytes (demand faults).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultPoint {
    /// Bytes between two reads of the touch kernel (the page size it faults on).
    pub stride: u64,
    /// Bytes of the managed buffer touched.
    pub bytes: u64,
    /// Bytes of the buffer per µs of the touch kernel (= MB/s).
    pub bytes_per_us: Summary,
    /// Kernel time per touched page, µs.
    pub per_page_us: Summary,
}

/// Managed-memory results; `None` fields were unsupported on this platform.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ManagedResult {
    /// Demand-fault touches, one point per stride.
    pub faults: Vec<FaultPoint>,
    /// cuMemPrefetchAsync of host-resident managed memory to the device, bytes per µs.
    pub prefetch_bytes_per_us: Option<Summary>,
    /// Why prefetch is missing, when it is.
    pub prefetch_unsupported: Option<String>,
}

/// Everything the calibration measured, before conversion into a profile.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Calibration {
    /// The GPU and driver measured.
    pub device: DeviceInfo,
    /// A quick pass (fewer repetitions, sizes and fill levels).
    pub quick: bool,
    /// Repetitions per arm (after the discarded warm-up).
    pub reps: u32,
    /// cuMemGetAllocationGranularity (minimum, recommended), bytes.
    pub granularity_min: u64,
    /// cuMemGetAllocationGranularity recommended, bytes.
    pub granularity_recommended: u64,
    /// VMM call latencies, one entry per VRAM fill level.
    pub vmm: Vec<VmmAtFill>,
    /// H2D copies from pinned host memory.
    pub h2d_pinned: CopyCurve,
    /// H2D copies from pageable host memory.
    pub h2d_pageable: CopyCurve,
    /// Managed-memory demand faults and prefetch.
    pub managed: ManagedResult,
    /// Back-to-back launches of an empty kernel, µs each.
    pub launch_us: Summary,
    /// Bytes of a plain streaming read of device memory, the expert kernels' bandwidth
    /// reference.
    pub stream_read_bytes: u64,
    /// Bandwidth of that read, bytes per µs (= MB/s).
    pub stream_read_bytes_per_us: Summary,
    /// Expert-kernel arms.
    pub kernels: Vec<KernelPoint>,
    /// VMM commit/decommit against the number of granules already mapped.
    #[serde(default)]
    pub vmm_live: Vec<VmmAtLive>,
    /// Dense demand faults per run length (empty where managed memory cannot fault).
    #[serde(default)]
    pub dense_faults: Vec<DenseFaultPoint>,
    /// Launch an empty kernel, record an event and wait for it on the host: µs per iteration
    /// (the per-layer host round trip to learn the router's selection).
    #[serde(default)]
    pub router_sync_us: Option<Summary>,
    /// A page-in's and an eviction's host sequence per unit size (the replay's granularity).
    #[serde(default)]
    pub page_in: Vec<PageInPoint>,
    /// Demand faults of k experts read by one expert-kernel launch (empty where managed
    /// memory cannot fault).
    #[serde(default)]
    pub fault_launches: Vec<FaultLaunchPoint>,
    /// Page-ins and evictions with the live set read by kernels between cycles, or not
    /// (empty when the arm did not run or failed).
    #[serde(default)]
    pub read_page_in: Vec<ReadPageInPoint>,
    /// Faults of k experts in one launch, alone and while k others migrate back to the host
    /// (empty where managed memory cannot fault, or when the arm failed).
    #[serde(default)]
    pub fault_evict: Vec<FaultEvictPoint>,
    /// Per-unit commit and decommit against the live set, GPU idle and with kernels between
    /// the calls, in randomised blocks with a host probe each (empty when the arm did not run
    /// or failed).
    #[serde(default, skip_serializing_if = "LiveSetArm::is_empty")]
    pub live_set: LiveSetArm,
    /// The default expert kernel against a plain read of the same bytes in its own launch
    /// shape, alone and layers back to back (empty in sets recorded before that arm, or when
    /// it failed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shaped_reads: Vec<ShapedRead>,
    /// Wall time of the whole calibration, s (pooled sets: the median of theirs).
    pub wall_s: f64,
    /// How many calibrations this set pools ([`crate::pool::pool`]); absent for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooled_from: Option<u32>,
    /// Where the expert-kernel arms, the streaming read and the same-shape reads came from when
    /// they replace the ones this calibration measured ([`crate::kernel_splice`]); absent
    /// when they are this calibration's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_arms_from: Option<KernelArmsSource>,
}

/// The `sim calibrate --only kernels` sets whose arms a [`Calibration`] carries in place of
/// its own ([`crate::kernel_splice::with_kernel_arms`]): after the default kernel changed,
/// its constants can be re-measured without re-measuring (and re-choosing) every VMM arm.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelArmsSource {
    /// Date of the kernel sets (ISO 8601, UTC; the latest of a pool).
    pub date: String,
    /// How many kernel sets were pooled into the arms (1 for one).
    pub sets: u32,
}

/// A calibration failure, naming the step.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Kernel(#[from] kernels::KernelError),
    #[error("CUDA call failed during {step}: {source}")]
    Driver {
        step: &'static str,
        source: cudarc::driver::DriverError,
    },
    #[error("{0}")]
    Other(String),
}

pub(crate) trait Step<T> {
    fn during(self, step: &'static str) -> Result<T, CalibrateError>;
}
impl<T> Step<T> for Result<T, cudarc::driver::DriverError> {
    fn during(self, step: &'static str) -> Result<T, CalibrateError> {
        self.map_err(|source| CalibrateError::Driver { step, source })
    }
}

pub(crate) const MIB: u64 = 1 << 20;
pub(crate) const GIB: u64 = 1 << 30;

/// Back-to-back empty-kernel launches per repetition of the launch-latency arm (a design
/// choice, not tuned).
pub const LAUNCHES_PER_REP: u32 = 1000;
/// Launch + event + host wait iterations per repetition of the router-sync arm (a design
/// choice, not tuned).
pub const ROUTER_SYNCS_PER_REP: u32 = 200;
/// Seed of the live-mapping arm's granule placement (a design choice).
pub const LIVE_SEED: u64 = 11;

/// Times `f` on `stream` with CUDA events; returns µs.
pub(crate) fn time_events(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    f: &mut dyn FnMut() -> Result<(), CalibrateError>,
) -> Result<f64, CalibrateError> {
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let a: CudaEvent = ctx.new_event(flags).during("event create")?;
    let b: CudaEvent = ctx.new_event(flags).during("event create")?;
    a.record(stream).during("event record")?;
    f()?;
    b.record(stream).during("event record")?;
    b.synchronize().during("event synchronize")?;
    Ok(a.elapsed_ms(&b).during("event elapsed")? as f64 * 1e3)
}

pub(crate) fn summary(v: &[f64]) -> Result<Summary, CalibrateError> {
    Summary::of(v).ok_or_else(|| CalibrateError::Other("no finite samples".into()))
}

/// Runs the calibration on `opts.device`. Fails at once, with a message naming the missing
/// library, when no CUDA driver or NVRTC can be loaded. `log` receives one line per phase.
pub fn calibrate(
    opts: &CalibrateOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Calibration, CalibrateError> {
    let t0 = Instant::now();
    let ctx = kernels::open_device(opts.device)?;
    let stream = ctx.default_stream();
    let device = DeviceInfo::read(&ctx).during("device query")?;
    log(&format!(
        "device: {} (driver {}, CUDA {}), {} MiB free of {} MiB",
        device.gpu,
        device.driver,
        device.cuda,
        device.vram_free / MIB,
        device.vram_total / MIB
    ));
    let mut k = Kernels::load(&ctx)?;
    if let Some(e) = k.dot_error() {
        log(&format!(
            "per-slot dot kernels unavailable, using the f32 kernel: {e}"
        ));
    }
    let reps: u32 = if opts.quick { 3 } else { 7 };
    let dev = opts.device as i32;
    let (gmin, grec) = vmm::granularity(dev).during("cuMemGetAllocationGranularity")?;
    log(&format!(
        "granularity: minimum {gmin} B, recommended {grec} B"
    ));

    let vmm = measure_vmm(&ctx, &stream, &device, gmin, reps, opts.quick, log)?;
    let (h2d_pinned, h2d_pageable) = measure_h2d(&ctx, &stream, reps, opts.quick, log)?;
    let managed = measure_managed(&ctx, &stream, &k, &device, reps, opts.quick, log)?;
    let vmm_live = measure_vmm_live(&ctx, &device, gmin, reps, opts.quick, log)?;
    let dense_faults = if device.concurrent_managed_access {
        measure_dense_faults(&ctx, &stream, &k, reps, opts.quick, log)?
    } else {
        Vec::new()
    };
    let router_sync_us = Some(measure_router_sync(&ctx, &stream, &k, reps, log)?);
    let page_in = measure_page_in(&ctx, gmin, reps, opts.quick, log)?;
    let fault_launches = if device.concurrent_managed_access {
        measure_fault_launches(&ctx, &stream, &k, reps, opts.quick, log)?
    } else {
        Vec::new()
    };

    let launch_us = measure_launch(&ctx, &stream, &k, reps, log)?;

    let (sr_bytes, stream_read_bytes_per_us) =
        measure_stream_read(&ctx, &stream, &k, &device, reps, opts.quick, log)?;
    let kernels = measure_kernels(&ctx, &stream, &mut k, reps, opts, false, log)?;

    let (read_page_in, fault_evict) =
        measure_interference(&ctx, &k, &device, gmin, reps, opts.quick, log);
    let live_set = match measure_live_set(&ctx, &k, gmin, device.vram_free, opts.quick, log) {
        Ok(a) => a,
        Err(e) => {
            log(&format!(
                "live-set arm failed, its constants stay absent: {e}"
            ));
            LiveSetArm::default()
        }
    };
    // Last: a failure of this arm spoils no other figure.
    let shaped_reads = measure_shaped_reads(&ctx, &stream, &k, reps, opts.seed, log);

    Ok(Calibration {
        device,
        quick: opts.quick,
        reps,
        granularity_min: gmin as u64,
        granularity_recommended: grec as u64,
        vmm,
        h2d_pinned,
        h2d_pageable,
        managed,
        launch_us,
        stream_read_bytes: sr_bytes,
        stream_read_bytes_per_us,
        kernels,
        vmm_live,
        dense_faults,
        router_sync_us,
        page_in,
        fault_launches,
        read_page_in,
        fault_evict,
        live_set,
        shaped_reads,
        wall_s: t0.elapsed().as_secs_f64(),
        pooled_from: None,
        kernel_arms_from: None,
    })
}

/// Host launch latency of an empty kernel: [`LAUNCHES_PER_REP`] back-to-back launches between
/// CUDA events, per launch.
fn measure_launch(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    reps: u32,
    log: &mut dyn FnMut(&str),
) -> Result<Summary, CalibrateError> {
    let mut launches = Vec::new();
    let n_launch = LAUNCHES_PER_REP;
    for r in 0..=reps {
        let t = time_events(ctx, stream, &mut || {
            for _ in 0..n_launch {
                k.launch_empty(stream)?;
            }
            Ok(())
        })?;
        if r > 0 {
            launches.push(t / n_launch as f64);
        }
    }
    let launch_us = summary(&launches)?;
    log(&format!("launch: {:.2} µs", launch_us.median));
    Ok(launch_us)
}

/// The interference arms (the read-live-set arm, and the fault-eviction overlap where managed
/// memory is concurrent). They run last and may fail without aborting the calibration: their
/// constants are then left out of the profile.
fn measure_interference(
    ctx: &Arc<CudaContext>,
    k: &Kernels,
    device: &DeviceInfo,
    gmin: usize,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> (Vec<ReadPageInPoint>, Vec<FaultEvictPoint>) {
    let read_page_in = match measure_read_page_in(ctx, k, gmin, device.vram_free, reps, quick, log)
    {
        Ok(v) => v,
        Err(e) => {
            log(&format!(
                "read-live-set arm failed, its constants stay absent: {e}"
            ));
            Vec::new()
        }
    };
    let fault_evict = if device.concurrent_managed_access {
        match measure_fault_evict_overlap(ctx, k, reps, log) {
            Ok(v) => v,
            Err(e) => {
                log(&format!(
                    "fault-eviction overlap arm failed, its constants stay absent: {e}"
                ));
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    (read_page_in, fault_evict)
}

/// VMM call latencies at several fill levels. The filler is plain cuMemAlloc memory in 1 GiB
/// pieces up to a fraction of the memory free at start, keeping 4 GiB (or 1/8 of free, if less)
/// back so the measurement itself and the driver never run out.
fn measure_vmm(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    device: &DeviceInfo,
    granule: usize,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<VmmAtFill>, CalibrateError> {
    let dev = ctx.ordinal() as i32;
    let n: usize = if quick { 64 } else { 256 };
    let fills: &[f64] = if quick {
        &[0.0, 0.5]
    } else {
        &[0.0, 0.3, 0.6, 0.9]
    };
    let reserve_back = (4 * GIB).min(device.vram_free / 8) + (n * granule) as u64;
    let va = vmm::Reservation::new(n * granule, granule).during("cuMemAddressReserve")?;
    let mut out = Vec::new();
    for &fill in fills {
        let (free_now, _) = ctx.mem_get_info().during("cuMemGetInfo")?;
        let target = ((device.vram_free as f64 * fill) as u64)
            .min((free_now as u64).saturating_sub(reserve_back));
        let mut filler = Vec::new();
        let mut have = 0u64;
        while have + GIB <= target {
            let mut p = 0;
            // SAFETY: out-pointer valid; freed below.
            unsafe { sys::cuMemAlloc_v2(&mut p, GIB as usize) }
                .result()
                .during("filler cuMemAlloc")?;
            filler.push(p);
            have += GIB;
        }
        let (free_fill, total) = ctx.mem_get_info().during("cuMemGetInfo")?;
        let fill_fraction = 1.0 - free_fill as f64 / total as f64;
        let mut arms: [Vec<f64>; 6] = Default::default();
        for r in 0..=reps {
            let mut handles = Vec::with_capacity(n);
            let mut per = [0f64; 6];
            let t = Instant::now();
            for _ in 0..n {
                handles.push(vmm::create(granule, dev).during("cuMemCreate")?);
            }
            per[0] = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            for (i, &h) in handles.iter().enumerate() {
                vmm::map(va.base + (i * granule) as u64, granule, h).during("cuMemMap")?;
            }
            per[1] = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            for i in 0..n {
                vmm::set_access(va.base + (i * granule) as u64, granule, dev)
                    .during("cuMemSetAccess")?;
            }
            per[2] = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            // SAFETY: the whole range is mapped and accessible.
            unsafe { sys::cuMemsetD8Async(va.base, 1, n * granule, stream.cu_stream()) }
                .result()
                .during("first touch")?;
            stream.synchronize().during("first touch")?;
            per[3] = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            for i in 0..n {
                vmm::unmap(va.base + (i * granule) as u64, granule).during("cuMemUnmap")?;
            }
            per[4] = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            for h in handles {
                vmm::release(h).during("cuMemRelease")?;
            }
            per[5] = t.elapsed().as_secs_f64() * 1e6;
            if r > 0 {
                for (a, v) in arms.iter_mut().zip(per) {
                    a.push(v / n as f64);
                }
            }
        }
        for p in filler {
            // SAFETY: allocated above, freed once.
            unsafe { sys::cuMemFree_v2(p) }
                .result()
                .during("filler cuMemFree")?;
        }
        let point = VmmAtFill {
            fill_fraction,
            granules: n as u32,
            create_us: summary(&arms[0])?,
            map_us: summary(&arms[1])?,
            set_access_us: summary(&arms[2])?,
            first_touch_us: summary(&arms[3])?,
            unmap_us: summary(&arms[4])?,
            release_us: summary(&arms[5])?,
        };
        log(&format!(
            "vmm at {:.0}% fill: create {:.1} map {:.1} set_access {:.1} touch {:.2} unmap {:.1} release {:.1} µs/granule",
            fill_fraction * 100.0,
            point.create_us.median,
            point.map_us.median,
            point.set_access_us.median,
            point.first_touch_us.median,
            point.unmap_us.median,
            point.release_us.median
        ));
        out.push(point);
    }
    Ok(out)
}

/// VMM commit and decommit per granule while many granules stay mapped: the replay of a 50%
/// budget holds thousands of single-granule mappings, the fill arms above at most 256. Live
/// sets grow level by level (0, 1024, 3072, 6144 granules; quick: 0, 2048), capped at a
/// quarter of free memory; at each level `reps` cycles of 64 granules, each granule created,
/// mapped and given access in turn (as a page-in), then each unmapped and released. As in the
/// replay's bank, the granules lie scattered: live and cycled granules take the slots of one
/// range of 2 x top + 64 granules in a seeded random order (live ones first), so cycled
/// granules land between live ones.
fn measure_vmm_live(
    ctx: &Arc<CudaContext>,
    device: &DeviceInfo,
    granule: usize,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<VmmAtLive>, CalibrateError> {
    let dev = ctx.ordinal() as i32;
    let cycle: usize = 64;
    let levels: &[u64] = if quick {
        &[0, 2048]
    } else {
        &[0, 1024, 3072, 6144]
    };
    let max_live = (device.vram_free / 4) / granule as u64;
    let top = levels
        .iter()
        .copied()
        .filter(|&l| l <= max_live)
        .max()
        .unwrap_or(0);
    let slots = 2 * top as usize + cycle;
    let range = vmm::Reservation::new(slots * granule, granule).during("cuMemAddressReserve")?;
    let mut order: Vec<u64> = (0..slots as u64).collect();
    order.shuffle(&mut Pcg64::seed_from_u64(LIVE_SEED));
    let slot_at = |i: usize| range.base + order[i] * granule as u64;
    let mut live: Vec<(u64, sys::CUmemGenericAllocationHandle)> = Vec::new();
    let mut out = Vec::new();
    let result = (|| -> Result<(), CalibrateError> {
        for &level in levels.iter().filter(|&&l| l <= top) {
            let (t, before) = (Instant::now(), live.len() as u64);
            while (live.len() as u64) < level {
                let at = slot_at(live.len());
                let h = vmm::create(granule, dev).during("live cuMemCreate")?;
                vmm::map(at, granule, h).during("live cuMemMap")?;
                live.push((at, h));
                vmm::set_access(at, granule, dev).during("live cuMemSetAccess")?;
            }
            let grown = live.len() as u64 - before;
            let grow_commit_us =
                (grown > 0).then(|| t.elapsed().as_secs_f64() * 1e6 / grown as f64);
            let (mut commit, mut decommit) = (Vec::new(), Vec::new());
            for r in 0..=reps {
                let mut hs = Vec::with_capacity(cycle);
                let t = Instant::now();
                for i in 0..cycle {
                    let at = slot_at(slots - cycle + i);
                    let h = vmm::create(granule, dev).during("cuMemCreate")?;
                    vmm::map(at, granule, h).during("cuMemMap")?;
                    vmm::set_access(at, granule, dev).during("cuMemSetAccess")?;
                    hs.push(h);
                }
                let c = t.elapsed().as_secs_f64() * 1e6 / cycle as f64;
                let t = Instant::now();
                for (i, h) in hs.into_iter().enumerate() {
                    vmm::unmap(slot_at(slots - cycle + i), granule).during("cuMemUnmap")?;
                    vmm::release(h).during("cuMemRelease")?;
                }
                let d = t.elapsed().as_secs_f64() * 1e6 / cycle as f64;
                if r > 0 {
                    commit.push(c);
                    decommit.push(d);
                }
            }
            let p = VmmAtLive {
                live_granules: level,
                granules: cycle as u32,
                commit_us: summary(&commit)?,
                decommit_us: summary(&decommit)?,
                grow_commit_us,
                grown,
            };
            log(&format!(
                "vmm with {} live granules: commit {:.1} decommit {:.1} µs/granule; growing the live set: {} µs/granule",
                level,
                p.commit_us.median,
                p.decommit_us.median,
                p.grow_commit_us.map_or("-".into(), |v| format!("{v:.1}"))
            ));
            out.push(p);
        }
        Ok(())
    })();
    for (at, h) in live {
        let _ = vmm::unmap(at, granule);
        let _ = vmm::release(h);
    }
    result?;
    Ok(out)
}

/// Dense demand faults per run length: `runs` runs of host-resident managed memory, each read
/// densely (one load per 16 B) by its own launch, back to back; CUDA events around all of
/// them. Sizes 64 KiB..16 MiB (x4; quick: 256 KiB, 4 MiB); a fresh buffer per size and
/// repetition so every page starts on the host.
fn measure_dense_faults(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<DenseFaultPoint>, CalibrateError> {
    let sizes: Vec<u64> = if quick {
        vec![256 << 10, 4 << 20]
    } else {
        (0..5).map(|i| (64u64 << 10) << (2 * i)).collect()
    };
    let runs: u64 = 8;
    let mut sink = stream.alloc_zeros::<u32>(1).during("sink")?;
    let mut samples = vec![Vec::new(); sizes.len()];
    for r in 0..=reps {
        for (i, &s) in sizes.iter().enumerate() {
            let bytes = 2 * runs * s;
            let mut p = 0;
            // SAFETY: out-pointer valid; freed below.
            unsafe {
                sys::cuMemAllocManaged(&mut p, bytes as usize, 1 /* GLOBAL */)
            }
            .result()
            .during("cuMemAllocManaged (dense faults)")?;
            // SAFETY: host-accessible managed memory, no kernel running: pages start on the host.
            unsafe { std::ptr::write_bytes(p as *mut u8, 1, bytes as usize) };
            let t = time_events(ctx, stream, &mut || {
                for j in 0..runs {
                    k.launch_page_touch(stream, p + 2 * j * s, s, 16, &mut sink)?;
                }
                Ok(())
            });
            // SAFETY: allocated above, freed once (after the events completed).
            unsafe { sys::cuMemFree_v2(p) }
                .result()
                .during("cuMemFree managed")?;
            let t = t?;
            if r > 0 {
                samples[i].push(t / runs as f64);
            }
        }
    }
    let mut out = Vec::new();
    for (&s, v) in sizes.iter().zip(&samples) {
        let per_run_us = summary(v)?;
        log(&format!(
            "dense faults, runs of {} KiB: {:.1} µs per run, {:.2} GB/s",
            s >> 10,
            per_run_us.median,
            s as f64 / per_run_us.median / 1e3
        ));
        out.push(DenseFaultPoint {
            run_bytes: s,
            runs: runs as u32,
            per_run_us,
        });
    }
    Ok(out)
}

/// The per-layer host round trip: launch an empty kernel, record an event, wait for it on the
/// host; [`ROUTER_SYNCS_PER_REP`] iterations per repetition, host clock, µs per iteration.
fn measure_router_sync(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    reps: u32,
    log: &mut dyn FnMut(&str),
) -> Result<Summary, CalibrateError> {
    let ev = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .during("event create")?;
    let n = ROUTER_SYNCS_PER_REP;
    let mut v = Vec::new();
    for r in 0..=reps {
        let t = Instant::now();
        for _ in 0..n {
            k.launch_empty(stream)?;
            ev.record(stream).during("event record")?;
            ev.synchronize().during("event synchronize")?;
        }
        if r > 0 {
            v.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
    }
    let s = summary(&v)?;
    log(&format!("router round trip: {:.1} µs", s.median));
    Ok(s)
}

/// Pinned host memory from cuMemHostAlloc, freed on drop.
struct Pinned {
    ptr: *mut u8,
    len: usize,
}
impl Pinned {
    fn new(len: usize) -> Result<Self, CalibrateError> {
        let mut p = std::ptr::null_mut();
        // SAFETY: out-pointer valid.
        unsafe { sys::cuMemHostAlloc(&mut p, len, 0) }
            .result()
            .during("cuMemHostAlloc")?;
        // SAFETY: fresh allocation of len bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0x5A, len) };
        Ok(Self {
            ptr: p as *mut u8,
            len,
        })
    }
}
impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc.
        let _ = unsafe { sys::cuMemFreeHost(self.ptr as *mut _) };
        let _ = self.len;
    }
}

/// H2D copy time over 64 KiB..256 MiB (x4 steps), pinned and pageable interleaved per repetition.
fn measure_h2d(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<(CopyCurve, CopyCurve), CalibrateError> {
    let sizes: Vec<u64> = if quick {
        vec![64 << 10, 1 << 20, 16 << 20, 256 << 20]
    } else {
        (0..7).map(|i| (64u64 << 10) << (2 * i)).collect()
    };
    let max = *sizes.last().expect("sizes") as usize;
    let pinned = Pinned::new(max)?;
    let pageable = vec![0x5Au8; max];
    let dst = stream.alloc_zeros::<u8>(max).during("H2D destination")?;
    let (dptr, _g) = dst.device_ptr(stream);
    let mut samples = vec![[Vec::new(), Vec::new()]; sizes.len()];
    for r in 0..=reps {
        for (i, &s) in sizes.iter().enumerate() {
            for (kind, src) in [pinned.ptr as *const u8, pageable.as_ptr()]
                .into_iter()
                .enumerate()
            {
                let t = time_events(ctx, stream, &mut || {
                    // SAFETY: src and dst hold at least `max >= s` bytes.
                    unsafe {
                        sys::cuMemcpyHtoDAsync_v2(
                            dptr,
                            src as *const _,
                            s as usize,
                            stream.cu_stream(),
                        )
                    }
                    .result()
                    .during("cuMemcpyHtoDAsync")
                })?;
                if r > 0 {
                    samples[i][kind].push(t);
                }
            }
        }
    }
    let mut curves = Vec::new();
    for kind in 0..2 {
        let points: Vec<CopyPoint> = sizes
            .iter()
            .zip(&samples)
            .map(|(&bytes, s)| {
                Ok(CopyPoint {
                    bytes,
                    time_us: summary(&s[kind])?,
                })
            })
            .collect::<Result<_, CalibrateError>>()?;
        let fit = LinearFit::fit(
            &points
                .iter()
                .map(|p| (p.bytes as f64, p.time_us.median))
                .collect::<Vec<_>>(),
        );
        if let Some(f) = &fit {
            log(&format!(
                "H2D {}: latency {:.1} µs, {:.1} GB/s (r2 {:.4})",
                ["pinned", "pageable"][kind],
                f.latency_us,
                f.bytes_per_us / 1e3,
                f.r2
            ));
        }
        curves.push(CopyCurve { points, fit });
    }
    let pageable_curve = curves.pop().expect("two");
    Ok((curves.pop().expect("two"), pageable_curve))
}

/// Managed memory: demand faults per touch stride, and prefetch where the platform supports it.
/// Never asks for more managed memory than a quarter of the free device memory.
fn measure_managed(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    device: &DeviceInfo,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<ManagedResult, CalibrateError> {
    let bytes = (if quick { 256 * MIB } else { GIB }).min(device.vram_free / 4);
    let strides = [4u64 << 10, 64 << 10, 2 << 20];
    let mut sink = stream.alloc_zeros::<u32>(1).during("sink")?;
    let alloc_host_resident = || -> Result<u64, CalibrateError> {
        let mut p = 0;
        // SAFETY: out-pointer valid; freed by the caller.
        unsafe {
            sys::cuMemAllocManaged(&mut p, bytes as usize, 1 /* CU_MEM_ATTACH_GLOBAL */)
        }
        .result()
        .during("cuMemAllocManaged")?;
        // The host writes every byte so all pages start host-resident.
        // SAFETY: managed memory is host-accessible after allocation with no kernel running.
        unsafe { std::ptr::write_bytes(p as *mut u8, 1, bytes as usize) };
        Ok(p)
    };
    let free_managed = |p: u64| -> Result<(), CalibrateError> {
        // SAFETY: allocated by cuMemAllocManaged, freed once.
        unsafe { sys::cuMemFree_v2(p) }
            .result()
            .during("cuMemFree managed")
    };
    let mut fault_samples = vec![(Vec::new(), Vec::new()); strides.len()];
    let mut prefetch = Vec::new();
    let mut prefetch_unsupported = if device.concurrent_managed_access {
        None
    } else {
        Some(
            "CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS is 0 (e.g. Windows WDDM): no prefetch"
                .to_string(),
        )
    };
    for r in 0..=reps {
        for (i, &stride) in strides.iter().enumerate() {
            let p = alloc_host_resident()?;
            let t = time_events(ctx, stream, &mut || {
                Ok(k.launch_page_touch(stream, p, bytes, stride, &mut sink)?)
            })?;
            free_managed(p)?;
            if r > 0 {
                fault_samples[i].0.push(bytes as f64 / t);
                fault_samples[i].1.push(t / (bytes / stride) as f64);
            }
        }
        if prefetch_unsupported.is_none() {
            let p = alloc_host_resident()?;
            let loc = sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ctx.ordinal() as i32,
            };
            let mut err = None;
            let t = time_events(ctx, stream, &mut || {
                // SAFETY: p is a managed range of `bytes` bytes.
                if let Err(e) = unsafe {
                    sys::cuMemPrefetchAsync_v2(p, bytes as usize, loc, 0, stream.cu_stream())
                }
                .result()
                {
                    err = Some(e);
                }
                Ok(())
            })?;
            free_managed(p)?;
            match err {
                Some(e) => prefetch_unsupported = Some(format!("cuMemPrefetchAsync failed: {e}")),
                None if r > 0 => prefetch.push(bytes as f64 / t),
                None => {}
            }
        }
    }
    let faults = strides
        .iter()
        .zip(&fault_samples)
        .map(|(&stride, (bw, lat))| {
            Ok(FaultPoint {
                stride,
                bytes,
                bytes_per_us: summary(bw)?,
                per_page_us: summary(lat)?,
            })
        })
        .collect::<Result<Vec<_>, CalibrateError>>()?;
    for f in &faults {
        log(&format!(
            "demand faults, stride {} KiB: {:.2} GB/s, {:.2} µs per page",
            f.stride >> 10,
            f.bytes_per_us.median / 1e3,
            f.per_page_us.median
        ));
    }
    let prefetch_bytes_per_us = if prefetch_unsupported.is_none() {
        Some(summary(&prefetch)?)
    } else {
        None
    };
    match (&prefetch_bytes_per_us, &prefetch_unsupported) {
        (Some(s), _) => log(&format!("prefetch: {:.1} GB/s", s.median / 1e3)),
        (None, Some(why)) => log(&format!("prefetch unsupported: {why}")),
        _ => {}
    }
    Ok(ManagedResult {
        faults,
        prefetch_bytes_per_us,
        prefetch_unsupported,
    })
}
