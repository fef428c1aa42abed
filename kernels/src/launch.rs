//! Launch geometry of the expert kernels: how many threads share a row and how many rows a
//! block covers. Pure CPU, so the choice is tested without a GPU.
//!
//! A block of [`BLOCK_THREADS`] threads is split into row groups of `P` consecutive threads
//! ("lanes per row"); a row group owns `R` consecutive output rows and its threads split each
//! row's 16-byte chunks (32 int4 weights) round-robin. Small `P` means few, long-running blocks;
//! large `P` means many short ones. [`lanes_per_row`] takes the smallest `P` that still gives
//! every multiprocessor [`BLOCKS_PER_MULTIPROCESSOR`] blocks, so the weight stream has enough
//! loads in flight and the last wave of blocks is short.
//!
//! [`weight_launch_shapes`] gives a layer's weight launches as [`LaunchShape`]s (grid, block,
//! shared memory, distinct expert bytes): the shape a plain read of the same bytes copies.

use crate::geometry::ExpertGeometry;

/// Threads per block of the expert kernels (`BLOCK` in `cuda/moe.cu`).
pub const BLOCK_THREADS: u32 = 256;
/// Output rows per row group of the per-slot kernel (`R` of `moe_matvec_t1` in `cuda/moe.cu`).
pub const PER_SLOT_ROWS: usize = 2;
/// One per-slot kernel of `cuda/moe_dot.cu` (int8 dot products on 16-bit quantized activations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DotKernel {
    /// CUDA function name.
    pub name: &'static str,
    /// Output rows per row group (`R`).
    pub rows: usize,
    /// Resident blocks per multiprocessor its `__launch_bounds__` asks for (caps registers).
    pub min_blocks: u32,
    /// Weight chunks (16 bytes, 32 int4 weights) per row in one register batch (`J`; 1 for
    /// [`DotStaging::PersistentBulk`], whose lanes take one chunk at a time from shared memory).
    pub batch_chunks: usize,
    /// Register batches in the ring (`NB`): `NB - 1` batches of loads are in flight per thread
    /// ([`DotStaging::PersistentBulk`]: shared-memory stages per block).
    pub ring: usize,
    /// How the grid is sized (lanes per row).
    pub grid: DotGrid,
    /// Where the activations come from, how the layer is launched and which arithmetic
    /// unpacks the weights.
    pub staging: DotStaging,
    /// A kernel (by name, in [`DOT_KERNELS`]) that a launch runs instead when its gate+up
    /// launch fits in one wave of blocks with at least [`COALESCED_LANES`] lanes per row (the
    /// one-wave branch of [`DotGrid::Adaptive`]): the per-launch choice of
    /// `moe_dot_xp_r2j1n3b4`, see [`DotKernel::for_launch`].
    pub one_wave_partner: Option<&'static str>,
    /// A kernel (by name, in [`DOT_KERNELS`]) that a launch runs instead when at most half of
    /// its slots name distinct experts (the repeats are L2 hits and the tiles short): see
    /// [`DotKernel::for_repeats`].
    pub repeat_partner: Option<&'static str>,
    /// How the weights are requested: plain loads, or with an L2 prefetch of the down launch's
    /// tiles.
    pub weight_reads: WeightReads,
    /// A diagnostic twin: the same grid, activation copy and weight and scale
    /// loads as the kernel it mirrors, but no dot products, so its time is the ceiling of that
    /// access pattern. Its outputs are NOT the expert FFN (each thread stores the XOR of the
    /// words it loaded): never a default, skipped by the correctness tests, timed by
    /// `sim calibrate --only kernels` next to the others.
    pub load_only: bool,
}

/// How a dot kernel requests its weights from memory (docs/history/kernels.md, "Access pattern
/// and L2 prefetches").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightReads {
    /// Each thread's `ld.global.nc` loads only (bytes in flight limited by its register ring).
    Plain,
    /// In the down launch, as each block starts, its whole row tile (weight rows and their
    /// scales, each one contiguous range) is requested into the L2: one
    /// `cp.async.bulk.prefetch.L2` per range on sm_90+ (one `prefetch.global.L2` per 128-byte
    /// line before, or for a range that is not whole 16-byte words); the register loads then
    /// mostly hit the L2. Holds no registers. Measured on the H200 (docs/history/kernels.md,
    /// "Access pattern and L2 prefetches"): down launch 23.8 vs 24.5 µs at 60 slots of 2560x640;
    /// the same prefetch in the gate+up launch (80 KB tiles, ~42 MB requested by the first wave)
    /// was slower, 40.4 vs 34.0 µs, as were a rolling line-by-line prefetch and the `L2::256B` load
    /// hint.
    TilePrefetchDown,
}

