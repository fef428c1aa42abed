//! Calibration arms for two interferences the replay has and the other arms lack
//! (docs/history/calibration.md, "Interference arms"):
//! - VMM page-ins and evictions after kernels have READ the live set: in an LRU replay the
//!   expert kernels read the resident units between page-in cycles, and the same units'
//!   commits cost 6-40% more (decommits 8-63%) than in a streaming replay, which no arm with an
//!   unread live set reproduced (live-mapping count, footprint growth, busy GPU);
//! - demand faults of one group's experts while the previous group's experts migrate back to
//!   host memory (cuMemPrefetchAsync on a side stream), as a streaming `os*` replay does it.

use super::{summary, time_events, CalibrateError, Step, MIB};
use crate::calibrate::paging_arms::FAULT_GEOMETRIES;
use crate::replay_plan::kernel_geometry;
use crate::stats::Summary;
use crate::vmm;
use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use kernels::{ExpertGeometry, Kernels, Variant};
use rand::seq::{index, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// What the GPU reads between two page-in cycles of the read-live-set arm. Every mode starts
/// from a fresh live set (committed, never read), so no mode inherits another's reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadMode {
    /// Nothing: no kernel runs (the other arms' state).
    None,
    /// A streaming read of an unrelated cuMemAlloc buffer of the live set's bytes, one launch
    /// per live unit's worth (as many launches and bytes as `All`, none of the live set).
    Other,
    /// A streaming read of the units the previous cycle committed only (as a group's kernels
    /// read its page-ins); the rest of the live set is never read.
    Few,
    /// The live set read once after it is committed, then per cycle as `Few`: the state of an
    /// LRU replay, whose resident units were each read by the group that paged them in, and
    /// whose groups read a few of them.
    OnceThenFew,
    /// A streaming read of every live unit (one launch per unit) before every cycle.
    All,
    /// As `All`, but the commits are issued while the reads still run (no synchronize before
    /// them; the decommits wait for the reads, since they unmap units being read). The other
    /// modes synchronize before the VMM calls, as the replay waits on the router event.
    AllInFlight,
}

/// Read modes of the arm, in their base order (rotated per unit size and live-set level).
pub const READ_MODES: [ReadMode; 6] = [
    ReadMode::None,
    ReadMode::Other,
    ReadMode::Few,
    ReadMode::OnceThenFew,
    ReadMode::All,
    ReadMode::AllInFlight,
];
/// Units committed (and as many live units decommitted) per cycle: a group's page-ins (top-8).
pub const READ_CYCLE_UNITS: usize = 8;
/// Cycles per mode and repetition.
pub const READ_CYCLES: usize = 2;
/// Unit slots per layer of the arm's range: Qwen3-30B-A3B has 128 experts per layer.
pub const READ_LAYER_SLOTS: usize = 128;
/// Unit sizes, granules: Qwen3-30B-A3B int4 `e1` (2) and granite at 16 MiB `e1` (8).
pub const READ_GRANULES: [u64; 2] = [2, 8];
/// Live-set sizes, granules (the live units fill half the slots of as many layers as needed;
/// the Qwen3-30B-A3B `e1` LRU 50% replay maps up to about 4500 granules in its 12 steps).
pub const READ_LIVE_GRANULES: [u64; 2] = [1024, 4096];
/// Seed of the arm's placement and victims (a design choice).
pub const READ_SEED: u64 = 13;

/// One (unit size, live set, read mode) point: host time per unit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReadPageInPoint {
    /// Granules per unit.
    pub granules: u64,
    /// Units mapped (live) while measuring.
    pub live_units: u64,
    /// What the GPU read between cycles.
    pub mode: ReadMode,
    /// Units committed (and decommitted) per repetition.
    pub units: u32,
    /// cuMemCreate + cuMemMap + cuMemSetAccess per granule, µs per unit (host clock).
    pub commit_us: Summary,
    /// cuMemcpyHtoDAsync enqueue of the unit's bytes, µs per unit.
    pub h2d_enqueue_us: Summary,
    /// cuMemUnmap + cuMemRelease per granule of a live unit (a victim), µs per unit.
    pub decommit_us: Summary,
}

/// Live units of the arm: per slot, the granules' (address, handle) while mapped.
struct LiveSet {
    base: u64,
    unit_bytes: u64,
    granule: u64,
    dev: i32,
    slots: Vec<Vec<(u64, sys::CUmemGenericAllocationHandle)>>,
    live: Vec<usize>,
}

