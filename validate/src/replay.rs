//! Real-GPU replay of a [`ReplayPlan`]: does for real what the simulator's engine models, and
//! times every decode step with CUDA events on the compute stream.
//!
//! Per group, as the engine orders it:
//! 1. the non-expert kernel (a streaming read of the layer's non-expert weight bytes) runs on
//!    the compute stream, then an event marks the router: the host waits for it (the router's
//!    selection is known on the host only then);
//! 2. evictions of units resident before the group: VMM cuMemUnmap + cuMemRelease per granule
//!    (on the host, critical path), or for OS pages cuMemPrefetchAsync back to host memory on a
//!    side stream;
//! 3. page-ins: per VMM unit cuMemCreate + cuMemMap + cuMemSetAccess per granule on the host,
//!    then cuMemcpyHtoDAsync of the unit's useful bytes from pinned host memory on the copy
//!    stream (the next unit's calls overlap this copy); OS pages need no call: the expert
//!    kernels fault them in;
//! 4. the compute stream waits for the copies, then the int4 expert kernels run one slot per
//!    distinct selected key (the engine prices one expert compute per distinct key);
//! 5. the next group's non-expert kernel is enqueued, then units paged in and evicted by this
//!    group (streamed, or a budget below one group) are decommitted once its kernels finish.
//!
//! The host's time in each phase (router wait, evictions, commits, H2D enqueues, launches,
//! the wait for a group's kernels before its late decommits) is recorded per step
//! ([`HostBreakdown`]), for comparing with the engine's split of the same steps.
//!
//! The plan's first [`ReplayPlan::warmup_steps`] steps run the same way, back to back with the
//! measured ones, and are left out of every figure the measurement reports (step times, host
//! breakdown, call and byte counts, wall time): a retention row's cache is at its budget when
//! the measured steps start.
//!
//! Every kernel launch is prepared before timing starts (unit addresses are fixed inside one
//! reserved range), so the timed loop allocates nothing on the device. Copies all read one
//! pinned staging buffer of the largest unit's bytes: an H2D copy's time does not depend on
//! which pinned host bytes it reads, and a full pinned copy of a 50 GiB bank would take minutes
//! to allocate. Portable: driver API calls only, no OS-specific paths.

use crate::device::DeviceInfo;
use crate::host::lane_replay::LaneBank;
use crate::replay_cpu::{CpuLaneMeasured, CpuLaneSpec, LaneIo, LaneRun, LaneWorker};
use crate::replay_plan::{kernel_geometry, runs, Layout, ReplayGroup, ReplayPlan};
use crate::vmm;
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DriverError};
use kernels::{ExpertGeometry, KernelError, Kernels, MoeLaunch, Variant};
use policies::{Paging, UnitMap};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// Errors of a replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error("CUDA driver call failed during {step}: {source}")]
    Driver {
        step: &'static str,
        source: DriverError,
    },
    #[error("{0}")]
    Invalid(String),
}

trait During<T> {
    fn during(self, step: &'static str) -> Result<T, ReplayError>;
}
impl<T> During<T> for Result<T, DriverError> {
    fn during(self, step: &'static str) -> Result<T, ReplayError> {
        self.map_err(|source| ReplayError::Driver { step, source })
    }
}

/// Options of a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// CUDA device ordinal.
    pub device: usize,
}

/// A finished replay: measured step times and what was executed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayMeasurement {
    /// The GPU and driver the replay ran on.
    pub device: DeviceInfo,
    /// Measured latency of every decode step, µs (CUDA events on the compute stream, from the
    /// step's first non-expert kernel to the end of its last expert kernels), in step order.
    pub step_us: Vec<f64>,
    /// Kernel geometry run for one expert: hidden x ffn, int4, group 128.
    pub kernel_hidden: usize,
    /// FFN width of that kernel geometry.
    pub kernel_ffn: usize,
    /// Bytes the kernel reads per expert (<= the simulator's expert bytes).
    pub kernel_expert_bytes: u64,
    /// Granules committed (cuMemCreate + cuMemMap + cuMemSetAccess each) and decommitted.
    pub map_calls: u64,
    /// Granules decommitted (cuMemUnmap + cuMemRelease each).
    pub unmap_calls: u64,
    /// cuMemPrefetchAsync calls that evicted OS pages back to host memory.
    pub os_evict_calls: u64,
    /// Useful bytes copied host to device (VMM units).
    pub bytes_copied: u64,
    /// Wall time of the timed loop, s (host clock).
    pub wall_s: f64,
    /// Where the host's time went, per decode step (host clock), in step order.
    #[serde(default)]
    pub host: Vec<HostBreakdown>,
    /// Untimed warm-up steps replayed before the measured ones (0, and absent from the JSON,
    /// for a replay without warm-up and in files written before it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warmup_steps: usize,
    /// The CPU lane of a composed replay ([`replay_composed`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_lane: Option<CpuLaneMeasured>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Host time of one decode step of the replay by what the host was doing, µs (host clock,