/// How a dot kernel gets its activations and launches a layer, and the arithmetic it uses.
/// Other kinds (cp.async shared-memory rings, fused one-launch layers with a gpu-scope fence per
/// tile, one-shot bulk-copy tiles, int8 tensor cores, persistent blocks with equal tile shares)
/// were slower than a kept kernel on every measured geometry and were dropped; their figures are
/// in docs/history/kernels.md. [`DotStaging::PersistentBulk`] is a persistent one-launch design
/// of its own (bulk-copied stages, fence-free publication of the gate+up rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotStaging {
    /// `DOT_ENTRY` kernels: weights stream through a ring of `ring` register batches
    /// (`ld.global.nc`); each block quantizes its slot's activations; signed nibbles (5
    /// instructions per 32-bit weight word besides the 4 `dp4a`); two launches per layer (gate+up,
    /// then down).
    Registers,
    /// `NIBP_ENTRY` kernels: the [`DotStaging::Registers`] ring with unsigned
    /// nibbles (one LOP3 per half word, `dp4a.u32.s32`, the zero point removed once per chunk
    /// with the chunk's integer activation sum) and a shift for the scale group; activations
    /// still quantized per block; the down launch is a programmatic dependent launch (sm_90+:
    /// it starts before the gate+up launch ends, requests its first weights, then waits for
    /// the gate+up rows). Groups must be powers of two (else [`DOT_FALLBACK_KERNEL`]).
    NibblesPdl,
    /// `PREQP_ENTRY` kernels: [`DotStaging::NibblesPdl`]'s arithmetic, with
    /// activations a pre-pass (`moe_dot_prep2`, one block per token for gate+up, per slot for
    /// down, SiLU included) quantizes once per launch into a scratch buffer, which the weight
    /// kernel only copies to shared memory; every launch after the layer's first (pre-pass,
    /// gate+up, pre-pass, down) is a programmatic dependent launch (sm_90+), so each weight
    /// kernel starts while its pre-pass runs and requests its first weights before it waits.
    PrequantPdl,
    /// `FUSED_ENTRY` kernels: the whole layer in one persistent launch (after the
    /// gate+up activation pre-pass of [`DotStaging::PrequantPdl`]) of one block per
    /// multiprocessor ([`fused_plan`]): a producer warp bulk-copies (`cp.async.bulk`, sm_90+)
    /// each tile's weight rows, scales and activation row into shared-memory stages, consumer
    /// warps compute from there with [`DotStaging::PrequantPdl`]'s arithmetic, gate+up tiles
    /// of every item before down tiles; a warp per block quantizes the down activations of the
    /// items whose last gate+up tile it took and publishes them to the down tiles by a flag.
    /// Needs compute capability 9.0 and a [`fused_plan`]; elsewhere a launch runs
    /// [`FUSED_FALLBACK_KERNEL`].
    PersistentBulk,
    /// `PREQ8_ENTRY` kernels (reported only): pre-pass activations (plain launches)
    /// with one int8 limb per activation (`|x| <= 127`, llama.cpp q8_1 style, 2 `dp4a` per 8
    /// weights instead of 4). Cannot hold the stated tolerance: shows what the 16-bit limbs cost.
    Prequant8,
}

impl DotStaging {
    /// True for the unsigned-nibble kernels (every staging but [`DotStaging::Registers`]), which
    /// need the group to be a power of two (the chunk's scale group is a shift) and keep per-chunk
    /// integer activation sums.
    pub fn unsigned_nibbles(self) -> bool {
        !matches!(self, DotStaging::Registers)
    }

    /// True when the layer's launches after its first are programmatic dependent launches
    /// (on compute capability 9.0+; plain launches before, where the kernels' waits are no-ops).
    pub fn programmatic(self) -> bool {
        matches!(
            self,
            DotStaging::NibblesPdl | DotStaging::PrequantPdl | DotStaging::PersistentBulk
        )
    }

    /// True when the layer is one weight launch ([`DotStaging::PersistentBulk`]): its gate+up
    /// and down phases cannot be launched (or timed) apart.
    pub fn single_launch(self) -> bool {
        matches!(self, DotStaging::PersistentBulk)
    }

    /// Activation limbs of the pre-pass (2 for [`DotStaging::PrequantPdl`], 1 for
    /// [`DotStaging::Prequant8`]); `None` for kernels without a pre-pass.
    pub fn prepass_limbs(self) -> Option<usize> {
        match self {
            DotStaging::PrequantPdl | DotStaging::PersistentBulk => Some(2),
            DotStaging::Prequant8 => Some(1),
            DotStaging::Registers | DotStaging::NibblesPdl => None,
        }
    }
}

