//! What a blocked validation measures before and after each block of replays: a host probe
//! (the host's time to issue one group's launches, the same calls the replay times as
//! `launch_us`, with no VMM work among them), a small VMM arm (commits, H2D copies and
//! decommits of one unit size) and the host's state ([`HostContext`]).
//!
//! The stored H200 replays' error followed the host's state (the per-repetition launch time
//! explained r^2 0.72-0.90 of the VMM rows' error, issue 22): a probe bracketing every block
//! lets the analysis regress each block's bias on it; the VMM arm prices the driver's calls in
//! that state, beside the replay's own.

use crate::host_context::{GpuContext, HostContext};
use crate::replay::{Pinned, ReplayError};
use crate::replay_plan::kernel_geometry;
use crate::stats::Summary;
use crate::vmm;
use cudarc::driver::{sys, CudaContext, CudaEvent, DevicePtr, DriverError};
use kernels::{Kernels, Variant};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// Groups the host probe issues: one Qwen3-30B-A3B step's MoE layers (48), so the probe's
/// mean has as many terms as a step of the replays it brackets. Chosen, not measured.
pub const PROBE_GROUPS: u32 = 48;
/// Granules of the VMM arm's unit: 8 (16 MiB), the granite 16 MiB expert's `e1` unit of the
/// stored replays. Chosen, not measured.
pub const ARM_UNIT_GRANULES: u32 = 8;
/// Commit / copy / decommit cycles of the VMM arm: 16, about 10 ms on the H200 (a 16 MiB
/// unit commits in about 350 µs and decommits in about 260 µs, profile h200-linux), short
/// beside a block of replays. Chosen, not measured.
pub const ARM_CYCLES: u32 = 16;
/// Expert bytes of the probe's kernels: hidden 2048 (Qwen3-30B-A3B), one 2 MiB granule.
const PROBE_HIDDEN: usize = 2048;
const PROBE_EXPERT_BYTES: u64 = 2 << 20;

/// One probe: the host's launch time, the VMM arm, and the host's state when it ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockProbe {
    /// Host time to issue one group's launches, µs, mean over [`PROBE_GROUPS`] groups: event
    /// records, the compute stream's wait on the copy stream, the expert kernels and the next
    /// non-expert kernel (the calls of the replay's `launch_us`, no VMM call among them).
    pub launch_us_per_group: f64,
    /// Groups it averaged.
    pub groups: u32,
    /// The VMM arm (absent when its calls failed: the probe still records the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm: Option<VmmArm>,
    /// The host's state at the probe.
    pub host: HostContext,
}

/// The VMM arm: `cycles` x (commit one unit of `unit_granules` granules, copy its bytes H2D
/// from pinned memory, decommit it), each call sequence timed on the host (the copy with CUDA
/// events on its stream).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VmmArm {
    /// Granules of the unit.
    pub unit_granules: u32,
    /// Bytes of one granule.
    pub granule_bytes: u64,
    /// Cycles timed.
    pub cycles: u32,
    /// Commit (cuMemCreate + cuMemMap + cuMemSetAccess per granule), µs per granule, over the
    /// cycles.
    pub commit_us_per_granule: Summary,
    /// Decommit (cuMemUnmap + cuMemRelease per granule), µs per granule.
    pub decommit_us_per_granule: Summary,
    /// One H2D copy of the unit's bytes (`unit_granules x granule_bytes`), µs.
    pub h2d_us: Summary,
}

/// Runs one probe on device `ordinal`. Errors: no driver or NVRTC, or a failing launch (a
/// failing VMM arm leaves `vmm` absent instead).
pub fn block_probe(ordinal: usize) -> Result<BlockProbe, ReplayError> {
    let ctx = kernels::open_device(ordinal)?;
    let host = HostContext {
        gpu: Some(GpuContext::read(&ctx)),
        ..HostContext::read()
    };
    let launch_us_per_group = launch_probe(&ctx)?;
    let vmm = vmm_arm(&ctx, ordinal as i32).ok();
    Ok(BlockProbe {
        launch_us_per_group,
        groups: PROBE_GROUPS,
        vmm,
        host,
    })
}