/// `Instant` around each phase of every group of the step). The phases follow each other on
/// the one host thread, so their sum is the host's time spent on the step's groups.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostBreakdown {
    /// Blocked in cuEventSynchronize on the router event (the GPU still busy).
    pub router_wait_us: f64,
    /// Evicting units resident before the group: cuMemUnmap + cuMemRelease per granule (VMM),
    /// or enqueueing cuMemPrefetchAsync back to host memory (OS pages).
    pub evict_us: f64,
    /// Commit calls of page-ins: cuMemCreate + cuMemMap + cuMemSetAccess per granule.
    pub commit_us: f64,
    /// Enqueueing the page-ins' cuMemcpyHtoDAsync on the copy stream.
    pub h2d_enqueue_us: f64,
    /// Event records, the compute stream's wait for the copies, the expert launches and the
    /// next group's non-expert launch.
    pub launch_us: f64,
    /// Blocked until the group's expert kernels finish, before decommitting units paged in
    /// and evicted within the group (VMM streaming).
    pub late_wait_us: f64,
    /// Evicting those units (same calls as `evict_us`).
    pub late_evict_us: f64,
    /// Groups of the step.
    pub groups: u32,
    /// Units paged in (committed and copied, or faulted) by the step.
    pub page_ins: u32,
    /// Units evicted by the step.
    pub evictions: u32,
    /// Runs of VMM commits of the step: a group's page-ins, committed one after another.
    #[serde(default)]
    pub commit_runs: u32,
    /// Those runs whose first cuMemCreate came after a cuMemRelease with no commit between
    /// (this step's or, for its first run, the previous step's late decommits).
    #[serde(default)]
    pub commit_runs_after_release: u32,
    /// Granules released (cuMemRelease) between the previous run of commits and each run,
    /// summed over the step's runs: per run after a release, the release volume its commits
    /// follow (the calibration's page-in arm shows 2-granule commits slower after 1024
    /// released granules than after 16).
    #[serde(default)]
    pub released_before_runs_granules: u64,
    /// Host time from the last cuMemRelease to each such run's first cuMemCreate, µs, summed
    /// over the runs after a release.
    #[serde(default)]
    pub release_gap_us: f64,
    /// Blocked until the CPU lane's worker finished the group's calls, and copying their
    /// results back (composed replays; 0, and absent from the JSON, otherwise).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub cpu_join_us: f64,
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

impl HostBreakdown {
    /// Sum of the timed phases, µs.
    pub fn total_us(&self) -> f64 {
        self.router_wait_us
            + self.evict_us
            + self.commit_us
            + self.h2d_enqueue_us
            + self.launch_us
            + self.late_wait_us
            + self.late_evict_us
            + self.cpu_join_us
    }
}

/// Microseconds since `*t`, and `*t` moved to now: consecutive phases of the host loop.
fn lap(t: &mut Instant) -> f64 {
    let now = Instant::now();
    let us = now.duration_since(*t).as_secs_f64() * 1e6;
    *t = now;
    us
}

/// Pinned host memory from cuMemHostAlloc, freed on drop.
pub(crate) struct Pinned {
    pub(crate) ptr: *mut u8,
}
impl Pinned {
    pub(crate) fn new(len: usize) -> Result<Self, ReplayError> {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        unsafe { sys::cuMemHostAlloc(&mut p, len.max(1), 0) }
            .result()
            .during("cuMemHostAlloc (pinned staging buffer)")?;
        // Every byte 0x3B: int4 weights 3 and 11, and each f32 scale 0x3B3B3B3B = 0.00286, a
        // realistic group scale. (Scales that underflow, as 0x11 bytes gave (1.1e-28), or that
        // are NaN slow the expert kernels by ~16%: docs/history/kernels.md, "One persistent
        // launch per layer".)
        // SAFETY: fresh allocation of len bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0x3B, len) };
        Ok(Self { ptr: p as *mut u8 })
    }
}
impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        let _ = unsafe { sys::cuMemFreeHost(self.ptr as *mut _) };
    }
}

/// The VMM bank: one reserved range, per unit the physical handles of its granules while mapped.
struct VmmBank {
    res: vmm::Reservation,
    granule: u64,
    device: i32,
    /// Per unit, (address, handle) of each mapped granule; empty while not resident.
    handles: Vec<Vec<(u64, sys::CUmemGenericAllocationHandle)>>,
}

impl VmmBank {
    /// cuMemCreate + cuMemMap + cuMemSetAccess per granule of unit `u` at `va`.
    fn commit(&mut self, u: usize, va: u64, committed: u64) -> Result<u64, ReplayError> {
        let g = committed.div_ceil(self.granule);
        let mut hs = Vec::with_capacity(g as usize);
        for i in 0..g {
            let at = va + i * self.granule;
            let h = vmm::create(self.granule as usize, self.device).during("cuMemCreate")?;
            vmm::map(at, self.granule as usize, h).during("cuMemMap")?;
            vmm::set_access(at, self.granule as usize, self.device).during("cuMemSetAccess")?;
            hs.push((at, h));
        }
        self.handles[u] = hs;
        Ok(g)
    }

    /// cuMemUnmap + cuMemRelease per granule of unit `u` at `va`.
    fn decommit(&mut self, u: usize, va: u64) -> Result<u64, ReplayError> {
        let hs = std::mem::take(&mut self.handles[u]);
        debug_assert!(hs.first().is_none_or(|&(at, _)| at == va));
        for &(at, h) in &hs {
            vmm::unmap(at, self.granule as usize).during("cuMemUnmap")?;
            vmm::release(h).during("cuMemRelease")?;
        }
        Ok(hs.len() as u64)
    }
}

impl Drop for VmmBank {
    fn drop(&mut self) {
        // Leave nothing mapped inside the reservation before it is freed.
        for hs in &mut self.handles {
            for (at, h) in hs.drain(..) {
                let _ = vmm::unmap(at, self.granule as usize);
                let _ = vmm::release(h);
            }
        }
        let _ = self.res.size;
    }
}