/// Bytes of one quantized activation row of `k` values in a dot kernel's shared memory (and,
/// for the pre-pass kernels, in their scratch buffer). [`DotStaging::Registers`]: two int8 limbs
/// per value and one f32 step per 32 values, `2 k + 4 k / 32`. The unsigned-nibble kernels
/// ([`DotStaging::unsigned_nibbles`]): `limbs` int8 limbs per value, then per 32-value chunk an
/// f32 step and an int32 activation sum, padded to 16 bytes:
/// `16 (limbs k / 16 + ceil(2 k / 32 / 4))` (`act_row_u4` in `cuda/moe_dot.cu`).
pub fn dot_activation_bytes(k: usize, staging: DotStaging) -> usize {
    let chunks = k / 32;
    match staging {
        DotStaging::NibblesPdl | DotStaging::PrequantPdl | DotStaging::PersistentBulk => {
            16 * (4 * chunks + (2 * chunks).div_ceil(4))
        }
        DotStaging::Prequant8 => 16 * (2 * chunks + (2 * chunks).div_ceil(4)),
        DotStaging::Registers => 2 * k + 4 * chunks,
    }
}

/// How a dot kernel's lanes per row (and so its grid) are chosen for a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotGrid {
    /// [`lanes_per_row`]: at least [`BLOCKS_PER_MULTIPROCESSOR`] blocks per multiprocessor
    /// (several waves, short rows per lane).
    Waves,
    /// [`lanes_per_row_one_wave`]: at most `min_blocks` blocks per multiprocessor, so every
    /// block is resident from the start (no tail wave, one activation quantization per block,
    /// long rows per lane for the register ring).
    OneWave,
    /// [`lanes_per_row_one_wave`] when it gives at least [`COALESCED_LANES`] lanes per row,
    /// else [`lanes_per_row`]. Measured on the H200 (docs/history/kernels.md, "Grid shape and
    /// register ring"): one wave is 1.2-1.8x faster for 8-slot launches (Qwen3-30B-A3B layer 17.4
    /// vs 25.6 µs, where it gives 8-16 lanes per row) and 1.4x slower for 60 slots of 2560x640
    /// (92.6 vs 64.7 µs, where it gives 1-2 lanes per row, so each warp load touches 16-32 rows).
    Adaptive,
}

/// Lanes per row from which one warp load instruction reads whole 128-byte lines of a row
/// (8 lanes x 16-byte chunks): the threshold of [`DotGrid::Adaptive`].
pub const COALESCED_LANES: u32 = 8;

impl DotKernel {
    /// The `cuda/moe_dot.cu` macro that defines this kernel (from its staging, weight reads
    /// and load-only flag); `None` for a combination the source has no macro for.
    pub fn entry_macro(&self) -> Option<&'static str> {
        use DotStaging as S;
        use WeightReads as W;
        Some(match (self.staging, self.weight_reads, self.load_only) {
            (S::Registers, W::Plain, false) => "DOT_ENTRY",
            (S::NibblesPdl, W::Plain, false) => "NIBP_ENTRY",
            (S::PrequantPdl, W::Plain, false) => "PREQP_ENTRY",
            (S::PrequantPdl, W::TilePrefetchDown, false) => "PREQPD_ENTRY",
            (S::PrequantPdl, W::Plain, true) => "LOADQP_ENTRY",
            (S::Prequant8, W::Plain, false) => "PREQ8_ENTRY",
            (S::PersistentBulk, W::Plain, false) => "FUSED_ENTRY",
            _ => return None,
        })
    }

    /// Index into [`DOT_KERNELS`] of the kernel a launch of `self` (index `index`) runs:
    /// [`DotKernel::one_wave_partner`] when the gate+up launch (`rows` = 2 ffn rows of
    /// `chunks` = hidden / 32 chunks, `items` work items) takes the one-wave grid with at least
    /// [`COALESCED_LANES`] lanes per row on `multiprocessors` multiprocessors, else `index`.
    pub fn for_launch(
        &self,
        index: usize,
        rows: usize,
        chunks: usize,
        items: usize,
        multiprocessors: u32,
    ) -> usize {
        let Some(partner) = self.one_wave_partner else {
            return index;
        };
        // A persistent kernel (one block per multiprocessor) decides as the kernel it falls
        // back to, so both hand the same launches to the partner.
        let basis = if self.staging.single_launch() {
            DOT_KERNELS[FUSED_FALLBACK_KERNEL]
        } else {
            *self
        };
        let one = lanes_per_row_one_wave(
            rows,
            chunks,
            items,
            basis.rows,
            multiprocessors,
            basis.min_blocks,
        );
        if one >= COALESCED_LANES {
            dot_kernel_index(partner).unwrap_or(index)
        } else {
            index
        }
    }

    /// Index into [`DOT_KERNELS`] of the kernel a launch of `self` (index `index`) whose
    /// `slots` name `distinct` experts runs: [`DotKernel::repeat_partner`] when `2 distinct <=
    /// slots`, else `index`. The threshold is where the two persistent kernels tie: on 60
    /// slots of 2560x640 on the H200, the ticket counter `moe_dot_fd_r2j1s3b1` took 48.3-49.8
    /// µs at 60 distinct experts against 49.8-51.2 for the static walk, 46.8-47.5 against
    /// 46.6-47.4 at 30, and 41.2-41.8 against 39.3-40.7 at 6 (six interleaved runs,
    /// docs/history/kernels.md, "Counter or static walk").
    pub fn for_repeats(&self, index: usize, slots: usize, distinct: usize) -> usize {
        match self.repeat_partner {
            Some(partner) if 2 * distinct <= slots => dot_kernel_index(partner).unwrap_or(index),
            _ => index,
        }
    }

    /// Lanes per row of this kernel for one phase: `rows` output rows of `chunks` 16-byte
    /// chunks, for `items` work items, on `multiprocessors` multiprocessors.
    pub fn lanes(&self, rows: usize, chunks: usize, items: usize, multiprocessors: u32) -> u32 {
        match self.grid {
            DotGrid::Waves => lanes_per_row(rows, chunks, items, self.rows, multiprocessors),
            DotGrid::OneWave => lanes_per_row_one_wave(
                rows,
                chunks,
                items,
                self.rows,
                multiprocessors,
                self.min_blocks,
            ),
            DotGrid::Adaptive => {
                let one = lanes_per_row_one_wave(
                    rows,
                    chunks,
                    items,
                    self.rows,
                    multiprocessors,
                    self.min_blocks,
                );
                if one >= COALESCED_LANES {
                    one
                } else {
                    lanes_per_row(rows, chunks, items, self.rows, multiprocessors)
                }
            }
        }
    }
}

