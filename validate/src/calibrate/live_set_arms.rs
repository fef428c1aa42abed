//! The live-set VMM arm: per-unit commit and decommit against the number of granules mapped
//! at the moment of the call, with the GPU idle and with kernels running between the calls as
//! in a replay.
//!
//! Why: commits during stored LRU replays cost 1.07-1.19x the streaming ones in the same set
//! and unit size, rising with the live set while kernels run between the calls, and the
//! live-mapping arm (`vmm_live`: one granule at a time on an idle GPU) resolves no slope
//! (docs/history/validation.md, "The live-set price"). This arm measures the dependence
//! directly, in randomised interleaved blocks so that a host state that lasts minutes hits
//! every cell alike, with a host probe before each block so that the analysis can condition
//! on the host's speed.

use super::{summary, CalibrateError, CalibrateOptions, Step};
use crate::device::DeviceInfo;
use crate::stats::Summary;
use crate::vmm;
use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use kernels::Kernels;
use rand::seq::{index, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// Unit sizes, granules: Qwen3-30B-A3B int4 `e1` (2), an odd size (5), granite at 16 MiB `e1`
/// (8), `e4` of granite (32) and a `region:`-sized run (128).
pub const LIVE_SET_UNIT_GRANULES: [u64; 5] = [2, 5, 8, 32, 128];
/// Live-set sizes of the full calibration, granules: empty, and the range the stored LRU
/// replays reach (a granite LRU 50% replay holds 3,072 granules, a Qwen3-30B-A3B one up to
/// about 4,500). `sim calibrate --only live-set` reaches further ([`LiveSetLevel`]).
pub const LIVE_SET_LEVELS: [u64; 4] = [0, 1024, 3072, 6144];
/// Levels of `sim calibrate --only live-set` when none are given: the live sets users reach,
/// from empty to a DeepSeek-V3 replay's tens of thousands of granules, and 90% of free VRAM.
pub const LIVE_SET_WIDE_LEVELS: [LiveSetLevel; 6] = [
    LiveSetLevel::Granules(0),
    LiveSetLevel::Granules(1024),
    LiveSetLevel::Granules(4096),
    LiveSetLevel::Granules(16384),
    LiveSetLevel::Granules(32768),
    LiveSetLevel::FreePercent(90),
];
/// VRAM left free beside the live set, the unit being measured and the read buffer when a
/// chosen level is checked against free VRAM: the context's own allocations (a design choice).
pub const LIVE_SET_HEADROOM: u64 = 512 << 20;
/// Blocks of the full pass; each block visits every cell once, in its own random order.
pub const LIVE_SET_BLOCKS: usize = 5;
/// Samples per cell and block: [`LIVE_SET_BLOCKS`] x 40 = 200 per cell (the fidelity target).
pub const LIVE_SET_SAMPLES: usize = 40;
/// Empty-kernel launches of the host probe before each block.
pub const LIVE_SET_PROBE_LAUNCHES: u32 = 200;
/// Live granules the kernels read between two calls (16 MiB at 2 MiB granules: one granite
/// expert, about four Qwen3-30B-A3B int4 experts), rotating over the live set.
pub const LIVE_SET_READ_GRANULES: usize = 8;
/// Seed of the arm's block orders and placements (a design choice).
pub const LIVE_SET_SEED: u64 = 17;

/// What runs on the GPU around the VMM calls of a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuWork {
    /// Nothing: the calls run on an idle GPU.
    Idle,
    /// A streaming read of [`LIVE_SET_READ_GRANULES`] live granules is in flight when the
    /// commit starts and another when the decommit starts, and the new unit is read between
    /// them: as a replay's expert kernels run while the host pages in the next group.
    Kernels,
}

/// Both modes, in their base order.
pub const GPU_WORK: [GpuWork; 2] = [GpuWork::Idle, GpuWork::Kernels];

/// A live-set level of `sim calibrate --only live-set`: a count of granules, or a percentage
/// of the VRAM free when the arm starts (in granules, rounded down).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LiveSetLevel {
    /// This many live granules.
    Granules(u64),
    /// This percentage (1-100) of free VRAM.
    FreePercent(u32),
}

impl std::str::FromStr for LiveSetLevel {
    type Err = String;