/// Managed memory from cuMemAllocManaged, freed on drop.
struct Managed {
    ptr: u64,
}
impl Drop for Managed {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAllocManaged, freed once.
        let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Replays `plan` (made for `map`) on the GPU and measures every step. Fails at once with a
/// clear error when no CUDA driver or NVRTC loads, and before touching the GPU's memory when
/// the bank would not fit: `peak_bytes` (the simulator's peak of committed expert memory) must
/// leave 10% of free VRAM, and OS paging's managed bank must fit in half of free VRAM.
pub fn replay(
    plan: &ReplayPlan,
    map: &UnitMap,
    peak_bytes: u64,
    opts: ReplayOptions,
) -> Result<ReplayMeasurement, ReplayError> {
    replay_composed(plan, map, peak_bytes, opts, None)
}

/// [`replay`] with the plan's CPU calls ([`ReplayGroup::cpu_calls`]) run on the host CPU by
/// `lane` (its spec, and the bank its calls read: [`crate::replay_cpu::lane_bank`]) beside
/// the GPU part of each group, as [`crate::replay_cpu`] describes; `None`: the GPU replay
/// alone. The measurement's `cpu_lane` says what the CPU ran.
pub fn replay_composed(
    plan: &ReplayPlan,
    map: &UnitMap,
    peak_bytes: u64,
    opts: ReplayOptions,
    lane: Option<(&CpuLaneSpec, &mut LaneBank)>,
) -> Result<ReplayMeasurement, ReplayError> {
    if let Some((spec, _)) = &lane {
        crate::replay_cpu::check_plan(plan, spec).map_err(ReplayError::Invalid)?;
    }
    let ctx = kernels::open_device(opts.device)?;
    let device = DeviceInfo::read(&ctx).during("device query")?;
    let geom = expert_kernel(plan, map)?;
    if plan.warmup_steps >= plan.steps {
        return Err(ReplayError::Invalid(format!(
            "a warm-up of {} steps leaves none of the plan's {} steps to measure",
            plan.warmup_steps, plan.steps
        )));
    }
    let layout = Layout::of(map);
    check_room(plan, &layout, peak_bytes, &device)?;
    let k = Kernels::load(&ctx)?;
    let compute = ctx.new_stream().during("compute stream")?;
    let copy = ctx.new_stream().during("copy stream")?;
    let side = ctx.new_stream().during("eviction stream")?;
    let dev = opts.device as i32;

    let (bank, managed, base) = make_bank(plan, map, &layout, dev)?;
    let max_useful = map.units.iter().map(|u| u.useful_bytes).max().unwrap_or(0);
    let staging = match plan.paging {
        Paging::Vmm => Some(Pinned::new(max_useful as usize)?),
        Paging::Os => None,
    };
    let ne_bufs = nonexpert_buffers(plan, &compute)?;
    let mut sink = compute.alloc_zeros::<u32>(1).during("sink")?;
    let mut launches = prepare_launches(&k, &compute, geom, plan, &layout, base)?;

    let mut st = Exec {
        plan,
        map,
        layout: &layout,
        bank,
        staging_ptr: staging.as_ref().map(|s| s.ptr),
        base,
        device: dev,
        copy: &copy,
        side: &side,
        resident: vec![false; map.units.len()],
        map_calls: 0,
        unmap_calls: 0,
        os_evict_calls: 0,
        bytes_copied: 0,
        commit_us: 0.0,
        h2d_enqueue_us: 0.0,
        released_since_commit: 0,
        last_release: None,
        commit_runs: 0,
        commit_runs_after_release: 0,
        released_before_runs_granules: 0,
        release_gap_us: 0.0,
        bg_pending: vec![None; map.units.len()],
        bg_events: background_events(&ctx, plan)?,
    };
    st.preload(&compute)?;
    // Warm-up outside the timed loop: module load and first launches of both kernels.
    warm_up(&k, &compute, &ne_bufs, &mut sink, geom)?;
    copy.synchronize().during("warm-up")?;
    compute.synchronize().during("warm-up")?;

    let io = lane
        .as_ref()
        .map(|_| LaneIo::new(&ctx, &compute, plan))
        .transpose()?;
    let mut gpu = Launcher::new(&ctx, &k, &compute, &copy, plan, &ne_bufs)?;
    gpu.lane_io = io.as_ref();
    let mut host: Vec<HostBreakdown> = vec![HostBreakdown::default(); plan.steps];
    let (counts0, mut step_us, wall_s, cpu_lane) = std::thread::scope(|s| {
        let mut run = lane.map(|(spec, bank)| LaneRun {
            measured: CpuLaneMeasured::new(plan.steps, spec.threads, spec.poll)
                .with_bank(bank.bank_bytes() as u64, bank.distinct),
            worker: LaneWorker::start(
                s,
                plan,
                bank,
                spec.threads,
                spec.poll,
                io.as_ref().map(|i| &i.arrived),
            ),
        });
        gpu.start(&mut sink)?;
        let (counts0, t0) = run_warm_up_then_measured(
            &mut st,
            &mut gpu,
            &mut launches,
            &mut sink,
            &mut host,
            &mut run,
        )?;
        let (step_us, wall_s) = gpu.finish(&side, t0)?;
        let cpu_lane = run.map(LaneRun::finish).transpose()?;
        Ok::<_, ReplayError>((counts0, step_us, wall_s, cpu_lane))
    })?;
    step_us.drain(..plan.warmup_steps.min(step_us.len()));
    host.drain(..plan.warmup_steps);
    let cpu_lane = cpu_lane.map(|mut m| {
        m.drop_warm_up(plan);
        m
    });

    st.evict_all()?;
    let out = ReplayMeasurement {
        device,
        step_us,
        kernel_hidden: geom.hidden,
        kernel_ffn: geom.ffn,
        kernel_expert_bytes: geom.expert_bytes() as u64,
        map_calls: st.map_calls - counts0.map_calls,
        unmap_calls: st.unmap_calls - counts0.unmap_calls,
        os_evict_calls: st.os_evict_calls - counts0.os_evict_calls,
        bytes_copied: st.bytes_copied - counts0.bytes_copied,
        wall_s,
        host,
        warmup_steps: plan.warmup_steps,
        cpu_lane,
    };
    drop(st);
    drop(launches);
    drop(managed);
    drop(staging);
    Ok(out)
}

/// The call and byte counts of [`Exec`] at one moment.
struct Counts {
    map_calls: u64,
    unmap_calls: u64,
    os_evict_calls: u64,
    bytes_copied: u64,
}

/// Every group of the plan: the warm-up steps' groups, then the measured ones. Returns the
/// call and byte counts (map, unmap, OS evict, bytes copied) and the host clock at the
/// boundary, where the measurement's counts and wall time start.
fn run_warm_up_then_measured(
    st: &mut Exec,
    gpu: &mut Launcher,
    launches: &mut [Option<MoeLaunch>],
    sink: &mut CudaSlice<u32>,
    host: &mut [HostBreakdown],
    lane: &mut Option<LaneRun>,
) -> Result<(Counts, Instant), ReplayError> {
    let plan = st.plan;
    let first = plan
        .groups
        .iter()
        .position(|g| g.step as usize >= plan.warmup_steps)
        .unwrap_or(plan.groups.len());
    run_groups(st, gpu, launches, 0..first, sink, host, lane)?;
    let counts = Counts {
        map_calls: st.map_calls,
        unmap_calls: st.unmap_calls,
        os_evict_calls: st.os_evict_calls,
        bytes_copied: st.bytes_copied,
    };
    let t0 = Instant::now();
    let all = launches.len();
    run_groups(st, gpu, launches, first..all, sink, host, lane)?;
    Ok((counts, t0))
}

/// The int4 expert kernel geometry the replay runs for `map`'s experts.
fn expert_kernel(plan: &ReplayPlan, map: &UnitMap) -> Result<ExpertGeometry, ReplayError> {
    kernel_geometry(plan.hidden, map.expert_bytes).ok_or_else(|| {
        ReplayError::Invalid(format!(
            "no int4 expert kernel of hidden {} fits an expert of {} B (hidden must be a multiple of 128 and the expert at least 128 FFN columns); raise --expert-mib",
            plan.hidden, map.expert_bytes
        ))
    })
}

/// Refuse a replay whose bank would not fit, before touching the GPU's memory: `peak_bytes`
/// must leave 10% of free VRAM, and OS paging's managed bank must fit in half of it.
fn check_room(
    plan: &ReplayPlan,
    layout: &Layout,
    peak_bytes: u64,
    device: &DeviceInfo,
) -> Result<(), ReplayError> {
    let free = device.vram_free;
    if peak_bytes as f64 > 0.9 * free as f64 {
        return Err(ReplayError::Invalid(format!(
            "the replay would map {:.1} GiB of expert units at its peak, more than 90% of the {:.1} GiB free on {}: lower --budget or --expert-mib",
            peak_bytes as f64 / (1u64 << 30) as f64,
            free as f64 / (1u64 << 30) as f64,
            device.gpu
        )));
    }
    if plan.paging == Paging::Os && layout.total_bytes > free / 2 {
        return Err(ReplayError::Invalid(format!(
            "OS paging replays the whole bank as managed memory ({:.1} GiB), more than half of the {:.1} GiB free (managed memory past free VRAM can hang the GPU): lower --expert-mib",
            layout.total_bytes as f64 / (1u64 << 30) as f64,
            free as f64 / (1u64 << 30) as f64
        )));
    }
    Ok(())
}

/// The bank: reserved VA (VMM) or one managed allocation (OS pages), and its base address.
fn make_bank(
    plan: &ReplayPlan,
    map: &UnitMap,
    layout: &Layout,
    dev: i32,
) -> Result<(Option<VmmBank>, Option<Managed>, u64), ReplayError> {
    let mut bank: Option<VmmBank> = None;
    let mut managed: Option<Managed> = None;
    let base = match plan.paging {
        Paging::Vmm => {
            let granule = map.granule_bytes;
            let res =
                vmm::Reservation::new(layout.total_bytes.max(granule) as usize, granule as usize)
                    .during("cuMemAddressReserve")?;
            let b = res.base;
            bank = Some(VmmBank {
                res,
                granule,
                device: dev,
                handles: vec![Vec::new(); map.units.len()],
            });
            b
        }
        Paging::Os => {
            let mut p = 0;
            // SAFETY: valid out-pointer; freed by `Managed`.
            unsafe {
                sys::cuMemAllocManaged(
                    &mut p,
                    layout.total_bytes as usize,
                    1, /* CU_MEM_ATTACH_GLOBAL */
                )
            }
            .result()
            .during("cuMemAllocManaged (OS-paged bank)")?;
            managed = Some(Managed { ptr: p });
            // The host writes every byte so every page starts host-resident (the first access
            // on the GPU is a demand fault, as the simulator prices it).
            // SAFETY: managed memory is host-accessible; no kernel runs yet.
            unsafe { std::ptr::write_bytes(p as *mut u8, 0x11, layout.total_bytes as usize) };
            p
        }
    };
    Ok((bank, managed, base))
}

/// Non-expert weights: one buffer per MoE layer (distinct bytes, as a real model's layers).
fn nonexpert_buffers(
    plan: &ReplayPlan,
    compute: &Arc<CudaStream>,
) -> Result<Vec<CudaSlice<u8>>, ReplayError> {
    let ne_bufs: Vec<CudaSlice<u8>> = if plan.nonexpert_bytes_per_layer >= 16 {
        (0..plan.moe_layers)
            .map(|_| compute.alloc_zeros::<u8>(plan.nonexpert_bytes_per_layer as usize))
            .collect::<Result<_, _>>()
            .during("non-expert weight buffers")?
    } else {
        Vec::new()
    };
    Ok(ne_bufs)
}

/// Every group's expert launch, prepared before timing (one slot per distinct key, 1 token).
fn prepare_launches(
    k: &Kernels,
    compute: &Arc<CudaStream>,
    geom: ExpertGeometry,
    plan: &ReplayPlan,
    layout: &Layout,
    base: u64,
) -> Result<Vec<Option<MoeLaunch>>, ReplayError> {
    let x = vec![0.01f32; geom.hidden];
    let mut launches: Vec<Option<MoeLaunch>> = Vec::with_capacity(plan.groups.len());
    for g in &plan.groups {
        if g.keys.is_empty() {
            launches.push(None);
            continue;
        }
        let ptrs: Vec<u64> = g
            .keys
            .iter()
            .map(|&key| base + layout.key_offset[key as usize])
            .collect();
        let slot_token = vec![0u32; ptrs.len()];
        launches.push(Some(k.prepare_moe(
            compute,
            geom,
            Variant::PerSlot,
            &ptrs,
            &slot_token,
            &x,
        )?));
    }
    compute.synchronize().during("prepare launches")?;
    Ok(launches)
}

/// The loop over the plan's groups `range`: per group, the router wait, the evictions of
/// units resident before it, its page-ins, the launches, and its late evictions, each phase's
/// host time added to the group's step in `host`.
fn run_groups(
    st: &mut Exec,
    gpu: &mut Launcher,
    launches: &mut [Option<MoeLaunch>],
    range: std::ops::Range<usize>,
    sink: &mut CudaSlice<u32>,
    host: &mut [HostBreakdown],
    lane: &mut Option<LaneRun>,
) -> Result<(), ReplayError> {
    let plan = st.plan;
    let mut late: Vec<u32> = Vec::new();
    for gi in range {
        let launch = &mut launches[gi];
        let g = &plan.groups[gi];
        let mut clock = Instant::now();
        gpu.router.synchronize().during("router wait")?;
        let hb = host.get_mut(g.step as usize).ok_or_else(|| {
            ReplayError::Invalid(format!(
                "group {gi} names step {} of a plan of {} steps",
                g.step, plan.steps
            ))
        })?;
        hb.router_wait_us += lap(&mut clock);
        hb.groups += 1;
        let mut cpu = lane.as_mut().filter(|_| !g.cpu_calls.is_empty());
        if let Some(r) = cpu.as_mut() {
            r.submit(gi)?;
        }
        st.evict_before(g, &mut late, hb, &mut clock)?;
        let copied = st.page_in_group(g, hb, &mut clock)?;
        st.wait_background(g, gpu.compute)?;
        gpu.launch_experts(launch, copied)?;
        hb.launch_us += lap(&mut clock);
        st.page_in_background(gi, hb, &mut clock)?;
        if let Some(r) = cpu {
            r.join(g, gpu.lane_io.map(|io| (gpu.compute, io)))?;
            hb.cpu_join_us += lap(&mut clock);
        }
        gpu.launch_next(gi, sink)?;
        hb.launch_us += lap(&mut clock);
        st.evict_late(&late, &gpu.experts_done, hb, &mut clock)?;
    }
    Ok(())
}

/// The kernels, streams and events of the timed loop's launches.
struct Launcher<'a> {
    ctx: &'a Arc<CudaContext>,
    k: &'a Kernels,
    compute: &'a Arc<CudaStream>,
    copy: &'a Arc<CudaStream>,
    plan: &'a ReplayPlan,
    ne_bufs: &'a [CudaSlice<u8>],
    copies_done: CudaEvent,
    experts_done: CudaEvent,
    router: CudaEvent,
    /// One event at each step's start on the compute stream, then one at the end.
    step_events: Vec<CudaEvent>,
    /// The CPU lane's activation copies (composed replays).
    lane_io: Option<&'a LaneIo>,
}

