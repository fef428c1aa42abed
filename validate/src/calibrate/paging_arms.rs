//! Calibration arms that time paging the way the real-GPU replay (`crate::replay`) does it,
//! at its granularity: a whole page-in's host sequence per unit (commit calls, then the H2D
//! enqueue, copies of earlier units in flight) and a whole eviction's; and demand faults of `k`
//! whole experts read by ONE expert-kernel launch (the replay's `os*` groups), against the
//! same launch on resident pages, then the experts' migration back to host memory (the
//! replay's `os*` evictions).
//!
//! The page-in arm was also run with a spin kernel keeping the GPU busy: the host calls were
//! 4-9% faster than on an idle GPU, not slower (docs/history/calibration.md, "Paging at the
//! replay's granularity"), so only the idle arm is kept; the replay issues its page-ins with the
//! GPU idle.

use super::{summary, time_events, CalibrateError, Step, MIB};
use crate::replay_plan::{kernel_geometry, KERNEL_GROUP};
use crate::stats::Summary;
use crate::vmm;
use cudarc::driver::{sys, CudaContext, CudaStream};
use kernels::{Kernels, Variant};
use rand::seq::{index, SliceRandom};
use rand::SeedableRng;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// Units committed per size and repetition of the page-in arm (a group's page-ins: top-8).
pub const PAGE_IN_UNITS: usize = 8;
/// Unit slots of the page-in arm's range: its units sit at distinct random slots of a range
/// of this many units, as a group's page-ins sit among a layer's experts in the replay's bank
/// (Qwen3-30B-A3B has 128 experts per layer). Where units lie matters: against a replay
/// recorded right after the calibration, this arm with units 16 MiB apart priced 2-granule
/// commits 5-10% high, with units 256 MiB apart 35% high (docs/history/calibration.md, "Paging
/// at the replay's granularity"; the 5-10%: BENCHMARKS.md at commit 225ec1c).
pub const PAGE_IN_SLOTS: usize = 128;
/// Unit sizes of the page-in arm, in granules (a design choice covering the validation's
/// units: 2 (Qwen3-30B-A3B int4 `e1`), 8 (granite at 16 MiB `e1`), 32 (granite `e4`) and 128
/// (`region:256`)). Single-granule units are left out: with units 16 MiB and 256 MiB apart
/// their commits cost 85 and 179 µs, about as much as 2-granule units or more (92 and 98 µs),
/// for reasons not understood (BENCHMARKS.md at commit 225ec1c); they are priced by the fit.
pub const PAGE_IN_GRANULES: [u64; 4] = [2, 8, 32, 128];
/// Experts faulted by one launch in the fault-concurrency arm.
pub const FAULT_KS: [usize; 5] = [1, 2, 4, 8, 16];

/// One page-in size and GPU state: host time per unit, as the replay spends it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PageInPoint {
    /// Granules per unit.
    pub granules: u64,
    /// Units per repetition.
    pub units: u32,
    /// cuMemCreate + cuMemMap + cuMemSetAccess of the unit's granules, one granule at a time,
    /// µs per unit (host clock), in the cycle that follows the release of the previous size's
    /// cycle (the size order rotates with the repetition).
    pub commit_us: Summary,
    /// cuMemcpyHtoDAsync enqueue of the unit's bytes from pinned memory, µs per unit.
    pub h2d_enqueue_us: Summary,
    /// cuMemUnmap + cuMemRelease of the unit's granules, µs per unit (copies finished).
    pub decommit_us: Summary,
    /// Commit calls per unit, µs, when nothing released is left to reuse: units committed
    /// after the cycles above, [`FRESH_UNITS`] per repetition, all kept mapped (the footprint
    /// grows as in a cache warming up); `None` for sizes not in [`FRESH_GRANULES`].
    #[serde(default)]
    pub fresh_commit_us: Option<Summary>,
    /// Commit calls per unit, µs, of a second cycle of the same size run right after the
    /// cycle above was decommitted: the units released just before are [`PAGE_IN_UNITS`] of
    /// the same size, as in the replay (a group's page-ins follow the decommits of the
    /// previous group's or of its own evictions, units of one mechanism, so of one size). The
    /// cycle above instead follows the release of the previous size's cycle, for 2 granules
    /// the 128-granule one (1024 granules) in 6 of the 7 measured repetitions of a full
    /// calibration (sizes rotate: 2 follows 128 unless it comes first). `None` in
    /// measurement sets taken before this phase existed.
    #[serde(default)]
    pub steady_commit_us: Option<Summary>,
    /// H2D enqueue per unit of that second cycle, µs; `None` as for `steady_commit_us`.
    #[serde(default)]
    pub steady_h2d_enqueue_us: Option<Summary>,
}