    /// `N` (granules) or `P%` (of free VRAM, 1-100).
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            match p.trim().parse::<u32>() {
                Ok(v) if (1..=100).contains(&v) => Ok(Self::FreePercent(v)),
                _ => Err(format!(
                    "live-set level {t:?}: a percentage of free VRAM is a whole number from 1% to 100%"
                )),
            }
        } else {
            t.parse::<u64>().map(Self::Granules).map_err(|_| {
                format!(
                    "live-set level {t:?}: give a number of granules (e.g. 4096) or a percentage of free VRAM (e.g. 90%)"
                )
            })
        }
    }
}

impl LiveSetLevel {
    /// The level in granules of `granule` bytes, with `vram_free` bytes free.
    pub fn granules(self, vram_free: u64, granule: u64) -> u64 {
        match self {
            Self::Granules(n) => n,
            Self::FreePercent(p) => vram_free / 100 * p as u64 / granule,
        }
    }
}

/// Splits chosen levels into those that fit free VRAM beside the largest unit, the read
/// buffer and [`LIVE_SET_HEADROOM`], and those that do not; both sorted, without repeats.
pub fn fit_levels(levels: &[LiveSetLevel], vram_free: u64, granule: u64) -> (Vec<u64>, Vec<u64>) {
    let extra =
        (LIVE_SET_UNIT_GRANULES[4] + LIVE_SET_READ_GRANULES as u64) * granule + LIVE_SET_HEADROOM;
    let mut all: Vec<u64> = levels
        .iter()
        .map(|l| l.granules(vram_free, granule))
        .collect();
    all.sort_unstable();
    all.dedup();
    all.into_iter()
        .partition(|&l| l.saturating_mul(granule).saturating_add(extra) <= vram_free)
}

/// `sim calibrate --only live-set`: the live-set arm alone at chosen levels.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveSetCalibration {
    /// The GPU and when.
    pub device: DeviceInfo,
    /// Fast pass (2 blocks of 10 samples, unit sizes 2 and 8).
    pub quick: bool,
    /// Minimum VMM granularity, bytes (the granule of the levels).
    pub granularity_min: u64,
    /// The levels asked for, as given.
    pub levels: Vec<LiveSetLevel>,
    /// The arm; its `skipped_levels` are the asked levels that did not fit free VRAM.
    pub live_set: LiveSetArm,
    /// Wall time, s.
    pub wall_s: f64,
}

/// Runs the live-set arm alone on `opts.device` at `levels` ([`fit_levels`] drops those that
/// do not fit free VRAM; recorded).
pub fn calibrate_live_set(
    opts: &CalibrateOptions,
    levels: &[LiveSetLevel],
    log: &mut dyn FnMut(&str),
) -> Result<LiveSetCalibration, CalibrateError> {
    let t0 = Instant::now();
    let ctx = kernels::open_device(opts.device)?;
    let device = DeviceInfo::read(&ctx).during("device query")?;
    let k = Kernels::load(&ctx)?;
    let (gmin, _) =
        crate::vmm::granularity(opts.device as i32).during("cuMemGetAllocationGranularity")?;
    let (fit, skipped) = fit_levels(levels, device.vram_free, gmin as u64);
    log(&format!(
        "device: {} (driver {}), {} MiB free; live-set levels {fit:?} granules of {} B, \
         skipped (do not fit free VRAM) {skipped:?}",
        device.gpu,
        device.driver,
        device.vram_free >> 20,
        gmin
    ));
    let mut live_set = run_arm(&ctx, &k, gmin, &fit, opts.quick, log)?;
    live_set.skipped_levels = skipped;
    Ok(LiveSetCalibration {
        device,
        quick: opts.quick,
        granularity_min: gmin as u64,
        levels: levels.to_vec(),
        live_set,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// One cell of one block: per-unit host time of the calls.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveSetPoint {
    /// Block (0-based) in which the cell ran.
    pub block: u32,
    /// Granules per unit.
    pub granules: u64,
    /// Other granules mapped (each its own handle) while measuring.
    pub live_granules: u64,
    /// What the GPU did around the calls.
    pub work: GpuWork,
    /// cuMemCreate + cuMemMap + cuMemSetAccess per granule of one unit, µs per unit.
    pub commit_us: Summary,
    /// cuMemUnmap + cuMemRelease per granule of the same unit, µs per unit.
    pub decommit_us: Summary,
}

/// The host probe taken before a block.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveSetProbe {
    /// Block (0-based) the probe precedes.
    pub block: u32,
    /// Host time per launch of [`LIVE_SET_PROBE_LAUNCHES`] back-to-back empty kernels, µs.
    pub launch_us: f64,
}

/// The arm's result: every cell of every block and the probes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LiveSetArm {
    /// Cells, in the order they ran.
    pub points: Vec<LiveSetPoint>,
    /// One probe per block.
    pub probes: Vec<LiveSetProbe>,
    /// Levels of [`LIVE_SET_LEVELS`] left out because they did not fit a quarter of free VRAM.
    #[serde(default)]
    pub skipped_levels: Vec<u64>,
}