impl<'a> Launcher<'a> {
    fn new(
        ctx: &'a Arc<CudaContext>,
        k: &'a Kernels,
        compute: &'a Arc<CudaStream>,
        copy: &'a Arc<CudaStream>,
        plan: &'a ReplayPlan,
        ne_bufs: &'a [CudaSlice<u8>],
    ) -> Result<Self, ReplayError> {
        let step_events: Vec<CudaEvent> = Vec::with_capacity(plan.steps + 1);
        let router = new_event(ctx)?;
        let experts_done = new_event(ctx)?;
        let copies_done = new_event(ctx)?;
        Ok(Launcher {
            ctx,
            k,
            compute,
            copy,
            plan,
            ne_bufs,
            copies_done,
            experts_done,
            router,
            step_events,
            lane_io: None,
        })
    }

    /// The non-expert kernel of group `gi` (none when its layer has no buffer).
    fn nonexpert(&self, gi: usize, sink: &mut CudaSlice<u32>) -> Result<(), ReplayError> {
        if let Some(buf) = self.ne_bufs.get(self.plan.groups[gi].moe_layer as usize) {
            self.k.launch_stream_read(self.compute, buf, sink)?;
        }
        Ok(())
    }

    /// Before the loop: the first step's event, the first group's non-expert kernel and its
    /// router event.
    fn start(&mut self, sink: &mut CudaSlice<u32>) -> Result<(), ReplayError> {
        if !self.plan.groups.is_empty() {
            let e = new_event(self.ctx)?;
            e.record(self.compute).during("event record")?;
            self.step_events.push(e);
            self.nonexpert(0, sink)?;
            self.router.record(self.compute).during("event record")?;
            self.activations_out(0)?;
        }
        Ok(())
    }

