//! Launch geometry of the expert kernels: how many threads share a row and how many rows a
//! block covers. Pure CPU, so the choice is tested without a GPU.
//!
//! A block of [`BLOCK_THREADS`] threads is split into row groups of `P` consecutive threads
//! ("lanes per row"); a row group owns `R` consecutive output rows and its threads split each
//! row's 16-byte chunks (32 int4 weights) round-robin. Small `P` means few, long-running blocks;
//! large `P` means many short ones. [`lanes_per_row`] takes the smallest `P` that still gives
//! every multiprocessor [`BLOCKS_PER_MULTIPROCESSOR`] blocks, so the weight stream has enough
//! loads in flight and the last wave of blocks is short.

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
    /// Weight chunks (16 bytes, 32 int4 weights) per row in one register batch (`J`).
    pub batch_chunks: usize,
    /// Register batches in the ring (`NB`): `NB - 1` batches of loads are in flight per thread.
    pub ring: usize,
    /// How the grid is sized (lanes per row).
    pub grid: DotGrid,
    /// Where the weights in flight wait (registers or a shared-memory ring) and how many
    /// launches a layer takes.
    pub staging: DotStaging,
    /// A kernel (by name, in [`DOT_KERNELS`]) that a launch runs instead when its gate+up
    /// launch fits in one wave of blocks with at least [`COALESCED_LANES`] lanes per row (the
    /// one-wave branch of [`DotGrid::Adaptive`]): the per-launch choice of the sixth pass's
    /// default, see [`DotKernel::for_launch`].
    pub one_wave_partner: Option<&'static str>,
}

/// How a dot kernel keeps its weight loads in flight, and how a layer is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotStaging {
    /// `DOT_ENTRY` kernels: a ring of `ring` register batches (`ld.global.nc`), two launches
    /// per layer (gate+up, then down).
    Registers,
    /// `STAGED_ENTRY` kernels: a ring of `ring` stages in shared memory filled by `cp.async`
    /// (`ring - 1` batches in flight per thread, no registers held), two launches per layer.
    Shared,
    /// `FUSED_ENTRY` kernels: the [`DotStaging::Shared`] ring, and the whole layer in one
    /// launch: blocks take gate+up then down tiles in ticket order, and a down tile requests
    /// its first weights before it waits for its slot's gate+up rows (per-slot counters), so
    /// the down weights stream while the last gate+up tiles finish and no launch boundary
    /// drains the GPU in between.
    Fused,
    /// `BULK_ENTRY` kernels: thread 0 requests the block's whole weight tile (its rows are one
    /// contiguous range) with bulk copies (`cp.async.bulk`, sm_90+) completing on a shared
    /// barrier while the block quantizes its activations; two launches per layer. The tile is
    /// sized by the grid ([`bulk_lanes`]), not by `batch_chunks` / `ring` (both 1).
    Bulk,
    /// `MMA_ENTRY` kernels: the products on the int8 tensor cores (`mma.sync.m16n8k32.s8`,
    /// sm_80+) instead of `dp4a`, same integer arithmetic; warp tiles of 16 rows split over
    /// `ks` warps along k ([`warps_per_tile`], the tensor-core union kernel's grid), a register
    /// ring of `ring` 128-column super-chunks (`batch_chunks` = 4 chunks); two launches per
    /// layer. Needs hidden and ffn multiples of [`TC_K_BLOCK`] and compute capability 8.0:
    /// elsewhere the launch runs [`DOT_FALLBACK_KERNEL`].
    Mma,
    /// `NIB_ENTRY` kernels (sixth pass): the [`DotStaging::Registers`] ring with unsigned
    /// nibbles (one LOP3 per half word, `dp4a.u32.s32`, the zero point removed once per chunk
    /// with the chunk's integer activation sum) and a shift for the scale group; activations
    /// still quantized per block. Groups must be powers of two (else [`DOT_FALLBACK_KERNEL`]).
    Nibbles,
    /// `PREQ_ENTRY` kernels (sixth pass): [`DotStaging::Nibbles`] whose activations a pre-pass
    /// (`moe_dot_prep2`, one block per token for gate+up, per slot for down, SiLU included)
    /// quantizes once per launch into a scratch buffer; the weight kernel only copies its row
    /// to shared memory. Four launches per layer (pre-pass, gate+up, pre-pass, down).
    Prequant,
    /// `PREQ8_ENTRY` kernels (sixth pass, reported only): [`DotStaging::Prequant`] with one
    /// int8 limb per activation (`|x| <= 127`, llama.cpp q8_1 style, 2 `dp4a` per 8 weights
    /// instead of 4). Cannot hold the stated tolerance: shows what the 16-bit limbs cost.
    Prequant8,
    /// `NIBP_ENTRY` kernels (sixth pass): [`DotStaging::Nibbles`] whose down launch is a
    /// programmatic dependent launch (sm_90+: it starts before the gate+up launch ends,
    /// requests its first weights, then waits for the gate+up rows).
    NibblesPdl,
    /// `PREQP_ENTRY` kernels (sixth pass): [`DotStaging::Prequant`] with every launch after the
    /// layer's first a programmatic dependent launch (sm_90+): each weight kernel starts while
    /// its pre-pass runs and requests its first weights before it waits for the activations.
    PrequantPdl,
    /// `PERS_ENTRY` kernels (sixth pass): [`DotStaging::PrequantPdl`] with persistent blocks:
    /// a 1-D grid of [`persistent_blocks`] blocks, each taking every grid-th row tile of the
    /// launch, so each block runs the same number of tiles and no last, partly filled wave of
    /// blocks leaves multiprocessors idle (60 slots of 2560x640: 1200 tiles on 396 resident
    /// blocks are 3.03 waves).
    PrequantPersistent,
}

