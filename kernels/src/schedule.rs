//! The tile schedule of a persistent ([`crate::launch::DotStaging::PersistentBulk`]) layer
//! launch: which rows of which work item each block stages, in which order. Pure CPU: the host
//! computes the tail split here and passes it to the kernel, and [`FusedSchedule::tile`] is the
//! CPU model of the kernel's `fused_tile` (`cuda/moe_dot.cu`), so the split is tested without a
//! GPU.
//!
//! The kernel's blocks walk virtual tiles `b, b + G, b + 2G, ...` (`G` blocks, one per
//! multiprocessor): the gate+up tiles of every item, then the down tiles. With `N` whole tiles,
//! `N % G` blocks would take one tile more than the others, a last round in which the rest of
//! the multiprocessors idle (60 slots of 2560x640 on 132 multiprocessors: 3600 tiles, 36 blocks
//! take 28 and 96 take 27). The tail split cuts each tile of that last, partial round into
//! pieces of whole rows, so up to `G` blocks share it: there, 36 tiles of 128 down rows become
//! 108 pieces of 44, 44 and 40 rows, and no block stages more than 27.34 tiles' worth of rows.

use crate::launch::FusedPlan;

/// Rows of a piece are a multiple of this: a row's scales are `k / group` f32 (4 bytes each),
/// so 4 rows of them, and their offset within the tile, are whole 16-byte words, which bulk
/// copies need (moving multiples of 16 bytes from 16-byte aligned addresses).
pub const PIECE_ROW_MULTIPLE: u32 = 4;

/// One virtual tile of a [`FusedSchedule`]: `rows` rows from `row0` of phase `down` (false:
/// gate+up, whose rows are the 2 ffn gate and up rows) of work item `item`. `rows` may be 0
/// (a piece past the end of a short last tile): the kernel stages nothing for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedTile {
    pub down: bool,
    pub item: u32,
    pub row0: u32,
    pub rows: u32,
}

/// The tile walk of one persistent launch of `items` work items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedSchedule {
    /// Work items of the launch.
    pub items: u32,
    /// Rows of a gate+up tile and of a down tile (the plan's `tile_rows`).
    pub tile_rows: (u32, u32),
    /// Rows of an item's gate+up phase (2 ffn) and down phase (hidden).
    pub phase_rows: (u32, u32),
    /// Blocks of the grid (`G`).
    pub blocks: u32,
    /// Tiles walked whole, from the first; the tiles after them are cut into pieces.
    pub whole_tiles: u32,
    /// Pieces each tile after `whole_tiles` is cut into (1 where nothing is cut).
    pub pieces: u32,
    /// Rows of each piece but the last of a tile (a multiple of [`PIECE_ROW_MULTIPLE`]; the
    /// down tile's rows where nothing is cut).
    pub piece_rows: u32,
}

impl FusedSchedule {
    /// The schedule of `items` items of `hidden` x `ffn` experts under `plan`, for a kernel of
    /// `rows_per_thread` rows per consumer thread. The tiles of the last, partial round
    /// (`tiles % blocks` of them) are cut into `blocks / (tiles % blocks)` pieces when that is at
    /// least 2 and they are all down tiles (the gate+up tiles keep their places: the block that
    /// takes an item's last gate+up tile quantizes its down activations); otherwise nothing is
    /// cut.
    pub fn new(
        plan: &FusedPlan,
        items: u32,
        hidden: u32,
        ffn: u32,
        rows_per_thread: usize,
    ) -> Self {
        let (t_gu, t_d) = plan.tile_rows(rows_per_thread);
        let mut s = Self {
            items,
            tile_rows: (t_gu as u32, t_d as u32),
            phase_rows: (2 * ffn, hidden),
            blocks: plan.blocks,
            whole_tiles: 0,
            pieces: 1,
            piece_rows: t_d as u32,
        };
        let total = s.whole_count();
        s.whole_tiles = total;
        let rem = total % s.blocks.max(1);
        let gate_up_tiles = items * s.phase_rows.0.div_ceil(s.tile_rows.0);
        if rem == 0 || total - rem < gate_up_tiles {
            return s;
        }
        let want = s.blocks / rem;
        let m = PIECE_ROW_MULTIPLE;
        let rows = s.tile_rows.1.div_ceil(want.max(1)).div_ceil(m) * m;
        let pieces = s.tile_rows.1.div_ceil(rows);
        if pieces >= 2 {
            s.whole_tiles = total - rem;
            s.pieces = pieces;
            s.piece_rows = rows;
        }
        s
    }

    /// Whole tiles of the launch before any cut: items x (gate+up tiles + down tiles).
    fn whole_count(&self) -> u32 {
        let per_item = self.phase_rows.0.div_ceil(self.tile_rows.0)
            + self.phase_rows.1.div_ceil(self.tile_rows.1);
        self.items * per_item
    }

    /// Virtual tiles the blocks walk: the whole tiles, then the pieces of the cut ones.
    pub fn tiles(&self) -> u32 {
        self.whole_tiles + (self.whole_count() - self.whole_tiles) * self.pieces
    }

    /// Whole tile `t` (below [`FusedSchedule::whole_count`]), as the kernel's `fused_tile`
    /// decodes it before any cut.
    fn whole_tile(&self, t: u32) -> FusedTile {
        let nt_gu = self.phase_rows.0.div_ceil(self.tile_rows.0);
        let ngu = self.items * nt_gu;
        let (down, t, nt, tr, rows) = if t < ngu {
            (false, t, nt_gu, self.tile_rows.0, self.phase_rows.0)
        } else {
            let nt_d = self.phase_rows.1.div_ceil(self.tile_rows.1);
            (true, t - ngu, nt_d, self.tile_rows.1, self.phase_rows.1)
        };
        let row0 = (t % nt) * tr;
        FusedTile {
            down,
            item: t / nt,
            row0,
            rows: tr.min(rows - row0),
        }
    }

    /// Virtual tile `v` (below [`FusedSchedule::tiles`]): a whole tile, or piece
    /// `(v - whole_tiles) % pieces` of whole tile `whole_tiles + (v - whole_tiles) / pieces`.
    pub fn tile(&self, v: u32) -> FusedTile {
        if v < self.whole_tiles {
            return self.whole_tile(v);
        }
        let u = v - self.whole_tiles;
        let mut f = self.whole_tile(self.whole_tiles + u / self.pieces);
        let skip = (u % self.pieces) * self.piece_rows;
        f.row0 += skip;
        f.rows = f.rows.saturating_sub(skip).min(self.piece_rows);
        f
    }
}