    /// Group `gi`'s activations to the host after its router, when its CPU lane has calls.
    fn activations_out(&self, gi: usize) -> Result<(), ReplayError> {
        match self.lane_io {
            Some(io) if !self.plan.groups[gi].cpu_calls.is_empty() => {
                io.to_host(self.compute, self.plan.groups[gi].activation_bytes)
            }
            _ => Ok(()),
        }
    }

    /// Group `gi`'s expert launches: the compute stream waits for its copies (when it
    /// `copied` units), then its expert kernels run.
    fn launch_experts(
        &mut self,
        launch: &mut Option<MoeLaunch>,
        copied: bool,
    ) -> Result<(), ReplayError> {
        let plan = self.plan;
        if plan.paging == Paging::Vmm && copied {
            self.copies_done.record(self.copy).during("event record")?;
            self.compute.wait(&self.copies_done).during("stream wait")?;
        }
        // the experts, then the next group's non-expert compute
        if let Some(l) = launch.as_mut() {
            self.k.launch_moe(self.compute, l)?;
        }
        self.experts_done
            .record(self.compute)
            .during("event record")?;
        Ok(())
    }

    /// After group `gi` (its experts and any CPU results): the next group's non-expert
    /// kernel (after a new step's event when the step changes), its router event and, when
    /// its CPU lane has calls, its activations' copy to the host.
    fn launch_next(&mut self, gi: usize, sink: &mut CudaSlice<u32>) -> Result<(), ReplayError> {
        let plan = self.plan;
        let g = &plan.groups[gi];
        if gi + 1 < plan.groups.len() {
            if plan.groups[gi + 1].step != g.step {
                let e = new_event(self.ctx)?;
                e.record(self.compute).during("event record")?;
                self.step_events.push(e);
            }
            self.nonexpert(gi + 1, sink)?;
            self.router.record(self.compute).during("event record")?;
            self.activations_out(gi + 1)?;
        }
        Ok(())
    }