/// The host time of [`PROBE_GROUPS`] groups' launches, µs per group. Each group waits for the
/// previous one's router event first (untimed), as the replay's router wait does.
fn launch_probe(ctx: &Arc<CudaContext>) -> Result<f64, ReplayError> {
    let d = |step| move |source| ReplayError::Driver { step, source };
    let k = Kernels::load(ctx)?;
    let compute = ctx.new_stream().map_err(d("probe stream"))?;
    let copy = ctx.new_stream().map_err(d("probe stream"))?;
    let geom = kernel_geometry(PROBE_HIDDEN, PROBE_EXPERT_BYTES)
        .ok_or_else(|| ReplayError::Invalid("no probe kernel geometry".into()))?;
    let w = compute
        .alloc_zeros::<u8>(geom.expert_stride())
        .map_err(d("probe expert"))?;
    let ne = compute
        .alloc_zeros::<u8>(PROBE_EXPERT_BYTES as usize)
        .map_err(d("probe weights"))?;
    let mut sink = compute.alloc_zeros::<u32>(1).map_err(d("probe sink"))?;
    let p = {
        let (p, _g) = w.device_ptr(&compute);
        p
    };
    let x = vec![0.01f32; geom.hidden];
    let mut l = k.prepare_moe(&compute, geom, Variant::PerSlot, &[p], &[0], &x)?;
    let ev = |ctx: &Arc<CudaContext>| -> Result<CudaEvent, ReplayError> {
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(d("probe event"))
    };
    let (router, copies, experts) = (ev(ctx)?, ev(ctx)?, ev(ctx)?);
    // first launches (module load) outside the timing
    k.launch_moe(&compute, &mut l)?;
    k.launch_stream_read(&compute, &ne, &mut sink)?;
    router.record(&compute).map_err(d("probe event"))?;
    let mut total = 0.0;
    for _ in 0..PROBE_GROUPS {
        router.synchronize().map_err(d("probe router wait"))?;
        let t = Instant::now();
        copies.record(&copy).map_err(d("probe event"))?;
        compute.wait(&copies).map_err(d("probe stream wait"))?;
        k.launch_moe(&compute, &mut l)?;
        experts.record(&compute).map_err(d("probe event"))?;
        k.launch_stream_read(&compute, &ne, &mut sink)?;
        router.record(&compute).map_err(d("probe event"))?;
        total += t.elapsed().as_secs_f64() * 1e6;
    }
    compute.synchronize().map_err(d("probe synchronize"))?;
    Ok(total / PROBE_GROUPS as f64)
}

/// [`ARM_CYCLES`] cycles of commit, H2D copy and decommit of one [`ARM_UNIT_GRANULES`]-granule
/// unit at a reserved address, nothing else mapped by the arm.
fn vmm_arm(ctx: &Arc<CudaContext>, device: i32) -> Result<VmmArm, ReplayError> {
    let d = |step| move |source: DriverError| ReplayError::Driver { step, source };
    let (granule, _) = vmm::granularity(device).map_err(d("cuMemGetAllocationGranularity"))?;
    let g = ARM_UNIT_GRANULES as usize;
    let bytes = g * granule;
    let res = vmm::Reservation::new(bytes, granule).map_err(d("cuMemAddressReserve"))?;
    let staging = Pinned::new(bytes)?;
    let copy = ctx.new_stream().map_err(d("arm stream"))?;
    let ev = || {
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(d("arm event"))
    };
    let (c0, c1) = (ev()?, ev()?);
    let (mut commit, mut decommit, mut h2d) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ARM_CYCLES {
        let t = Instant::now();
        let mut hs = Vec::with_capacity(g);
        for i in 0..g {
            let at = res.base + (i * granule) as u64;
            let h = vmm::create(granule, device).map_err(d("cuMemCreate"))?;
            vmm::map(at, granule, h).map_err(d("cuMemMap"))?;
            vmm::set_access(at, granule, device).map_err(d("cuMemSetAccess"))?;
            hs.push((at, h));
        }
        commit.push(t.elapsed().as_secs_f64() * 1e6 / g as f64);
        c0.record(&copy).map_err(d("event record"))?;
        // SAFETY: base..base+bytes is mapped read-write above; staging holds `bytes` pinned bytes.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(res.base, staging.ptr as *const _, bytes, copy.cu_stream())
        }
        .result()
        .map_err(d("cuMemcpyHtoDAsync"))?;
        c1.record(&copy).map_err(d("event record"))?;
        c1.synchronize().map_err(d("arm copy"))?;
        h2d.push(c0.elapsed_ms(&c1).map_err(d("event elapsed"))? as f64 * 1e3);
        let t = Instant::now();
        for (at, h) in hs {
            vmm::unmap(at, granule).map_err(d("cuMemUnmap"))?;
            vmm::release(h).map_err(d("cuMemRelease"))?;
        }
        decommit.push(t.elapsed().as_secs_f64() * 1e6 / g as f64);
    }
    let summary =
        |v: &[f64]| Summary::of(v).ok_or_else(|| ReplayError::Invalid("no arm sample".into()));
    Ok(VmmArm {
        unit_granules: ARM_UNIT_GRANULES,
        granule_bytes: granule as u64,
        cycles: ARM_CYCLES,
        commit_us_per_granule: summary(&commit)?,
        decommit_us_per_granule: summary(&decommit)?,
        h2d_us: summary(&h2d)?,
    })
}