/// The per-slot dot kernels compiled from `cuda/moe_dot.cu` (keep in step with its `*_ENTRY`
/// lines). All compute the same integer sums per 32-column chunk (except the reported
/// single-limb `moe_dot_q8_r2b3` and the [`DotKernel::load_only`] diagnostic twins, which
/// compute no FFN) and so the same outputs; they differ in [`DotStaging`], rows per lane,
/// occupancy, register ring depth, grid and [`WeightReads`]. Variants that were slower than one of
/// these on every measured geometry were dropped (docs/history/kernels.md).
pub const DOT_KERNELS: [DotKernel; 9] = [
    DotKernel {
        name: "moe_dot_a_r2b3",
        rows: 2,
        min_blocks: 3,
        batch_chunks: 2,
        ring: 2,
        grid: DotGrid::Adaptive,
        staging: DotStaging::Registers,
        one_wave_partner: None,
        repeat_partner: None,
        weight_reads: WeightReads::Plain,
        load_only: false,
    },
    nibble_kernel("moe_dot_up_r2b3", 2, 2, 2, 3, DotStaging::NibblesPdl),
    nibble_kernel("moe_dot_qp_r2b3", 2, 2, 2, 3, DotStaging::PrequantPdl),
    DotKernel {
        one_wave_partner: Some("moe_dot_up_r2b3"),
        ..nibble_kernel("moe_dot_xp_r2j1n3b4", 2, 1, 3, 4, DotStaging::PrequantPdl)
    },
    nibble_kernel("moe_dot_q8_r2b3", 2, 2, 2, 3, DotStaging::Prequant8),
    // The default with the down launch's row tiles prefetched into the L2 (its
    // one-wave partner is the default's), and the diagnostic load-only twin of the default's
    // several-wave code (no partner: its 8-slot launches run the twin itself). The other
    // access-pattern variants (the prefetch in both launches or in gate+up only, a rolling
    // prefetch, the L2::256B hint, wide row groups, and their load-only twins) were slower than
    // a kept kernel on every measured geometry and were dropped (docs/history/kernels.md,
    // "Access pattern and L2 prefetches").
    DotKernel {
        one_wave_partner: Some("moe_dot_up_r2b3"),
        weight_reads: WeightReads::TilePrefetchDown,
        ..nibble_kernel("moe_dot_xd_r2j1n3b4", 2, 1, 3, 4, DotStaging::PrequantPdl)
    },
    DotKernel {
        load_only: true,
        ..nibble_kernel("moe_dot_lo_r2j1n3b4", 2, 1, 3, 4, DotStaging::PrequantPdl)
    },
    // The layer in one persistent launch with bulk-copied shared-memory stages
    // (2 rows per thread, 3 stages, one block per multiprocessor; the grid is `fused_plan`'s;
    // after each block's first 3 tiles, tiles go to whichever block draws their ticket).
    // Launches of one wave run the one-wave partner of `moe_dot_xp_r2j1n3b4`; launches whose
    // slots repeat experts, the static walk.
    DotKernel {
        one_wave_partner: Some("moe_dot_up_r2b3"),
        repeat_partner: Some("moe_dot_fz_r2j1s3b1"),
        ..nibble_kernel(
            "moe_dot_fd_r2j1s3b1",
            2,
            1,
            3,
            1,
            DotStaging::PersistentBulk,
        )
    },
    // The same with the static walk (block b takes tiles b, b + G, ...): faster where the
    // slots repeat experts, slower where they are distinct (see `DEFAULT_DOT_KERNEL`).
    DotKernel {
        one_wave_partner: Some("moe_dot_up_r2b3"),
        ..nibble_kernel(
            "moe_dot_fz_r2j1s3b1",
            2,
            1,
            3,
            1,
            DotStaging::PersistentBulk,
        )
    },
];