impl LiveSetArm {
    /// True when the arm did not run (or failed before its first cell).
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// The cells of one block in a random order: the live levels shuffled, and within each level
/// the (unit size, GPU work) pairs shuffled. Pure, so the order is tested without a GPU.
pub fn block_order(
    rng: &mut Pcg64,
    levels: &[u64],
    sizes: &[u64],
) -> Vec<(u64, Vec<(u64, GpuWork)>)> {
    let mut lv = levels.to_vec();
    lv.shuffle(rng);
    lv.into_iter()
        .map(|l| {
            let mut cells: Vec<(u64, GpuWork)> = sizes
                .iter()
                .flat_map(|&g| GPU_WORK.iter().map(move |&w| (g, w)))
                .collect();
            cells.shuffle(rng);
            (l, cells)
        })
        .collect()
}

/// Single-granule live mappings scattered over the first part of a range, and a tail of
/// unit slots where the measured units are committed.
struct Rig<'a> {
    k: &'a Kernels,
    compute: &'a Arc<CudaStream>,
    sink: &'a mut CudaSlice<u32>,
    granule: u64,
    dev: i32,
    /// Base of the unit-slot tail of the range.
    tail: u64,
    /// Unit slots of the tail (each holds the largest unit).
    tail_slots: u64,
    /// Live granules: (address, handle).
    live: Vec<(u64, sys::CUmemGenericAllocationHandle)>,
    /// Unrelated buffer the kernels read when nothing is live.
    other: u64,
    /// Next live granule the kernels read (rotates).
    cursor: usize,
}

impl Rig<'_> {
    /// Launches streaming reads of [`LIVE_SET_READ_GRANULES`] live granules (or of the
    /// unrelated buffer when none is live), without waiting.
    fn launch_reads(&mut self) -> Result<(), CalibrateError> {
        for i in 0..LIVE_SET_READ_GRANULES {
            let at = if self.live.is_empty() {
                self.other + i as u64 * self.granule
            } else {
                self.cursor = (self.cursor + 1) % self.live.len();
                self.live[self.cursor].0
            };
            self.k
                .launch_stream_read_range(self.compute, at, self.granule, self.sink)?;
        }
        Ok(())
    }

    /// One sample: commit a unit of `g` granules at a random tail slot, decommit it; returns
    /// the host times (µs) of the two.
    fn sample(
        &mut self,
        rng: &mut Pcg64,
        g: u64,
        work: GpuWork,
    ) -> Result<(f64, f64), CalibrateError> {
        let at0 = self.tail + rng.gen_range(0..self.tail_slots) * 128 * self.granule;
        if work == GpuWork::Kernels {
            self.launch_reads()?;
        }
        let mut hs = Vec::with_capacity(g as usize);
        let t = Instant::now();
        for i in 0..g {
            let at = at0 + i * self.granule;
            let h = vmm::create(self.granule as usize, self.dev).during("cuMemCreate")?;
            vmm::map(at, self.granule as usize, h).during("cuMemMap")?;
            vmm::set_access(at, self.granule as usize, self.dev).during("cuMemSetAccess")?;
            hs.push((at, h));
        }
        let commit = t.elapsed().as_secs_f64() * 1e6;
        if work == GpuWork::Kernels {
            self.k
                .launch_stream_read_range(self.compute, at0, g * self.granule, self.sink)?;
            // the unit is unmapped next: its read must be done; other reads stay in flight
            self.compute
                .synchronize()
                .during("live-set arm unit read")?;
            self.launch_reads()?;
        }
        let t = Instant::now();
        for (at, h) in hs {
            vmm::unmap(at, self.granule as usize).during("cuMemUnmap")?;
            vmm::release(h).during("cuMemRelease")?;
        }
        let decommit = t.elapsed().as_secs_f64() * 1e6;
        self.compute.synchronize().during("live-set arm reads")?;
        Ok((commit, decommit))
    }

    /// Grows or shrinks the live set to `level` granules at the seeded slots `slots`.
    fn set_live(&mut self, level: u64, slots: &[u64], base: u64) -> Result<(), CalibrateError> {
        while self.live.len() as u64 > level {
            let (at, h) = self.live.pop().expect("live granule");
            vmm::unmap(at, self.granule as usize).during("live cuMemUnmap")?;
            vmm::release(h).during("live cuMemRelease")?;
        }
        while (self.live.len() as u64) < level {
            let at = base + slots[self.live.len()] * self.granule;
            let h = vmm::create(self.granule as usize, self.dev).during("live cuMemCreate")?;
            vmm::map(at, self.granule as usize, h).during("live cuMemMap")?;
            self.live.push((at, h));
            vmm::set_access(at, self.granule as usize, self.dev).during("live cuMemSetAccess")?;
        }
        self.cursor = 0;
        Ok(())
    }

    fn release_all(&mut self) {
        for (at, h) in self.live.drain(..) {
            let _ = vmm::unmap(at, self.granule as usize);
            let _ = vmm::release(h);
        }
    }
}