impl DotStaging {
    /// The `cuda/moe_dot.cu` macro that defines kernels of this staging.
    pub fn entry_macro(self) -> &'static str {
        match self {
            DotStaging::Registers => "DOT_ENTRY",
            DotStaging::Shared => "STAGED_ENTRY",
            DotStaging::Fused => "FUSED_ENTRY",
            DotStaging::Bulk => "BULK_ENTRY",
            DotStaging::Mma => "MMA_ENTRY",
            DotStaging::Nibbles => "NIB_ENTRY",
            DotStaging::Prequant => "PREQ_ENTRY",
            DotStaging::Prequant8 => "PREQ8_ENTRY",
            DotStaging::NibblesPdl => "NIBP_ENTRY",
            DotStaging::PrequantPdl => "PREQP_ENTRY",
            DotStaging::PrequantPersistent => "PERS_ENTRY",
        }
    }

    /// True for the sixth pass's kernels, which need the group to be a power of two (the
    /// chunk's scale group is a shift) and keep per-chunk integer activation sums.
    pub fn unsigned_nibbles(self) -> bool {
        matches!(
            self,
            DotStaging::Nibbles
                | DotStaging::Prequant
                | DotStaging::Prequant8
                | DotStaging::NibblesPdl
                | DotStaging::PrequantPdl
                | DotStaging::PrequantPersistent
        )
    }

    /// True when the layer's launches after its first are programmatic dependent launches
    /// (on compute capability 9.0+; plain launches before, where the kernels' waits are no-ops).
    pub fn programmatic(self) -> bool {
        matches!(
            self,
            DotStaging::NibblesPdl | DotStaging::PrequantPdl | DotStaging::PrequantPersistent
        )
    }

    /// Activation limbs of the pre-pass (2 for [`DotStaging::Prequant`], 1 for
    /// [`DotStaging::Prequant8`]); `None` for kernels without a pre-pass.
    pub fn prepass_limbs(self) -> Option<usize> {
        match self {
            DotStaging::Prequant | DotStaging::PrequantPdl | DotStaging::PrequantPersistent => {
                Some(2)
            }
            DotStaging::Prequant8 => Some(1),
            _ => None,
        }
    }
}