    /// After the loop: wait for everything, and return each step's measured time, µs, and the
    /// loop's wall time since `t0`, s.
    fn finish(
        &mut self,
        side: &Arc<CudaStream>,
        t0: Instant,
    ) -> Result<(Vec<f64>, f64), ReplayError> {
        let end = new_event(self.ctx)?;
        end.record(self.compute).during("event record")?;
        end.synchronize().during("final synchronize")?;
        side.synchronize().during("final synchronize")?;
        let wall_s = t0.elapsed().as_secs_f64();
        self.step_events.push(end);
        let step_us = self
            .step_events
            .windows(2)
            .map(|w| w[0].elapsed_ms(&w[1]).map(|ms| ms as f64 * 1e3))
            .collect::<Result<Vec<_>, _>>()
            .during("event elapsed")?;
        Ok((step_us, wall_s))
    }
}

/// A CUDA event with default flags (timing on).
fn new_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent, ReplayError> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .during("event create")
}

/// One launch of each kernel outside the timed loop (module load, first-launch costs).
fn warm_up(
    k: &Kernels,
    s: &Arc<CudaStream>,
    ne: &[CudaSlice<u8>],
    sink: &mut CudaSlice<u32>,
    geom: ExpertGeometry,
) -> Result<(), ReplayError> {
    if let Some(b) = ne.first() {
        k.launch_stream_read(s, b, sink)?;
    }
    let w = s
        .alloc_zeros::<u8>(geom.expert_stride())
        .during("warm-up expert")?;
    let p = {
        use cudarc::driver::DevicePtr;
        let (p, _g) = w.device_ptr(s);
        p
    };
    let x = vec![0.01f32; geom.hidden];
    let mut l = k.prepare_moe(s, geom, Variant::PerSlot, &[p], &[0], &x)?;
    k.launch_moe(s, &mut l)?;
    s.synchronize().during("warm-up")?;
    Ok(())
}