/// Index into [`DOT_KERNELS`] of the kernel named `name` (a partner named by another entry).
fn dot_kernel_index(name: &str) -> Option<usize> {
    DOT_KERNELS.iter().position(|d| d.name == name)
}

/// An unsigned-nibble kernel ([`DotStaging::unsigned_nibbles`]) with the [`DotGrid::Adaptive`]
/// grid: `name`, rows per row group, chunks per batch, batches in the register ring, resident
/// blocks.
const fn nibble_kernel(
    name: &'static str,
    rows: usize,
    batch_chunks: usize,
    ring: usize,
    min_blocks: u32,
    staging: DotStaging,
) -> DotKernel {
    DotKernel {
        name,
        rows,
        min_blocks,
        batch_chunks,
        ring,
        grid: DotGrid::Adaptive,
        staging,
        one_wave_partner: None,
        repeat_partner: None,
        weight_reads: WeightReads::Plain,
        load_only: false,
    }
}

/// Index into [`DOT_KERNELS`] of the kernel a launch runs instead of an unsigned-nibble kernel
/// where that cannot run (a scale group that is not a power of two): `moe_dot_a_r2b3`, the
/// register-ring kernel with the adaptive grid, which has no power-of-two constraint.
pub const DOT_FALLBACK_KERNEL: usize = 0;

/// Index into [`DOT_KERNELS`] of the per-slot kernel used by default: `moe_dot_fd_r2j1s3b1`,
/// the layer in one persistent launch after its gate+up pre-pass. It chooses per launch as
/// `moe_dot_xp_r2j1n3b4` does
/// ([`DotKernel::for_launch`]: launches whose gate+up fits in one wave run `moe_dot_up_r2b3`),
/// and runs [`FUSED_FALLBACK_KERNEL`] where it cannot (below compute capability 9.0, or a
/// geometry [`fused_plan`] refuses). Measured on the H200 through `sim calibrate --only kernels`
/// (three runs; BENCHMARKS.md at commit 225ec1c, docs/history/kernels.md "The persistent kernel's
/// consumers"): 60 slots of 2560x640 in 49.9-50.2 µs
/// vs 55.3-56.0 for `moe_dot_xp_r2j1n3b4`; with 6 distinct experts 39.7-40.3 vs 43.7-44.4 µs.
/// Handing tiles out by a counter (docs/history/kernels.md, "Tiles handed out by a counter")
/// took it from 49.5-49.7 to 47.8-48.1 µs alone, 47.7-48.0 to 46.3-46.4 µs per layer back to
/// back; launches whose slots repeat experts run its static walk instead
/// ([`DotKernel::for_repeats`]).
pub const DEFAULT_DOT_KERNEL: usize = 7;

/// Index into [`DOT_KERNELS`] of the kernel a [`DotStaging::PersistentBulk`] launch runs where
/// it cannot (compute capability below 9.0, no [`fused_plan`] for the geometry, or an expert
/// pointer not 16-byte aligned): `moe_dot_xp_r2j1n3b4`, the two-launch kernel of the same
/// arithmetic ([`DotStaging::PrequantPdl`]).
pub const FUSED_FALLBACK_KERNEL: usize = 3;

/// Consumer warps of a [`DotStaging::PersistentBulk`] block (`FUSED_CONSUMER_WARPS` in
/// `cuda/moe_dot.cu`).
pub const FUSED_CONSUMER_WARPS: u32 = 8;
/// Threads of a [`DotStaging::PersistentBulk`] block: the consumer warps, the producer warp and
/// the quantizing warp.
pub const FUSED_THREADS: u32 = (FUSED_CONSUMER_WARPS + 2) * 32;
/// Most weight bytes one tile of a [`DotStaging::PersistentBulk`] launch stages. Measured on the
/// H200 (standalone harness; docs/history/kernels.md, "One persistent launch per layer"): 40 KiB
/// tiles in 3 stages ran 60 slots of 2560x640 in 50-51 µs, 20 KiB tiles in 4 to 7 stages in 78-80
/// µs, because each multiprocessor receives about one bulk-copied tile per 1.4 µs whatever its
/// size.
pub const FUSED_TILE_BYTES: usize = 40 * 1024;