impl LiveSet {
    fn addr(&self, slot: usize) -> u64 {
        self.base + slot as u64 * self.unit_bytes
    }
    fn commit(&mut self, slot: usize) -> Result<(), CalibrateError> {
        let at0 = self.addr(slot);
        let g = self.unit_bytes / self.granule;
        for i in 0..g {
            let at = at0 + i * self.granule;
            let h = vmm::create(self.granule as usize, self.dev).during("cuMemCreate")?;
            vmm::map(at, self.granule as usize, h).during("cuMemMap")?;
            vmm::set_access(at, self.granule as usize, self.dev).during("cuMemSetAccess")?;
            self.slots[slot].push((at, h));
        }
        self.live.push(slot);
        Ok(())
    }
    /// Decommits the unit at `slot` (must be live).
    fn decommit(&mut self, slot: usize) -> Result<(), CalibrateError> {
        for (at, h) in std::mem::take(&mut self.slots[slot]) {
            vmm::unmap(at, self.granule as usize).during("cuMemUnmap")?;
            vmm::release(h).during("cuMemRelease")?;
        }
        self.live.retain(|&s| s != slot);
        Ok(())
    }
    fn release_all(&mut self) {
        for hs in &mut self.slots {
            for (at, h) in hs.drain(..) {
                let _ = vmm::unmap(at, self.granule as usize);
                let _ = vmm::release(h);
            }
        }
        self.live.clear();
    }
}

/// What a read-arm cycle needs besides the live set.
struct ReadRig<'a> {
    k: &'a Kernels,
    compute: &'a Arc<CudaStream>,
    copy: &'a Arc<CudaStream>,
    staging: *mut std::ffi::c_void,
    sink: &'a mut CudaSlice<u32>,
    /// Base of the unrelated buffer `ReadMode::Other` reads (at least the live set's bytes).
    other: u64,
}