/// The mutable state of the timed loop.
struct Exec<'a> {
    plan: &'a ReplayPlan,
    map: &'a UnitMap,
    layout: &'a Layout,
    bank: Option<VmmBank>,
    staging_ptr: Option<*mut u8>,
    base: u64,
    device: i32,
    copy: &'a Arc<CudaStream>,
    side: &'a Arc<CudaStream>,
    resident: Vec<bool>,
    map_calls: u64,
    unmap_calls: u64,
    os_evict_calls: u64,
    bytes_copied: u64,
    /// Host time in commit calls and in H2D enqueues, µs (running sums).
    commit_us: f64,
    h2d_enqueue_us: f64,
    /// Granules released since the last commit, and when the last was released.
    released_since_commit: u64,
    last_release: Option<Instant>,
    /// Running sums of [`HostBreakdown`]'s commit-run fields.
    commit_runs: u32,
    commit_runs_after_release: u32,
    released_before_runs_granules: u64,
    release_gap_us: f64,
    /// Per unit, the group whose off-critical-path copy of it no kernel or decommit has
    /// waited for yet (`misses`), and per group with such page-ins the event after them.
    bg_pending: Vec<Option<usize>>,
    bg_events: Vec<Option<CudaEvent>>,
}

/// One event per group that pages units in off the critical path (none for other groups).
fn background_events(
    ctx: &Arc<CudaContext>,
    plan: &ReplayPlan,
) -> Result<Vec<Option<CudaEvent>>, ReplayError> {
    plan.groups
        .iter()
        .map(|g| {
            (!g.background.is_empty())
                .then(|| new_event(ctx))
                .transpose()
        })
        .collect()
}