/// The launch geometry of a [`DotStaging::PersistentBulk`] layer (see [`fused_plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedPlan {
    /// Lanes per row group (`P`) of the gate+up tiles.
    pub p_gu: u32,
    /// Lanes per row group (`P`) of the down tiles.
    pub p_d: u32,
    /// Bytes of the weight rows of one shared-memory stage (the larger of the two phases' tiles).
    pub stage_w: u32,
    /// Bytes of a stage's scales (the larger phase's, padded to 128).
    pub stage_s: u32,
    /// Bytes of a stage's quantized activation row (the larger phase's, padded to 128).
    pub stage_a: u32,
    /// Dynamic shared memory of a block: `stages x (stage_w + stage_s + stage_a)`.
    pub shared_bytes: u32,
    /// Blocks of the grid: one per multiprocessor (the kernel's static tile order needs every
    /// block resident at once).
    pub blocks: u32,
}

impl FusedPlan {
    /// Rows of one gate+up tile and of one down tile.
    pub fn tile_rows(&self, rows_per_thread: usize) -> (usize, usize) {
        let threads_rows = (FUSED_CONSUMER_WARPS * 32) as usize * rows_per_thread;
        (
            threads_rows / self.p_gu as usize,
            threads_rows / self.p_d as usize,
        )
    }
}

/// The [`FusedPlan`] of a layer of `hidden` x `ffn` experts with scale groups of `group`, for a
/// kernel of `rows_per_thread` rows per thread and `stages` stages, on `multiprocessors`
/// multiprocessors with `max_shared_bytes` of dynamic shared memory per block; `None` where the
/// kernel cannot run it (the caller then runs [`FUSED_FALLBACK_KERNEL`]).
///
/// Each phase takes the fewest lanes per row (a power of two, at most 32: the row sums are warp
/// shuffles) whose tile of `512 / P` rows (8 warps x 32 threads x 2 rows) stays within
/// [`FUSED_TILE_BYTES`]. `None` when `group` is not a power of two of at least 32, `hidden` or
/// `ffn` is not a multiple of `group` and of 32, a tile's scales are not whole 16-byte words
/// (bulk copies move multiples of 16 bytes), or `stages` stages do not fit.
pub fn fused_plan(
    hidden: usize,
    ffn: usize,
    group: usize,
    rows_per_thread: usize,
    stages: usize,
    multiprocessors: u32,
    max_shared_bytes: usize,
) -> Option<FusedPlan> {
    let shapes_ok = group.is_power_of_two()
        && group >= 32
        && [hidden, ffn]
            .iter()
            .all(|&k| k > 0 && k.is_multiple_of(group) && k.is_multiple_of(32));
    if !shapes_ok || rows_per_thread == 0 || stages == 0 {
        return None;
    }
    let threads_rows = (FUSED_CONSUMER_WARPS * 32) as usize * rows_per_thread;
    let lanes = |k: usize| -> u32 {
        let mut p = 1u32;
        while p < 32 && (threads_rows / p as usize) * (k / 2) > FUSED_TILE_BYTES {
            p *= 2;
        }
        p
    };
    let (p_gu, p_d) = (lanes(hidden), lanes(ffn));
    // (tile rows, phase rows, k)
    let phases = [
        (threads_rows / p_gu as usize, 2 * ffn, hidden),
        (threads_rows / p_d as usize, hidden, ffn),
    ];
    let mut stage_w = 0;
    let mut scales = 0;
    for (t, rows, k) in phases {
        let row_scale_bytes = k / group * 4;
        let last = rows % t;
        if !(t * row_scale_bytes).is_multiple_of(16) || !(last * row_scale_bytes).is_multiple_of(16)
        {
            return None;
        }
        stage_w = stage_w.max(t * (k / 2));
        scales = scales.max(t * row_scale_bytes);
    }
    let act = [hidden, ffn]
        .iter()
        .map(|&k| dot_activation_bytes(k, DotStaging::PersistentBulk))
        .max()
        .unwrap_or(0);
    let stage_s = scales.div_ceil(128) * 128;
    let stage_a = act.div_ceil(128) * 128;
    let shared = stages * (stage_w + stage_s + stage_a);
    if shared > max_shared_bytes {
        return None;
    }
    Some(FusedPlan {
        p_gu,
        p_d,
        stage_w: u32::try_from(stage_w).ok()?,
        stage_s: u32::try_from(stage_s).ok()?,
        stage_a: u32::try_from(stage_a).ok()?,
        shared_bytes: u32::try_from(shared).ok()?,
        blocks: multiprocessors,
    })
}