/// Host time per launch of [`LIVE_SET_PROBE_LAUNCHES`] empty kernels (the replay's probe of
/// the host's speed), µs.
fn probe(k: &Kernels, s: &Arc<CudaStream>) -> Result<f64, CalibrateError> {
    let t = Instant::now();
    for _ in 0..LIVE_SET_PROBE_LAUNCHES {
        k.launch_empty(s)?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / LIVE_SET_PROBE_LAUNCHES as f64;
    s.synchronize().during("live-set arm probe")?;
    Ok(us)
}

/// The full calibration's arm at [`LIVE_SET_LEVELS`] (quick: 0 and 3072); levels over a
/// quarter of free VRAM are skipped (recorded).
pub(crate) fn measure_live_set(
    ctx: &Arc<CudaContext>,
    k: &Kernels,
    granule: usize,
    vram_free: u64,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<LiveSetArm, CalibrateError> {
    let all: &[u64] = if quick { &[0, 3072] } else { &LIVE_SET_LEVELS };
    let g = granule as u64;
    let (levels, skipped): (Vec<u64>, Vec<u64>) =
        all.iter().partition(|&&l| (l + 128) * g <= vram_free / 4);
    let mut arm = run_arm(ctx, k, granule, &levels, quick, log)?;
    arm.skipped_levels = skipped;
    Ok(arm)
}

/// Runs the arm: [`LIVE_SET_BLOCKS`] blocks (quick: 2 blocks, sizes 2 and 8) of every (live
/// level, unit size, GPU work) cell in a random order per block, each cell
/// [`LIVE_SET_SAMPLES`] samples (quick: 10) after one discarded sample; the live set is
/// single-granule mappings at seeded random slots of a range twice its largest level, the
/// measured units at random slots of a tail after it. Host clock.
fn run_arm(
    ctx: &Arc<CudaContext>,
    k: &Kernels,
    granule: usize,
    levels: &[u64],
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<LiveSetArm, CalibrateError> {
    let (blocks, samples) = if quick {
        (2, 10)
    } else {
        (LIVE_SET_BLOCKS, LIVE_SET_SAMPLES)
    };
    let sizes: &[u64] = if quick {
        &[2, 8]
    } else {
        &LIVE_SET_UNIT_GRANULES
    };
    let g = granule as u64;
    let top = levels.iter().copied().max().unwrap_or(0);
    let tail_slots = 4u64;
    let live_slots = 2 * top.max(1);
    let res = vmm::Reservation::new(((live_slots + tail_slots * 128) * g) as usize, granule)
        .during("cuMemAddressReserve")?;
    let mut rng = Pcg64::seed_from_u64(LIVE_SET_SEED);
    let slots: Vec<u64> = index::sample(&mut rng, live_slots as usize, top as usize)
        .into_iter()
        .map(|s| s as u64)
        .collect();
    let compute = ctx.new_stream().during("live-set arm stream")?;
    let mut sink = compute.alloc_zeros::<u32>(1).during("sink")?;
    let other = compute
        .alloc_zeros::<u8>(LIVE_SET_READ_GRANULES * granule)
        .during("live-set arm read buffer")?;
    let other_ptr = other.device_ptr(&compute).0;
    let mut rig = Rig {
        k,
        compute: &compute,
        sink: &mut sink,
        granule: g,
        dev: ctx.ordinal() as i32,
        tail: res.base + live_slots * g,
        tail_slots,
        live: Vec::new(),
        other: other_ptr,
        cursor: 0,
    };
    let mut arm = LiveSetArm::default();
    let t0 = Instant::now();
    let result = (|| -> Result<(), CalibrateError> {
        for block in 0..blocks as u32 {
            arm.probes.push(LiveSetProbe {
                block,
                launch_us: probe(k, &compute)?,
            });
            for (level, cells) in block_order(&mut rng, levels, sizes) {
                rig.set_live(level, &slots, res.base)?;
                if level > LIVE_SET_LEVELS[3] {
                    log(&format!(
                        "live-set arm block {}: {level} live granules at {:.1} s",
                        block + 1,
                        t0.elapsed().as_secs_f64()
                    ));
                }
                for (gr, work) in cells {
                    let (mut c, mut d) = (Vec::new(), Vec::new());
                    for i in 0..=samples {
                        let (ci, di) = rig.sample(&mut rng, gr, work)?;
                        if i > 0 {
                            c.push(ci);
                            d.push(di);
                        }
                    }
                    arm.points.push(LiveSetPoint {
                        block,
                        granules: gr,
                        live_granules: level,
                        work,
                        commit_us: summary(&c)?,
                        decommit_us: summary(&d)?,
                    });
                }
            }
            log(&format!(
                "live-set arm block {}/{blocks}: probe {:.2} µs per launch",
                block + 1,
                arm.probes[block as usize].launch_us
            ));
        }
        Ok(())
    })();
    let _ = compute.synchronize();
    rig.release_all();
    drop(res);
    result?;
    Ok(arm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_is_granules_or_a_percentage_of_free_vram() {
        assert_eq!("4096".parse(), Ok(LiveSetLevel::Granules(4096)));
        assert_eq!(" 90% ".parse(), Ok(LiveSetLevel::FreePercent(90)));
        for bad in ["0%", "101%", "-5", "4k", "", "%", "12.5%"] {
            let e = bad.parse::<LiveSetLevel>().unwrap_err();
            assert!(e.starts_with("live-set level"), "{bad}: {e}");
        }
        // 90% of 80,000 MiB free at 2 MiB granules: 72,000 MiB / 2 MiB
        let free = 80_000u64 << 20;
        assert_eq!(
            LiveSetLevel::FreePercent(90).granules(free, 2 << 20),
            36_000
        );
        assert_eq!(LiveSetLevel::Granules(7).granules(free, 2 << 20), 7);
    }

    #[test]
    fn levels_that_leave_no_room_for_the_unit_and_reads_are_skipped() {
        let g = 2u64 << 20;
        // 1,000 granules free: the unit (128), the reads (8) and 512 MiB (256 granules) leave
        // room for 608 live granules
        let free = 1000 * g;
        let levels = [
            LiveSetLevel::Granules(609),
            LiveSetLevel::Granules(0),
            LiveSetLevel::Granules(608),
            LiveSetLevel::FreePercent(50),
            LiveSetLevel::Granules(500),
            LiveSetLevel::FreePercent(100),
        ];
        let (fit, skipped) = fit_levels(&levels, free, g);
        assert_eq!(fit, [0, 500, 608], "50% is 500 granules, counted once");
        assert_eq!(skipped, [609, 1000]);
    }

    #[test]
    fn a_block_visits_every_cell_once_in_a_seeded_order() {
        let levels = [0, 1024, 3072];
        let sizes = [2, 8];
        let a = block_order(&mut Pcg64::seed_from_u64(1), &levels, &sizes);
        let b = block_order(&mut Pcg64::seed_from_u64(1), &levels, &sizes);
        let key = |o: &Vec<(u64, Vec<(u64, GpuWork)>)>| format!("{o:?}");
        assert_eq!(key(&a), key(&b), "same seed, same order");
        let mut lv: Vec<u64> = a.iter().map(|x| x.0).collect();
        lv.sort();
        assert_eq!(lv, levels);
        for (_, cells) in &a {
            assert_eq!(cells.len(), sizes.len() * GPU_WORK.len());
            for &g in &sizes {
                for &w in &GPU_WORK {
                    assert_eq!(cells.iter().filter(|c| **c == (g, w)).count(), 1);
                }
            }
        }
        // over many blocks the first level is not always the same: the order is random
        let mut rng = Pcg64::seed_from_u64(2);
        let firsts: std::collections::BTreeSet<u64> = (0..20)
            .map(|_| block_order(&mut rng, &levels, &sizes)[0].0)
            .collect();
        assert!(firsts.len() > 1);
    }
}