/// Seed of the page-in arm's unit placement (a design choice).
pub const PAGE_IN_SEED: u64 = 7;
/// Units committed per repetition, and kept, by the fresh phase of the page-in arm.
pub const FRESH_UNITS: usize = 64;
/// Unit sizes of the fresh phase, granules (Qwen3-30B-A3B int4 `e1` and granite `e1`).
pub const FRESH_GRANULES: [u64; 2] = [2, 8];

/// What a page-in needs: the granule, the device, the pinned staging buffer and the copy
/// stream.
struct Pager<'a> {
    granule: usize,
    dev: i32,
    staging: *mut std::ffi::c_void,
    copy: &'a Arc<CudaStream>,
}

/// Commits one unit of `g` granules at each address of `units`, in order, each followed by
/// the H2D enqueue of its bytes from the staging buffer on the copy stream; returns the host
/// µs in commit calls and in enqueues, and every granule's (address, handle) in `handles`.
fn commit_units(
    pg: &Pager,
    units: &[u64],
    g: u64,
    handles: &mut Vec<(u64, sys::CUmemGenericAllocationHandle)>,
) -> Result<(f64, f64), CalibrateError> {
    let (granule, dev, staging, copy) = (pg.granule, pg.dev, pg.staging, pg.copy);
    let (mut c, mut e) = (0.0, 0.0);
    for &at0 in units {
        let t = Instant::now();
        for i in 0..g {
            let at = at0 + i * granule as u64;
            let h = vmm::create(granule, dev).during("cuMemCreate")?;
            vmm::map(at, granule, h).during("cuMemMap")?;
            vmm::set_access(at, granule, dev).during("cuMemSetAccess")?;
            handles.push((at, h));
        }
        let t1 = Instant::now();
        // SAFETY: at0..at0 + g granules is mapped read-write above; the staging buffer holds
        // at least g granules of pinned bytes.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                at0,
                staging as *const _,
                g as usize * granule,
                copy.cu_stream(),
            )
        }
        .result()
        .during("cuMemcpyHtoDAsync")?;
        c += t1.duration_since(t).as_secs_f64() * 1e6;
        e += t1.elapsed().as_secs_f64() * 1e6;
    }
    Ok((c, e))
}

/// cuMemUnmap + cuMemRelease of every granule of `handles`; host µs.
fn decommit_all(
    handles: &mut Vec<(u64, sys::CUmemGenericAllocationHandle)>,
    granule: usize,
) -> Result<f64, CalibrateError> {
    let t = Instant::now();
    for (at, h) in handles.drain(..) {
        vmm::unmap(at, granule).during("cuMemUnmap")?;
        vmm::release(h).during("cuMemRelease")?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6)
}

/// `k` experts of one geometry faulted in by one expert-kernel launch.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultLaunchPoint {
    /// Kernel geometry: hidden x ffn (int4, group [`KERNEL_GROUP`]).
    pub hidden: usize,
    /// FFN width of the geometry.
    pub ffn: usize,
    /// Bytes the kernels read per expert.
    pub expert_bytes: u64,
    /// Bytes of one expert's pages (its size rounded up to 4 KiB: the run the model prices;
    /// the kernels touch `expert_bytes` of it).
    #[serde(default)]
    pub run_bytes: u64,
    /// Experts (slots, each a distinct host-resident expert) of the launch.
    pub experts: u32,
    /// Gate+up and down launches on host-resident managed pages, µs (CUDA events).
    pub faulted_us: Summary,
    /// The same launches again, pages now resident, µs.
    pub resident_us: Summary,
    /// Per repetition, faulted - resident, µs: the launch's fault time.
    pub fault_us: Summary,
    /// cuMemPrefetchAsync of each expert's range back to host memory (one call per expert,
    /// as the replay evicts), µs for all k (CUDA events).
    #[serde(default)]
    pub evict_us: Option<Summary>,
}