/// One weight launch of a layer as a plain read reproduces it: the grid, block and dynamic
/// shared memory of the expert kernel's launch, the distinct expert bytes that launch reads, and
/// whether it is a programmatic dependent launch. [`crate::Kernels::weight_launch_shapes`] gives
/// a prepared launch's; [`crate::Kernels::launch_stream_read_shaped`] reads that many bytes in
/// that shape, the ceiling the kernel is held against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Blocks along x and y (y: the work items of a two-launch layer; 1 for a persistent one).
    pub grid: (u32, u32),
    /// Threads per block.
    pub block: u32,
    /// Dynamic shared memory per block, bytes: a read launched with as much keeps no more
    /// blocks resident per multiprocessor than shared memory lets the kernel keep (registers
    /// may still let the read keep more).
    pub shared_bytes: u32,
    /// Weight and scale bytes of the launch's distinct experts, each counted once (a multiple
    /// of 16 for any [`ExpertGeometry`]).
    pub bytes: u64,
    /// A programmatic dependent launch (sm_90+): it may start while the grid before it drains.
    /// True where every launch the kernel enqueues between its previous weight launch and this
    /// one is programmatic (pre-passes included), so back-to-back reads overlap as the kernel's
    /// layers do and no more.
    pub programmatic: bool,
    /// The launch lets a programmatic launch after it start at once
    /// (`griddepcontrol.launch_dependents` at its start, as the persistent kernel does), not
    /// only when its last block exits (the two-launch kernels' weight launches).
    pub allows_dependents: bool,
}

/// How a layer's weight launches are laid out (the activation pre-passes, which read no expert
/// bytes, are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerLaunches {
    /// One persistent launch ([`DotStaging::PersistentBulk`]) of `blocks` blocks of `block`
    /// threads with `shared_bytes` of dynamic shared memory; it and its gate+up pre-pass are
    /// programmatic launches, and it lets the next layer's launches start at its own start.
    Persistent {
        blocks: u32,
        block: u32,
        shared_bytes: u32,
    },
    /// A gate+up launch, then a down launch, of `blocks[phase]` x `items` blocks of `block`
    /// threads with `shared_bytes[phase]` each. The gate+up launch (or its pre-pass) is a plain
    /// launch; the down launch is programmatic (with its pre-pass, if any) when
    /// `programmatic_down`. Neither lets a launch after it start before its last block exits.
    TwoPhase {
        blocks: [u32; 2],
        shared_bytes: [u32; 2],
        items: u32,
        block: u32,
        programmatic_down: bool,
    },
}

/// The weight launches of a layer laid out as `layer` whose work items name `distinct` distinct
/// experts of geometry `geom`: one [`LaunchShape`] per launch, in launch order. A persistent
/// launch reads whole experts; a gate+up launch their [`ExpertGeometry::gate_up_bytes`], a down
/// launch their [`ExpertGeometry::down_bytes`].
pub fn weight_launch_shapes(
    geom: ExpertGeometry,
    distinct: usize,
    layer: LayerLaunches,
) -> Vec<LaunchShape> {
    let d = distinct as u64;
    match layer {
        LayerLaunches::Persistent {
            blocks,
            block,
            shared_bytes,
        } => vec![LaunchShape {
            grid: (blocks, 1),
            block,
            shared_bytes,
            bytes: d * geom.expert_bytes() as u64,
            programmatic: true,
            allows_dependents: true,
        }],
        LayerLaunches::TwoPhase {
            blocks,
            shared_bytes,
            items,
            block,
            programmatic_down,
        } => [geom.gate_up_bytes(), geom.down_bytes()]
            .into_iter()
            .enumerate()
            .map(|(phase, bytes)| LaunchShape {
                grid: (blocks[phase], items),
                block,
                shared_bytes: shared_bytes[phase],
                bytes: d * bytes as u64,
                programmatic: phase == 1 && programmatic_down,
                allows_dependents: false,
            })
            .collect(),
    }
}

/// Output rows per row group of the union kernel (`R` of `moe_matvec_t8` in `cuda/moe.cu`).
pub const UNION_ROWS: usize = 2;
/// Blocks per multiprocessor a launch aims for: the kernels keep 2 or 3 blocks resident per
/// multiprocessor (their register budget, `__launch_bounds__` in `cuda/moe.cu`), so 8 gives
/// 3 to 4 waves, whose last, partial wave still has thousands of loads in flight (a design
/// choice, not tuned).
pub const BLOCKS_PER_MULTIPROCESSOR: usize = 8;

/// Rows one block covers with `lanes` threads per row and `rows_per_group` rows per row group.
pub fn rows_per_block(lanes: u32, rows_per_group: usize) -> usize {
    rows_per_group * (BLOCK_THREADS / lanes) as usize
}

/// The largest power of two not above `n`, at most `max` (itself a power of two); 1 when `n`
/// is 0. Caps lanes per row and warps per tile: more threads than 16-byte chunks or K blocks
/// would sit idle.
fn pow2_at_most(n: usize, max: u32) -> u32 {
    match n.checked_ilog2() {
        Some(log) => (1usize << log).min(max as usize) as u32,
        None => 1,
    }
}