/// The read-live-set arm. Per unit size g and live-set size: a range of `layers x 128` unit
/// slots (as many layers as hold the live units at half occupancy). Per read mode (order
/// rotating with the size and level): the live units committed at seeded random slots (read
/// once by one launch per unit for `OnceThenFew`), then `reps + 1` x [`READ_CYCLES`] cycles
/// (the first [`READ_CYCLES`] discarded) of: the mode's reads; [`READ_CYCLE_UNITS`] units
/// committed at random free slots of one random layer, each followed by its H2D enqueue from
/// pinned memory on a copy stream (as the page-in arm and the replay do); copies and reads
/// finished; then as many random live units of earlier cycles decommitted (the live count
/// stays constant); then everything released. Host clock.
pub(crate) fn measure_read_page_in(
    ctx: &Arc<CudaContext>,
    k: &Kernels,
    granule: usize,
    vram_free: u64,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<ReadPageInPoint>, CalibrateError> {
    let dev = ctx.ordinal() as i32;
    let sizes: &[u64] = if quick {
        &READ_GRANULES[..1]
    } else {
        &READ_GRANULES
    };
    let levels: &[u64] = if quick {
        &READ_LIVE_GRANULES[..1]
    } else {
        &READ_LIVE_GRANULES
    };
    // keep the live set and the unrelated buffer under a quarter of free VRAM each
    let levels: Vec<u64> = levels
        .iter()
        .copied()
        .filter(|&l| l * granule as u64 <= vram_free / 4)
        .collect();
    let Some(&top) = levels.iter().max() else {
        return Err(CalibrateError::Other(
            "read arm: no live-set level fits a quarter of free VRAM".into(),
        ));
    };
    let compute = ctx.new_stream().during("read arm compute stream")?;
    let copy = ctx.new_stream().during("read arm copy stream")?;
    let mut sink = compute.alloc_zeros::<u32>(1).during("sink")?;
    let other = compute
        .alloc_zeros::<u8>(top as usize * granule)
        .during("read arm unrelated buffer")?;
    let other_ptr = {
        let (p, _g) = other.device_ptr(&compute);
        p
    };
    let gmax = *sizes.iter().max().expect("sizes") as usize;
    let mut staging = std::ptr::null_mut();
    // SAFETY: valid out-pointer; freed below.
    unsafe { sys::cuMemHostAlloc(&mut staging, gmax * granule, 0) }
        .result()
        .during("cuMemHostAlloc")?;
    let mut rig = ReadRig {
        k,
        compute: &compute,
        copy: &copy,
        staging,
        sink: &mut sink,
        other: other_ptr,
    };
    let mut rng = Pcg64::seed_from_u64(READ_SEED);
    let mut out = Vec::new();
    let mut config = 0usize;
    let result = (|| -> Result<(), CalibrateError> {
        for &g in sizes {
            for &level in &levels {
                let n_live = (level / g) as usize;
                let layers = (2 * n_live).div_ceil(READ_LAYER_SLOTS).max(2);
                let nslots = layers * READ_LAYER_SLOTS;
                let unit_bytes = g * granule as u64;
                let res = vmm::Reservation::new(nslots * unit_bytes as usize, granule)
                    .during("cuMemAddressReserve")?;
                let mut set = LiveSet {
                    base: res.base,
                    unit_bytes,
                    granule: granule as u64,
                    dev,
                    slots: vec![Vec::new(); nslots],
                    live: Vec::new(),
                };
                let mut points = Vec::new();
                for j in 0..READ_MODES.len() {
                    let mode = READ_MODES[(j + config) % READ_MODES.len()];
                    let r = run_read_mode(&mut set, &mut rng, &mut rig, mode, n_live, layers, reps);
                    let _ = compute.synchronize();
                    let _ = copy.synchronize();
                    set.release_all();
                    points.push(r?);
                }
                config += 1;
                drop(res);
                points.sort_by_key(|p| READ_MODES.iter().position(|&m| m == p.mode));
                for p in points {
                    log(&format!(
                        "read arm, {g}-granule units, {} live ({} granules), reads {:?}: commit {:.1}, H2D enqueue {:.1}, decommit {:.1} µs per unit",
                        p.live_units,
                        p.live_units * g,
                        p.mode,
                        p.commit_us.median,
                        p.h2d_enqueue_us.median,
                        p.decommit_us.median
                    ));
                    out.push(p);
                }
            }
        }
        Ok(())
    })();
    let _ = copy.synchronize();
    let _ = compute.synchronize();
    // SAFETY: allocated by cuMemHostAlloc above, freed once, no copy in flight.
    let _ = unsafe { sys::cuMemFreeHost(staging) };
    // keep the points measured before a failure
    match result {
        Err(e) if !out.is_empty() => {
            log(&format!("read arm stopped early, points so far kept: {e}"));
            Ok(out)
        }
        Err(e) => Err(e),
        Ok(()) => Ok(out),
    }
}

/// One read mode at one unit size and live-set level of [`measure_read_page_in`], on a fresh
/// live set (`set` holds nothing on entry; the caller releases it after).
fn run_read_mode(
    set: &mut LiveSet,
    rng: &mut Pcg64,
    rig: &mut ReadRig,
    mode: ReadMode,
    n_live: usize,
    layers: usize,
    reps: u32,
) -> Result<ReadPageInPoint, CalibrateError> {
    let (k, compute, copy) = (rig.k, rig.compute, rig.copy);
    let nslots = layers * READ_LAYER_SLOTS;
    for slot in index::sample(rng, nslots, n_live).into_vec() {
        set.commit(slot)?;
    }
    if mode == ReadMode::OnceThenFew {
        for &s in &set.live {
            k.launch_stream_read_range(compute, set.addr(s), set.unit_bytes, rig.sink)?;
        }
        compute.synchronize().during("read arm first read")?;
    }
    let mut samples = (Vec::new(), Vec::new(), Vec::new());
    let mut last: Vec<usize> = Vec::new();
    for cycle in 0..(reps as usize + 1) * READ_CYCLES {
        // reads
        match mode {
            ReadMode::None => {}
            ReadMode::Other => {
                for i in 0..set.live.len() as u64 {
                    let at = rig.other + i * set.unit_bytes;
                    k.launch_stream_read_range(compute, at, set.unit_bytes, rig.sink)?;
                }
            }
            ReadMode::Few | ReadMode::OnceThenFew => {
                for &s in &last {
                    k.launch_stream_read_range(compute, set.addr(s), set.unit_bytes, rig.sink)?;
                }
            }
            ReadMode::All | ReadMode::AllInFlight => {
                for &s in &set.live {
                    k.launch_stream_read_range(compute, set.addr(s), set.unit_bytes, rig.sink)?;
                }
            }
        }
        if mode != ReadMode::AllInFlight {
            compute.synchronize().during("read arm reads")?;
        }
        // commits at free slots of one random layer
        let new = loop {
            let layer = rng.gen_range(0..layers);
            let free: Vec<usize> = (layer * READ_LAYER_SLOTS..(layer + 1) * READ_LAYER_SLOTS)
                .filter(|&s| set.slots[s].is_empty())
                .collect();
            if free.len() >= READ_CYCLE_UNITS {
                break index::sample(rng, free.len(), READ_CYCLE_UNITS)
                    .iter()
                    .map(|i| free[i])
                    .collect::<Vec<_>>();
            }
        };
        let (mut c, mut e) = (0.0, 0.0);
        for &s in &new {
            let t = Instant::now();
            set.commit(s)?;
            let t1 = Instant::now();
            // SAFETY: the unit is mapped read-write above; staging holds >= g granules.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    set.addr(s),
                    rig.staging as *const _,
                    set.unit_bytes as usize,
                    copy.cu_stream(),
                )
            }
            .result()
            .during("cuMemcpyHtoDAsync")?;
            c += t1.duration_since(t).as_secs_f64() * 1e6;
            e += t1.elapsed().as_secs_f64() * 1e6;
        }
        copy.synchronize().during("read arm copies")?;
        compute.synchronize().during("read arm reads")?;
        // victims: random live units not committed by this cycle
        let mut old: Vec<usize> = set
            .live
            .iter()
            .copied()
            .filter(|s| !new.contains(s))
            .collect();
        old.shuffle(rng);
        let t = Instant::now();
        for &s in old.iter().take(READ_CYCLE_UNITS) {
            set.decommit(s)?;
        }
        let d = t.elapsed().as_secs_f64() * 1e6;
        last = new;
        if cycle >= READ_CYCLES {
            let n = READ_CYCLE_UNITS as f64;
            samples.0.push(c / n);
            samples.1.push(e / n);
            samples.2.push(d / n);
        }
    }
    Ok(ReadPageInPoint {
        granules: set.unit_bytes / set.granule,
        live_units: n_live as u64,
        mode,
        units: (reps as usize * READ_CYCLES * READ_CYCLE_UNITS) as u32,
        commit_us: summary(&samples.0)?,
        h2d_enqueue_us: summary(&samples.1)?,
        decommit_us: summary(&samples.2)?,
    })
}