/// Bytes of one quantized activation row of `k` values in a dot kernel's shared memory (and,
/// for the pre-pass kernels, in their scratch buffer). Before the sixth pass: two int8 limbs
/// per value and one f32 step per 32 values, `2 k + 4 k / 32`. Sixth pass
/// ([`DotStaging::unsigned_nibbles`]): `limbs` int8 limbs per value, then per 32-value chunk an
/// f32 step and an int32 activation sum, padded to 16 bytes:
/// `16 (limbs k / 16 + ceil(2 k / 32 / 4))` (`act_row_u4` in `cuda/moe_dot.cu`).
pub fn dot_activation_bytes(k: usize, staging: DotStaging) -> usize {
    let chunks = k / 32;
    match staging {
        DotStaging::Nibbles
        | DotStaging::Prequant
        | DotStaging::NibblesPdl
        | DotStaging::PrequantPdl
        | DotStaging::PrequantPersistent => 16 * (4 * chunks + (2 * chunks).div_ceil(4)),
        DotStaging::Prequant8 => 16 * (2 * chunks + (2 * chunks).div_ceil(4)),
        _ => 2 * k + 4 * chunks,
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
    /// else [`lanes_per_row`]. Measured on the H200 (BENCHMARKS.md issue 7, fourth pass): one
    /// wave is 1.2-1.8x faster for 8-slot launches (Qwen3-30B-A3B layer 17.4 vs 25.6 µs, where
    /// it gives 8-16 lanes per row) and 1.4x slower for 60 slots of 2560x640 (92.6 vs 64.7 µs,
    /// where it gives 1-2 lanes per row, so each warp load touches 16-32 rows).
    Adaptive,
}

/// Lanes per row from which one warp load instruction reads whole 128-byte lines of a row
/// (8 lanes x 16-byte chunks): the threshold of [`DotGrid::Adaptive`].
pub const COALESCED_LANES: u32 = 8;

impl DotKernel {
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
        let one = lanes_per_row_one_wave(
            rows,
            chunks,
            items,
            self.rows,
            multiprocessors,
            self.min_blocks,
        );
        if one >= COALESCED_LANES {
            DOT_KERNELS
                .iter()
                .position(|d| d.name == partner)
                .unwrap_or(index)
        } else {
            index
        }
    }

    /// Bytes of dynamic shared memory the weight ring takes per block (0 for
    /// [`DotStaging::Registers`]): `ring` stages x `batch_chunks` x `rows` x
    /// [`BLOCK_THREADS`] slots of 16 weight bytes and one 4-byte scale.
    pub fn ring_bytes(&self) -> usize {
        match self.staging {
            DotStaging::Registers
            | DotStaging::Bulk
            | DotStaging::Mma
            | DotStaging::Nibbles
            | DotStaging::Prequant
            | DotStaging::Prequant8
            | DotStaging::NibblesPdl
            | DotStaging::PrequantPdl
            | DotStaging::PrequantPersistent => 0,
            DotStaging::Shared | DotStaging::Fused => {
                self.ring * self.batch_chunks * self.rows * BLOCK_THREADS as usize * (16 + 4)
            }
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
/// lines). All compute the same integer sums per 32-column chunk; they differ in rows per lane,
/// occupancy, register ring depth and grid sizing (the `moe_dot_w_*` kernels: one wave, fourth
/// pass), and, from the fifth pass, in [`DotStaging`]: `moe_dot_s_*` cp.async shared-memory
/// rings, `moe_dot_f_*` the same fused into one launch per layer, `moe_dot_t_*` bulk-copy tiles,
/// `moe_dot_m_*` int8 tensor cores. Fifth-pass variants slower than these on every geometry
/// were dropped; their figures are in BENCHMARKS.md (issue 7, fifth pass).
pub const DOT_KERNELS: [DotKernel; 28] = [
    DotKernel {
        name: "moe_dot_r2b3",
        rows: 2,
        min_blocks: 3,
        batch_chunks: 2,
        ring: 2,
        grid: DotGrid::Waves,
        staging: DotStaging::Registers,
        one_wave_partner: None,
    },
    DotKernel {
        name: "moe_dot_r2b4",
        rows: 2,
        min_blocks: 4,
        batch_chunks: 2,
        ring: 2,
        grid: DotGrid::Waves,
        staging: DotStaging::Registers,
        one_wave_partner: None,
    },
    DotKernel {
        name: "moe_dot_r4b2",
        rows: 4,
        min_blocks: 2,
        batch_chunks: 2,
        ring: 2,
        grid: DotGrid::Waves,
        staging: DotStaging::Registers,
        one_wave_partner: None,
    },
    DotKernel {
        name: "moe_dot_r1b4",
        rows: 1,
        min_blocks: 4,
        batch_chunks: 2,
        ring: 2,
        grid: DotGrid::Waves,
        staging: DotStaging::Registers,
        one_wave_partner: None,
    },
    DotKernel {
        name: "moe_dot_w_r2j2n2b3",
        rows: 2,
        min_blocks: 3,
        batch_chunks: 2,
        ring: 2,
        grid: DotGrid::OneWave,
        staging: DotStaging::Registers,
        one_wave_partner: None,
    },
    DotKernel {
        name: "moe_dot_w_r2j2n3b3",
        rows: 2,
        min_blocks: 3,
        batch_chunks: 2,
        ring: 3,
        grid: DotGrid::OneWave,
        staging: DotStaging::Registers,
        one_wave_partner: None,
    },
    DotKernel {
        name: "moe_dot_w_r2j1n4b3",
        rows: 2,
        min_blocks: 3,
        batch_chunks: 1,
        ring: 4,
        grid: DotGrid::OneWave,
        staging: DotStaging::Registers,
        one_wave_partner: None,
    },
    DotKernel {
        name: "moe_dot_w_r2j2n4b2",
        rows: 2,
        min_blocks: 2,
        batch_chunks: 2,
        ring: 4,
        grid: DotGrid::OneWave,
        staging: DotStaging::Registers,
        one_wave_partner: None,
    },
    DotKernel {
        name: "moe_dot_a_r2b3",
        rows: 2,
        min_blocks: 3,
        batch_chunks: 2,
        ring: 2,
        grid: DotGrid::Adaptive,
        staging: DotStaging::Registers,
        one_wave_partner: None,
    },
    staged("moe_dot_s_r2j2s3b3", 2, 2, 3, 3, DotStaging::Shared),
    staged("moe_dot_f_r2j2s3b3", 2, 2, 3, 3, DotStaging::Fused),
    staged("moe_dot_f_r2j1s4b4", 2, 1, 4, 4, DotStaging::Fused),
    bulk("moe_dot_t_r2b4", 2, 4),
    mma("moe_dot_m_n3b4", 3, 4),
    sixth("moe_dot_u_r2b3", 2, 2, 2, 3, DotStaging::Nibbles),
    sixth("moe_dot_q_r2b3", 2, 2, 2, 3, DotStaging::Prequant),
    sixth("moe_dot_q_r2j1n3b4", 2, 1, 3, 4, DotStaging::Prequant),
    sixth("moe_dot_up_r2b3", 2, 2, 2, 3, DotStaging::NibblesPdl),
    sixth("moe_dot_qp_r2b3", 2, 2, 2, 3, DotStaging::PrequantPdl),
    sixth("moe_dot_qp_r2j1n3b4", 2, 1, 3, 4, DotStaging::PrequantPdl),
    sixth(
        "moe_dot_qr_r2b3",
        2,
        2,
        2,
        3,
        DotStaging::PrequantPersistent,
    ),
    sixth(
        "moe_dot_qr_r2j1n3b4",
        2,
        1,
        3,
        4,
        DotStaging::PrequantPersistent,
    ),
    sixth(
        "moe_dot_qr_r1j1n3b6",
        1,
        1,
        3,
        6,
        DotStaging::PrequantPersistent,
    ),
    chooser("moe_dot_xp_r2j1n3b4", 2, 1, 3, 4, DotStaging::PrequantPdl),
    chooser(
        "moe_dot_xr_r2b3",
        2,
        2,
        2,
        3,
        DotStaging::PrequantPersistent,
    ),
    chooser(
        "moe_dot_xr_r2j1n3b4",
        2,
        1,
        3,
        4,
        DotStaging::PrequantPersistent,
    ),
    chooser(
        "moe_dot_xr_r1j1n3b6",
        1,
        1,
        3,
        6,
        DotStaging::PrequantPersistent,
    ),
    sixth("moe_dot_q8_r2b3", 2, 2, 2, 3, DotStaging::Prequant8),
];

/// A sixth-pass kernel that chooses per launch ([`DotKernel::one_wave_partner`]): its own
/// code (arguments as [`sixth`]) for launches of several waves, `moe_dot_up_r2b3` where the
/// gate+up launch fits in one wave.
const fn chooser(
    name: &'static str,
    rows: usize,
    batch_chunks: usize,
    ring: usize,
    min_blocks: u32,
    staging: DotStaging,
) -> DotKernel {
    DotKernel {
        one_wave_partner: Some("moe_dot_up_r2b3"),
        ..sixth(name, rows, batch_chunks, ring, min_blocks, staging)
    }
}

/// A sixth-pass kernel ([`DotStaging::unsigned_nibbles`]) with the [`DotGrid::Adaptive`] grid:
/// `name`, rows per row group, chunks per batch, batches in the register ring, resident blocks.
const fn sixth(
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
    }
}

/// A bulk-copy kernel (fifth pass): `name`, rows per row group, resident blocks per
/// multiprocessor its tiles are sized for.
const fn bulk(name: &'static str, rows: usize, min_blocks: u32) -> DotKernel {
    DotKernel {
        name,
        rows,
        min_blocks,
        batch_chunks: 1,
        ring: 1,
        grid: DotGrid::Adaptive,
        staging: DotStaging::Bulk,
        one_wave_partner: None,
    }
}

/// An int8 tensor-core kernel (fifth pass): `name`, super-chunks in the register ring, resident
/// blocks per multiprocessor. Its grid splits k like the union kernel's ([`warps_per_tile`]),
/// so `grid` is unused.
const fn mma(name: &'static str, ring: usize, min_blocks: u32) -> DotKernel {
    DotKernel {
        name,
        rows: TC_TILE_ROWS,
        min_blocks,
        batch_chunks: 4,
        ring,
        grid: DotGrid::Waves,
        staging: DotStaging::Mma,
        one_wave_partner: None,
    }
}

/// Index into [`DOT_KERNELS`] of the kernel a launch runs instead of a [`DotStaging::Mma`]
/// kernel where that cannot run (k not a multiple of [`TC_K_BLOCK`], or a GPU before compute
/// capability 8.0): `moe_dot_a_r2b3`, the fourth pass's default.
pub const DOT_FALLBACK_KERNEL: usize = 8;

/// Blocks of a persistent kernel ([`DotStaging::PrequantPersistent`]) for `tiles` row tiles
/// (all items) and `capacity` resident blocks (resident blocks per multiprocessor x
/// multiprocessors): the fewest rounds of tiles that fit (`ceil(tiles / capacity)`), then the
/// fewest blocks that take every tile in that many rounds, so every block takes `rounds` tiles
/// or one less. At least 1.
pub fn persistent_blocks(tiles: usize, capacity: usize) -> u32 {
    let rounds = tiles.div_ceil(capacity.max(1)).max(1);
    tiles.div_ceil(rounds).max(1) as u32
}

/// Dynamic shared memory of one block of a bulk-copy kernel, bytes: the weight tile
/// (`rows_per_group x BLOCK_THREADS / lanes` rows of `chunks` 16-byte chunks), its f32 scales
/// (`groups_per_row` per row, padded to 16 bytes), and the quantized activations of `chunks x 32`
/// columns (`2 k + k / 8` bytes, as the other dot kernels).
pub fn bulk_shared_bytes(
    lanes: u32,
    rows_per_group: usize,
    chunks: usize,
    groups_per_row: usize,
) -> usize {
    let rows = rows_per_block(lanes, rows_per_group);
    let k = chunks * 32;
    rows * chunks * 16 + (rows * groups_per_row).div_ceil(4) * 16 + 2 * k + k / 8
}

/// Lanes per row of a bulk-copy kernel: `lanes` (the grid rule's choice), doubled while
/// `min_blocks` blocks of [`bulk_shared_bytes`] plus `per_block_overhead` bytes each would not
/// fit in `shared_per_multiprocessor` bytes, never past the largest power of two not above
/// `chunks` (then the kernel runs with fewer resident blocks).
pub fn bulk_lanes(
    lanes: u32,
    rows_per_group: usize,
    chunks: usize,
    groups_per_row: usize,
    min_blocks: u32,
    shared_per_multiprocessor: usize,
    per_block_overhead: usize,
) -> u32 {
    let cap = pow2_at_most(chunks, BLOCK_THREADS);
    let fits = |p: u32| {
        (bulk_shared_bytes(p, rows_per_group, chunks, groups_per_row) + per_block_overhead)
            * min_blocks as usize
            <= shared_per_multiprocessor
    };
    let mut p = lanes;
    while p < cap && !fits(p) {
        p *= 2;
    }
    p
}

/// A shared-memory staged kernel (fifth pass) with the [`DotGrid::Adaptive`] grid: `name`,
/// rows per row group, chunks per stage, stages, resident blocks per multiprocessor.
const fn staged(
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
    }
}

/// Index into [`DOT_KERNELS`] of the per-slot kernel used by default: `moe_dot_a_r2b3`, the
/// code of `moe_dot_r2b3` (the fastest at 60 slots of 2560x640 on the H200: 64.7 µs, r2b4 65.2,
/// one-wave grids 92.6-131.7) with the [`DotGrid::Adaptive`] grid, which keeps that grid for
/// large launches and takes one wave for small ones (8 slots: 12.4-22.2 vs 14.7-34.0 µs):
/// BENCHMARKS.md issue 7, fourth pass. Still the default after the fifth pass: at 60 slots it
/// took 63.1 µs against 64.2 (fused, `moe_dot_f_r2j1s4b4`), 69.3 (bulk copy), 70.5 (int8
/// tensor cores) and 75.7 (cp.async ring), and 17.3 µs on the Qwen3-30B-A3B layer against
/// 19.6-22.9 (BENCHMARKS.md issue 7, fifth pass).
pub const DEFAULT_DOT_KERNEL: usize = 8;

/// Output rows per row group of the union kernel (`R` of `moe_matvec_t8` in `cuda/moe.cu`).
pub const UNION_ROWS: usize = 2;
/// Blocks per multiprocessor a launch aims for: the kernels keep 2 or 3 blocks resident per
/// multiprocessor (their register budget, `__launch_bounds__` in `cuda/moe.cu`), so 8 gives
/// 3 to 4 waves, whose last, partial wave still has thousands of loads in flight (a design
/// choice, not tuned: BENCHMARKS.md issue 7).
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