/// Lanes per row (`P`, a power of two in 1..=[`BLOCK_THREADS`]) for one phase of a launch:
/// `rows` output rows of `chunks` 16-byte chunks each, for `items` work items, `rows_per_group`
/// rows per row group, on a GPU of `multiprocessors` multiprocessors.
///
/// Starts at 2 (two lanes read a full 32-byte sector of a row) and doubles while the grid has
/// fewer than [`BLOCKS_PER_MULTIPROCESSOR`] blocks per multiprocessor, but never past the
/// largest power of two not above `chunks` (more lanes than chunks would sit idle).
pub fn lanes_per_row(
    rows: usize,
    chunks: usize,
    items: usize,
    rows_per_group: usize,
    multiprocessors: u32,
) -> u32 {
    let cap = pow2_at_most(chunks, BLOCK_THREADS);
    let target = BLOCKS_PER_MULTIPROCESSOR * multiprocessors as usize;
    let blocks = |p: u32| items * rows.div_ceil(rows_per_block(p, rows_per_group));
    let mut p = cap.min(2);
    while p < cap && blocks(p) < target {
        p *= 2;
    }
    p
}

/// Lanes per row (`P`, a power of two in 1..=[`BLOCK_THREADS`]) that fit a phase in one wave:
/// the largest `P` whose grid (`items` x row tiles of [`rows_per_block`]`(P, rows_per_group)`
/// rows) has at most `resident_per_multiprocessor x multiprocessors` blocks, so no block waits
/// for another to finish. Never past the largest power of two not above `chunks` (idle lanes);
/// 1 when even `P = 1` needs more than one wave (then the launch runs in several waves).
pub fn lanes_per_row_one_wave(
    rows: usize,
    chunks: usize,
    items: usize,
    rows_per_group: usize,
    multiprocessors: u32,
    resident_per_multiprocessor: u32,
) -> u32 {
    let cap = pow2_at_most(chunks, BLOCK_THREADS);
    let capacity = resident_per_multiprocessor as usize * multiprocessors as usize;
    let blocks = |p: u32| items * rows.div_ceil(rows_per_block(p, rows_per_group));
    let mut p = 1;
    while p < cap && blocks(p * 2) <= capacity {
        p *= 2;
    }
    p
}

/// Rows of one warp tile of the tensor-core kernel (the M of `mma.m16n8k16`).
pub const TC_TILE_ROWS: usize = 16;
/// Warps per block of the tensor-core kernel (`TC_WARPS` in `cuda/moe.cu`).
pub const TC_WARPS: u32 = 8;
/// Columns per K block of the tensor-core kernel: 4 lanes x 32 int4 weights. Groups must be a
/// multiple of it for that kernel (one scale per row and K block).
pub const TC_K_BLOCK: usize = 128;

/// True when the tensor-core kernel can run `group`: a multiple of [`TC_K_BLOCK`].
pub fn tensor_core_group(group: usize) -> bool {
    group.is_multiple_of(TC_K_BLOCK)
}

/// Rows one block of the tensor-core kernel covers with `ks` warps per row tile.
pub fn tc_rows_per_block(ks: u32) -> usize {
    TC_TILE_ROWS * (TC_WARPS / ks) as usize
}

/// Warps per row tile (`ks`, a power of two in 1..=[`TC_WARPS`]) of the tensor-core kernel for
/// one phase: `rows` output rows of `k_blocks` 128-column blocks, for `items` work items.
///
/// The warps of a tile split its K blocks; like [`lanes_per_row`], starts at 1 and doubles while
/// the grid has fewer than [`BLOCKS_PER_MULTIPROCESSOR`] blocks per multiprocessor, never past
/// the largest power of two not above `k_blocks`.
pub fn warps_per_tile(rows: usize, k_blocks: usize, items: usize, multiprocessors: u32) -> u32 {
    let cap = pow2_at_most(k_blocks, TC_WARPS);
    let target = BLOCKS_PER_MULTIPROCESSOR * multiprocessors as usize;
    let blocks = |ks: u32| items * rows.div_ceil(tc_rows_per_block(ks));
    let mut ks = 1;
    while ks < cap && blocks(ks) < target {
        ks *= 2;
    }
    ks
}

#[cfg(test)]
mod tests {
    use super::pow2_at_most;

    #[test]
    fn pow2_at_most_is_the_floor_power_of_two_under_the_cap() {
        // (n, max) -> by hand: 0 and 1 give 1; 5 -> 4; 8 -> 8; 100 -> 64, capped at 32
        for (n, max, want) in [
            (0, 32, 1),
            (1, 32, 1),
            (5, 32, 4),
            (8, 32, 8),
            (100, 32, 32),
        ] {
            assert_eq!(pow2_at_most(n, max), want, "n {n} max {max}");
        }
        assert_eq!(pow2_at_most(usize::MAX, 8), 8);
    }
}