/// Experts faulted (and, in the overlapped trial, evicted) per launch: a group's top-8.
pub const EVICT_OVERLAP_K: usize = 8;

/// Faults of k experts in one launch, alone and while k other experts migrate back to host.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultEvictPoint {
    /// Kernel geometry: hidden x ffn (int4).
    pub hidden: usize,
    /// FFN width of the geometry.
    pub ffn: usize,
    /// Bytes the kernels read per expert.
    pub expert_bytes: u64,
    /// Bytes of one expert's pages (4 KiB-aligned run).
    pub run_bytes: u64,
    /// Experts faulted by the launch (and experts evicted meanwhile).
    pub experts: u32,
    /// The faulted launch with nothing else running, µs (CUDA events).
    pub alone_us: Summary,
    /// The same launch on k other fresh experts while k device-resident experts are migrated
    /// back to the host on a side stream (enqueued just before), µs.
    pub overlapped_us: Summary,
    /// Per repetition, overlapped - alone, µs: the interference.
    pub extra_us: Summary,
    /// Host time of the k cuMemPrefetchAsync (to host) calls, µs for all k.
    pub evict_host_us: Summary,
    /// The evictions' time on the side stream (CUDA events), µs for all k.
    pub evict_stream_us: Summary,
}

/// The fault-eviction overlap arm: per geometry of [`FAULT_GEOMETRIES`] and repetition, one
/// managed buffer of 4 k experts written by the host (every page host-resident), sets A, B,
/// C, D of k experts. Alone trial: a launch faults in A (untimed), then the launch over B is
/// timed. Overlapped trial: a launch faults in C (untimed), then cuMemPrefetchAsync of each of
/// C's experts to the host is enqueued on a side stream (as the replay evicts, one call per
/// expert) and the launch over D is timed on the compute stream. Trial order alternates with
/// the repetition.
pub(crate) fn measure_fault_evict_overlap(
    ctx: &Arc<CudaContext>,
    k: &Kernels,
    reps: u32,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<FaultEvictPoint>, CalibrateError> {
    let stream = ctx.new_stream().during("overlap arm compute stream")?;
    let side = ctx.new_stream().during("overlap arm eviction stream")?;
    let n = EVICT_OVERLAP_K;
    let mut out = Vec::new();
    for &(hidden, expert_bytes) in &FAULT_GEOMETRIES {
        let geom = kernel_geometry(hidden, expert_bytes).ok_or_else(|| {
            CalibrateError::Other(format!(
                "no int4 kernel geometry of hidden {hidden} fits {expert_bytes} B"
            ))
        })?;
        let stride = (expert_bytes as usize).div_ceil(4096) * 4096;
        let bytes = 4 * n * stride;
        let x = vec![0.01f32; geom.hidden];
        // alone, overlapped, extra, host, side stream
        let mut s: [Vec<f64>; 5] = Default::default();
        for r in 0..=reps {
            let mut p = 0;
            // SAFETY: valid out-pointer; freed below.
            unsafe {
                sys::cuMemAllocManaged(&mut p, bytes, 1 /* GLOBAL */)
            }
            .result()
            .during("cuMemAllocManaged (overlap arm)")?;
            let run = overlap_trials(ctx, k, (&stream, &side), geom, (p, stride), &x, r);
            let _ = stream.synchronize();
            let _ = side.synchronize();
            // SAFETY: allocated above, freed once; both streams synchronized.
            unsafe { sys::cuMemFree_v2(p) }
                .result()
                .during("cuMemFree managed")?;
            let (alone, over, host_us, side_us) = run?;
            if r > 0 {
                s[0].push(alone);
                s[1].push(over);
                s[2].push(over - alone);
                s[3].push(host_us);
                s[4].push(side_us);
            }
        }
        let pt = FaultEvictPoint {
            hidden: geom.hidden,
            ffn: geom.ffn,
            expert_bytes: geom.expert_bytes() as u64,
            run_bytes: stride as u64,
            experts: n as u32,
            alone_us: summary(&s[0])?,
            overlapped_us: summary(&s[1])?,
            extra_us: summary(&s[2])?,
            evict_host_us: summary(&s[3])?,
            evict_stream_us: summary(&s[4])?,
        };
        log(&format!(
            "faults of {n} experts of {} B ({:.1} MiB runs) in one launch: alone {:.1} µs, while {n} others go back to the host {:.1} µs (extra {:+.1}); eviction calls {:.1} µs host, {:.1} µs on their stream",
            pt.expert_bytes,
            stride as f64 / MIB as f64,
            pt.alone_us.median,
            pt.overlapped_us.median,
            pt.extra_us.median,
            pt.evict_host_us.median,
            pt.evict_stream_us.median
        ));
        out.push(pt);
    }
    Ok(out)
}

/// One repetition `r` of the overlap arm on the managed buffer at `p` (experts `stride`
/// bytes apart): the alone and overlapped trials, in the order the repetition alternates;
/// returns (alone, overlapped, host time of the eviction calls, their time on the side
/// stream), µs.
fn overlap_trials(
    ctx: &Arc<CudaContext>,
    k: &Kernels,
    (stream, side): (&Arc<CudaStream>, &Arc<CudaStream>),
    geom: ExpertGeometry,
    (p, stride): (u64, usize),
    x: &[f32],
    r: u32,
) -> Result<(f64, f64, f64, f64), CalibrateError> {
    let n = EVICT_OVERLAP_K;
    let bytes = 4 * n * stride;
    let host = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
        id: 0,
    };
    let set = |i: usize| -> Vec<u64> {
        (i * n..(i + 1) * n)
            .map(|e| p + (e * stride) as u64)
            .collect()
    };
    let mut l = Vec::new();
    for i in 0..4 {
        l.push(k.prepare_moe(stream, geom, Variant::PerSlot, &set(i), &vec![0u32; n], x)?);
    }
    stream.synchronize().during("prepare overlap launches")?;
    // SAFETY: managed memory is host-accessible, no kernel running.
    unsafe { std::ptr::write_bytes(p as *mut u8, 0x11, bytes) };
    let (mut alone, mut over, mut host_us, mut side_us) = (0.0, 0.0, 0.0, 0.0);
    for trial in 0..2 {
        if (trial + r as usize).is_multiple_of(2) {
            k.launch_moe(stream, &mut l[0])?;
            stream.synchronize().during("fault in A")?;
            alone = time_events(ctx, stream, &mut || Ok(k.launch_moe(stream, &mut l[1])?))?;
        } else {
            k.launch_moe(stream, &mut l[2])?;
            stream.synchronize().during("fault in C")?;
            let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
            let a = ctx.new_event(flags).during("event create")?;
            let b = ctx.new_event(flags).during("event create")?;
            a.record(side).during("event record")?;
            let t = Instant::now();
            for &e in &set(2) {
                // SAFETY: the range lies inside the managed buffer.
                unsafe { sys::cuMemPrefetchAsync_v2(e, stride, host, 0, side.cu_stream()) }
                    .result()
                    .during("cuMemPrefetchAsync to the host")?;
            }
            host_us = t.elapsed().as_secs_f64() * 1e6;
            b.record(side).during("event record")?;
            over = time_events(ctx, stream, &mut || Ok(k.launch_moe(stream, &mut l[3])?))?;
            b.synchronize().during("eviction stream")?;
            side_us = a.elapsed_ms(&b).during("event elapsed")? as f64 * 1e3;
        }
    }
    Ok((alone, over, host_us, side_us))
}