/// The page-in arm: per repetition, each unit size in turn (the order rotating with the
/// repetition): [`PAGE_IN_UNITS`] units at distinct random slots (seeded) of a range of
/// [`PAGE_IN_SLOTS`] units, committed one after another, each followed by the H2D enqueue of
/// its bytes on a copy stream (so a copy is in flight during the next unit's calls, as in the
/// replay); then, copies finished, every unit decommitted in the same order; then at once a
/// second cycle of the same size the same way (new random slots), timed apart: its commits
/// follow the release of same-size units, as the replay's do (`steady_commit_us`), while the
/// first cycle's follow the previous size's release. Then the fresh phase: per size in
/// [`FRESH_GRANULES`], every repetition commits [`FRESH_UNITS`] more units the same way and
/// keeps them (the footprint grows as in a cache warming up), the slots a
/// seeded random order of a range just large enough; all released at the end. GPU idle.
pub(crate) fn measure_page_in(
    ctx: &Arc<CudaContext>,
    granule: usize,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<PageInPoint>, CalibrateError> {
    let dev = ctx.ordinal() as i32;
    let sizes: &[u64] = if quick {
        &PAGE_IN_GRANULES[..3]
    } else {
        &PAGE_IN_GRANULES
    };
    let gmax = *sizes.iter().max().expect("sizes") as usize;
    let fresh_max = *FRESH_GRANULES.iter().max().expect("sizes") as usize;
    let copy = ctx.new_stream().during("copy stream")?;
    let va = vmm::Reservation::new(PAGE_IN_SLOTS * gmax * granule, granule)
        .during("cuMemAddressReserve")?;
    let mut rng = Pcg64::seed_from_u64(PAGE_IN_SEED);
    let fresh_span = (reps as usize + 1) * FRESH_UNITS * fresh_max * granule;
    let va_fresh = vmm::Reservation::new(fresh_span, granule).during("cuMemAddressReserve")?;
    let mut staging = std::ptr::null_mut();
    // SAFETY: valid out-pointer; freed below.
    unsafe { sys::cuMemHostAlloc(&mut staging, gmax.max(fresh_max) * granule, 0) }
        .result()
        .during("cuMemHostAlloc")?;
    let pg = Pager {
        granule,
        dev,
        staging,
        copy: &copy,
    };
    // [size] -> (commit, enqueue, decommit, fresh commit) samples
    let mut samples = vec![(Vec::new(), Vec::new(), Vec::new(), Vec::new()); sizes.len()];
    // [size] -> (commit, enqueue) samples of the second, same-size cycle
    let mut steady = vec![(Vec::new(), Vec::new()); sizes.len()];
    let mut handles = Vec::new();
    let result = (|| -> Result<(), CalibrateError> {
        for r in 0..=reps {
            for j in 0..sizes.len() {
                let si = (j + r as usize) % sizes.len();
                let g = sizes[si];
                let unit_bytes = g * granule as u64;
                let mut place = || -> Vec<u64> {
                    index::sample(&mut rng, PAGE_IN_SLOTS, PAGE_IN_UNITS)
                        .iter()
                        .map(|slot| va.base + slot as u64 * unit_bytes)
                        .collect()
                };
                let units = place();
                let (c, e) = commit_units(&pg, &units, g, &mut handles)?;
                copy.synchronize().during("page-in copies")?;
                let d = decommit_all(&mut handles, granule)?;
                // the same size again, right after its own release
                let units = place();
                let (c2, e2) = commit_units(&pg, &units, g, &mut handles)?;
                copy.synchronize().during("page-in copies")?;
                decommit_all(&mut handles, granule)?;
                if r > 0 {
                    let n = PAGE_IN_UNITS as f64;
                    let s = &mut samples[si];
                    s.0.push(c / n);
                    s.1.push(e / n);
                    s.2.push(d / n);
                    steady[si].0.push(c2 / n);
                    steady[si].1.push(e2 / n);
                }
            }
        }
        for &g in FRESH_GRANULES.iter().filter(|g| sizes.contains(g)) {
            let si = sizes.iter().position(|&x| x == g).expect("contained");
            let unit_bytes = g * granule as u64;
            let mut slots: Vec<u64> = (0..((reps as usize + 1) * FRESH_UNITS) as u64).collect();
            slots.shuffle(&mut rng);
            for (r, chunk) in slots.chunks(FRESH_UNITS).enumerate() {
                let units: Vec<u64> = chunk
                    .iter()
                    .map(|&slot| va_fresh.base + slot * unit_bytes)
                    .collect();
                let (c, _) = commit_units(&pg, &units, g, &mut handles)?;
                if r > 0 {
                    samples[si].3.push(c / FRESH_UNITS as f64);
                }
            }
            copy.synchronize().during("fresh page-in copies")?;
            decommit_all(&mut handles, granule)?;
        }
        Ok(())
    })();
    let _ = copy.synchronize();
    let _ = decommit_all(&mut handles, granule);
    // SAFETY: allocated by cuMemHostAlloc above, freed once, no copy in flight.
    let _ = unsafe { sys::cuMemFreeHost(staging) };
    result?;
    let mut out = Vec::new();
    for (si, &g) in sizes.iter().enumerate() {
        let s = &samples[si];
        let p = PageInPoint {
            granules: g,
            units: PAGE_IN_UNITS as u32,
            commit_us: summary(&s.0)?,
            h2d_enqueue_us: summary(&s.1)?,
            decommit_us: summary(&s.2)?,
            fresh_commit_us: if s.3.is_empty() {
                None
            } else {
                Some(summary(&s.3)?)
            },
            steady_commit_us: Some(summary(&steady[si].0)?),
            steady_h2d_enqueue_us: Some(summary(&steady[si].1)?),
        };
        log(&format!(
            "page-in of {g} granules: commit {:.1}, H2D enqueue {:.1}, decommit {:.1} µs per unit; commit right after a cycle of its own size {} (enqueue {}); commit with nothing to reuse {}",
            p.commit_us.median,
            p.h2d_enqueue_us.median,
            p.decommit_us.median,
            p.steady_commit_us.as_ref().map_or("-".into(), |f| format!("{:.1} µs", f.median)),
            p.steady_h2d_enqueue_us.as_ref().map_or("-".into(), |f| format!("{:.1} µs", f.median)),
            p.fresh_commit_us.as_ref().map_or("-".into(), |f| format!("{:.1} µs", f.median))
        ));
        out.push(p);
    }
    Ok(out)
}

/// Expert geometries of the fault-concurrency arm: (hidden, expert bytes) of the replay's two
/// validation models (Qwen3-30B-A3B int4: hidden 2048, 2433024 B; granite at `--expert-mib
/// 16`: hidden 1024, 16 MiB).
pub const FAULT_GEOMETRIES: [(usize, u64); 2] = [(2048, 2_433_024), (1024, 16 * MIB)];

/// The fault-concurrency arm: per geometry and repetition, one managed buffer holding
/// sum([`FAULT_KS`]) experts (4 KiB-aligned, as the replay's `os4k` bank lays them out),
/// written by the host so every page starts host-resident; then for each k (order rotating
/// with the repetition) one expert-kernel launch over k fresh experts (faulted), and the same
/// launch again (resident). The launches are prepared before the timed part.
pub(crate) fn measure_fault_launches(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<FaultLaunchPoint>, CalibrateError> {
    let ks: &[usize] = if quick { &[1, 8] } else { &FAULT_KS };
    let total: usize = ks.iter().sum();
    let mut out = Vec::new();
    for &(hidden, expert_bytes) in &FAULT_GEOMETRIES {
        let geom = kernel_geometry(hidden, expert_bytes).ok_or_else(|| {
            CalibrateError::Other(format!(
                "no int4 kernel geometry of hidden {hidden} fits {expert_bytes} B"
            ))
        })?;
        let stride = (expert_bytes as usize).div_ceil(4096) * 4096;
        let bytes = total * stride;
        let x = vec![0.01f32; geom.hidden];
        let mut samples = vec![(Vec::new(), Vec::new(), Vec::new(), Vec::new()); ks.len()];
        let host = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        };
        for r in 0..=reps {
            let mut p = 0;
            // SAFETY: valid out-pointer; freed below.
            unsafe {
                sys::cuMemAllocManaged(&mut p, bytes, 1 /* GLOBAL */)
            }
            .result()
            .during("cuMemAllocManaged (fault launches)")?;
            let run = (|| -> Result<(), CalibrateError> {
                // experts of each k: consecutive slots of the buffer
                let mut launches = Vec::with_capacity(ks.len());
                let mut first = 0usize;
                for &n in ks {
                    let ptrs: Vec<u64> = (first..first + n)
                        .map(|i| p + (i * stride) as u64)
                        .collect();
                    first += n;
                    launches.push(k.prepare_moe(
                        stream,
                        geom,
                        Variant::PerSlot,
                        &ptrs,
                        &vec![0u32; n],
                        &x,
                    )?);
                }
                stream.synchronize().during("prepare fault launches")?;
                // SAFETY: managed memory is host-accessible, no kernel running: pages start on
                // the host.
                unsafe { std::ptr::write_bytes(p as *mut u8, 0x11, bytes) };
                for j in 0..ks.len() {
                    let i = (j + r as usize) % ks.len();
                    let l = &mut launches[i];
                    let f = time_events(ctx, stream, &mut || Ok(k.launch_moe(stream, l)?))?;
                    let res = time_events(ctx, stream, &mut || Ok(k.launch_moe(stream, l)?))?;
                    // the experts of this k start at slot sum(ks[..i])
                    let first: usize = ks[..i].iter().sum();
                    let ev = time_events(ctx, stream, &mut || {
                        for e in first..first + ks[i] {
                            // SAFETY: the range lies inside the managed buffer.
                            unsafe {
                                sys::cuMemPrefetchAsync_v2(
                                    p + (e * stride) as u64,
                                    stride,
                                    host,
                                    0,
                                    stream.cu_stream(),
                                )
                            }
                            .result()
                            .during("cuMemPrefetchAsync to the host")?;
                        }
                        Ok(())
                    })?;
                    if r > 0 {
                        samples[i].0.push(f);
                        samples[i].1.push(res);
                        samples[i].2.push(f - res);
                        samples[i].3.push(ev);
                    }
                }
                Ok(())
            })();
            // SAFETY: allocated above, freed once; time_events synchronized every launch.
            let _ = stream.synchronize();
            unsafe { sys::cuMemFree_v2(p) }
                .result()
                .during("cuMemFree managed")?;
            run?;
        }
        for (i, &n) in ks.iter().enumerate() {
            let s = &samples[i];
            let pt = FaultLaunchPoint {
                hidden: geom.hidden,
                ffn: geom.ffn,
                expert_bytes: geom.expert_bytes() as u64,
                run_bytes: stride as u64,
                experts: n as u32,
                faulted_us: summary(&s.0)?,
                resident_us: summary(&s.1)?,
                fault_us: summary(&s.2)?,
                evict_us: Some(summary(&s.3)?),
            };
            log(&format!(
                "faults of {n} experts of {} B ({}x{}, group {KERNEL_GROUP}) in one launch: {:.1} µs faulted, {:.1} µs resident, {:.2} GB/s of fault time; back to the host: {:.1} µs",
                pt.expert_bytes,
                geom.hidden,
                geom.ffn,
                pt.faulted_us.median,
                pt.resident_us.median,
                (n as u64 * pt.expert_bytes) as f64 / pt.fault_us.median.max(1e-9) / 1e3,
                pt.evict_us.as_ref().map_or(0.0, |e| e.median)
            ));
            out.push(pt);
        }
    }
    Ok(out)
}