impl Exec<'_> {
    /// `misses`: the units group `gi` pages in off the critical path, after its launches:
    /// committed and copied as demand page-ins are, then an event on the copy stream that
    /// only the groups reading them wait for ([`Exec::wait_background`]).
    fn page_in_background(
        &mut self,
        gi: usize,
        hb: &mut HostBreakdown,
        clock: &mut Instant,
    ) -> Result<(), ReplayError> {
        let g = &self.plan.groups[gi];
        let fresh: Vec<u32> = g
            .background
            .iter()
            .copied()
            .filter(|&u| !self.resident[u as usize])
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let (c0, h0) = (self.commit_us, self.h2d_enqueue_us);
        self.page_in(&fresh)?;
        if let Some(e) = &self.bg_events[gi] {
            e.record(self.copy).during("event record")?;
        }
        for &u in &fresh {
            self.resident[u as usize] = true;
            self.bg_pending[u as usize] = Some(gi);
        }
        let (c, h) = (self.commit_us - c0, self.h2d_enqueue_us - h0);
        hb.commit_us += c;
        hb.h2d_enqueue_us += h;
        hb.page_ins += fresh.len() as u32;
        hb.launch_us += (lap(clock) - c - h).max(0.0);
        Ok(())
    }

    /// Before group `g`'s expert kernels: the compute stream waits for the off-critical-path
    /// copies of the units its GPU keys read that no kernel has waited for yet.
    fn wait_background(
        &mut self,
        g: &ReplayGroup,
        compute: &Arc<CudaStream>,
    ) -> Result<(), ReplayError> {
        for &k in &g.keys {
            for u in self.map.units_of(k) {
                if let Some(gb) = self.bg_pending[u as usize].take() {
                    if let Some(e) = &self.bg_events[gb] {
                        compute.wait(e).during("stream wait")?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Before decommitting unit `u`: its off-critical-path copy, if still pending, is done.
    fn settle_background(&mut self, u: u32) -> Result<(), ReplayError> {
        if let Some(gb) = self.bg_pending[u as usize].take() {
            if let Some(e) = &self.bg_events[gb] {
                e.synchronize().during("wait for a background copy")?;
            }
        }
        Ok(())
    }

    /// Preloaded units (static pins) are committed before timing, never page-ins.
    fn preload(&mut self, compute: &Arc<CudaStream>) -> Result<(), ReplayError> {
        let plan = self.plan;
        self.page_in(&plan.preloaded)?;
        for &u in &plan.preloaded {
            self.resident[u as usize] = true;
        }
        if plan.paging == Paging::Os && !plan.preloaded.is_empty() {
            self.prefetch_os(&plan.preloaded, true, compute)?;
        }
        Ok(())
    }

    /// Evictions of units resident before group `g`, first (critical path); the units `g`
    /// pages in and evicts itself go to `late`.
    fn evict_before(
        &mut self,
        g: &ReplayGroup,
        late: &mut Vec<u32>,
        hb: &mut HostBreakdown,
        clock: &mut Instant,
    ) -> Result<(), ReplayError> {
        late.clear();
        let mut early: Vec<u32> = Vec::new();
        for &u in &g.evicted {
            if self.resident[u as usize] {
                self.resident[u as usize] = false;
                early.push(u);
            } else {
                late.push(u);
            }
        }
        self.evict(&early, None)?;
        hb.evict_us += lap(clock);
        hb.evictions += g.evicted.len() as u32;
        Ok(())
    }

    /// Demand page-ins of group `g`: VMM commit + async copy per unit; OS pages fault in the
    /// kernels. Returns whether any unit was paged in (copies to wait for, under VMM).
    fn page_in_group(
        &mut self,
        g: &ReplayGroup,
        hb: &mut HostBreakdown,
        clock: &mut Instant,
    ) -> Result<bool, ReplayError> {
        let fresh: Vec<u32> = g
            .page_ins
            .iter()
            .copied()
            .filter(|&u| !self.resident[u as usize])
            .collect();
        let (c0, h0) = (self.commit_us, self.h2d_enqueue_us);
        let runs0 = (
            self.commit_runs,
            self.commit_runs_after_release,
            self.released_before_runs_granules,
            self.release_gap_us,
        );
        self.page_in(&fresh)?;
        let (c, h) = (self.commit_us - c0, self.h2d_enqueue_us - h0);
        hb.commit_runs += self.commit_runs - runs0.0;
        hb.commit_runs_after_release += self.commit_runs_after_release - runs0.1;
        hb.released_before_runs_granules += self.released_before_runs_granules - runs0.2;
        hb.release_gap_us += self.release_gap_us - runs0.3;
        hb.commit_us += c;
        hb.h2d_enqueue_us += h;
        hb.page_ins += g.page_ins.len() as u32;
        // the page-in loop's own bookkeeping counts with the launches
        hb.launch_us += (lap(clock) - c - h).max(0.0);
        for &u in &g.page_ins {
            self.resident[u as usize] = true;
        }
        Ok(!fresh.is_empty())
    }

    /// Decommit everything still mapped before the reservation goes.
    fn evict_all(&mut self) -> Result<(), ReplayError> {
        let still: Vec<u32> = (0..self.map.units.len() as u32)
            .filter(|&u| self.resident[u as usize])
            .collect();
        self.evict(&still, None)
    }

    /// Units paged in and evicted within a group (`late`): once its kernels (`experts_done`)
    /// are done.
    fn evict_late(
        &mut self,
        late: &[u32],
        experts_done: &CudaEvent,
        hb: &mut HostBreakdown,
        clock: &mut Instant,
    ) -> Result<(), ReplayError> {
        if !late.is_empty() {
            for &u in late {
                self.resident[u as usize] = false;
            }
            // VMM: the host waits for the kernels, then decommits; OS pages: the side stream
            // waits for them (no host wait)
            let after = match self.plan.paging {
                Paging::Vmm => {
                    experts_done
                        .synchronize()
                        .during("wait for the group's kernels")?;
                    None
                }
                Paging::Os => Some(experts_done),
            };
            hb.late_wait_us += lap(clock);
            self.evict(late, after)?;
            hb.late_evict_us += lap(clock);
        }
        Ok(())
    }

    /// VMM: commit each unit and enqueue its H2D copy; OS pages: nothing (faulted on access).
    fn page_in(&mut self, units: &[u32]) -> Result<(), ReplayError> {
        let Some(bank) = self.bank.as_mut() else {
            return Ok(());
        };
        let src = self.staging_ptr.expect("VMM replays have a staging buffer");
        if !units.is_empty() {
            self.commit_runs += 1;
            if self.released_since_commit > 0 {
                self.commit_runs_after_release += 1;
                self.released_before_runs_granules += self.released_since_commit;
                if let Some(t) = self.last_release {
                    self.release_gap_us += t.elapsed().as_secs_f64() * 1e6;
                }
            }
            self.released_since_commit = 0;
        }
        for &u in units {
            let info = &self.map.units[u as usize];
            let va = self.base + self.layout.unit_offset[u as usize];
            let t = Instant::now();
            self.map_calls += bank.commit(u as usize, va, info.committed_bytes)?;
            let t1 = Instant::now();
            self.commit_us += t1.duration_since(t).as_secs_f64() * 1e6;
            // SAFETY: va..va+useful is mapped read-write above; src holds >= useful pinned bytes.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    va,
                    src as *const _,
                    info.useful_bytes as usize,
                    self.copy.cu_stream(),
                )
            }
            .result()
            .during("cuMemcpyHtoDAsync")?;
            self.h2d_enqueue_us += t1.elapsed().as_secs_f64() * 1e6;
            self.bytes_copied += info.useful_bytes;
        }
        Ok(())
    }

    /// Evict `units`: VMM unmap + release (after `after` completes, when given); OS pages are
    /// migrated back to host memory on the side stream (after `after`).
    fn evict(&mut self, units: &[u32], after: Option<&CudaEvent>) -> Result<(), ReplayError> {
        if units.is_empty() {
            return Ok(());
        }
        match self.plan.paging {
            Paging::Vmm => {
                if let Some(e) = after {
                    e.synchronize().during("wait for the group's kernels")?;
                }
                for &u in units {
                    self.settle_background(u)?;
                }
                let bank = self.bank.as_mut().expect("VMM replays have a bank");
                for &u in units {
                    let va = self.base + self.layout.unit_offset[u as usize];
                    let g = bank.decommit(u as usize, va)?;
                    self.unmap_calls += g;
                    self.released_since_commit += g;
                }
                self.last_release = Some(Instant::now());
                Ok(())
            }
            Paging::Os => {
                if let Some(e) = after {
                    self.side.wait(e).during("stream wait")?;
                }
                let side = self.side.clone();
                self.prefetch_os(units, false, &side)
            }
        }
    }

    /// cuMemPrefetchAsync of the pages of `units` (coalesced into runs) to the device
    /// (`to_device`) or back to host memory, on `stream`.
    fn prefetch_os(
        &mut self,
        units: &[u32],
        to_device: bool,
        stream: &Arc<CudaStream>,
    ) -> Result<(), ReplayError> {
        let loc = if to_device {
            sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.device,
            }
        } else {
            sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
                id: 0,
            }
        };
        let page = self.map.granule_bytes;
        for (first, n) in runs(units) {
            let at = self.base + self.layout.unit_offset[first as usize];
            // SAFETY: the range lies inside the managed bank.
            unsafe {
                sys::cuMemPrefetchAsync_v2(
                    at,
                    (n as u64 * page) as usize,
                    loc,
                    0,
                    stream.cu_stream(),
                )
            }
            .result()
            .during("cuMemPrefetchAsync")?;
            if !to_device {
                self.os_evict_calls += 1;
            }
        }
        Ok(())
    }
}
