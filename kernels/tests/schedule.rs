//! The persistent kernel's tile walk and its tail split (CPU model of `fused_tile`).

use kernels::launch::{fused_plan, FusedPlan};
use kernels::schedule::{FusedSchedule, FusedTile};

/// Opted-in shared memory of an H200 block (232448 B) less the dot kernels' static reserve.
const MAX_SHARED: usize = 232448 - 1024;

fn plan(hidden: usize, ffn: usize, group: usize, blocks: u32) -> FusedPlan {
    fused_plan(hidden, ffn, group, 2, 3, blocks, MAX_SHARED).unwrap()
}

/// 60 slots of 2560x640 on 132 multiprocessors: 60 x (40 gate+up + 20 down) = 3600 tiles,
/// 3600 = 27 x 132 + 36, so the last 36 tiles (all down tiles of 128 rows: items 58 from its
/// tile 4, and 59) are cut into 132 / 36 = 3 pieces of ceil(128 / 3) = 43 -> 44 rows (a
/// multiple of 4): 44, 44, 40; 3564 + 3 x 36 = 3672 virtual tiles.
#[test]
fn sixty_slots_cut_their_last_round_into_three_pieces() {
    let s = FusedSchedule::new(&plan(2560, 640, 128, 132), 60, 2560, 640, 2);
    assert_eq!((s.whole_tiles, s.pieces, s.piece_rows), (3564, 3, 44));
    assert_eq!(s.tiles(), 3672);
    let t = |down, item, row0, rows| FusedTile {
        down,
        item,
        row0,
        rows,
    };
    // Tile 2399 is item 59's last gate+up tile (rows 1248..1280), 3563 item 58's tile 3.
    assert_eq!(s.tile(2399), t(false, 59, 1248, 32));
    assert_eq!(s.tile(3563), t(true, 58, 384, 128));
    assert_eq!(s.tile(3564), t(true, 58, 512, 44));
    assert_eq!(s.tile(3565), t(true, 58, 556, 44));
    assert_eq!(s.tile(3566), t(true, 58, 600, 40));
    // The last: piece 2 of item 59's down tile 19 (rows 2432..2560).
    assert_eq!(s.tile(3671), t(true, 59, 2520, 40));
}

/// Nothing is cut where the tiles fill whole rounds (44 items of 2080x544: 44 x (34 + 17) =
/// 2244 = 17 x 132), where the last round holds gate+up tiles (2 items: 102 tiles, all in the
/// first round), or where it is more than half full (36 items: 1836 = 13 x 132 + 120).
#[test]
fn nothing_is_cut_where_a_cut_would_not_help_or_is_not_allowed() {
    let p = plan(2080, 544, 32, 132);
    for items in [44, 2, 36] {
        let s = FusedSchedule::new(&p, items, 2080, 544, 2);
        assert_eq!(
            (s.pieces, s.whole_tiles, s.piece_rows),
            (1, items * 51, 128)
        );
        assert_eq!(s.tiles(), items * 51);
    }
}

/// Rows each block stages, per item and phase, walking tiles b, b + G, ... as the kernel does.
fn walk(s: &FusedSchedule) -> (Vec<[Vec<u32>; 2]>, Vec<u64>) {
    let rows = [
        vec![0; s.phase_rows.0 as usize],
        vec![0; s.phase_rows.1 as usize],
    ];
    let mut cover = vec![rows; s.items as usize];
    let mut per_block = vec![0u64; s.blocks as usize];
    for v in 0..s.tiles() {
        let f = s.tile(v);
        let rows = &mut cover[f.item as usize][f.down as usize];
        for r in f.row0..f.row0 + f.rows {
            rows[r as usize] += 1;
        }
        // Bytes of a row: hidden / 2 for gate+up rows, ffn / 2 for down rows.
        let row_bytes = if f.down {
            s.phase_rows.0 / 4
        } else {
            s.phase_rows.1 / 2
        };
        per_block[(v % s.blocks) as usize] += (f.rows * row_bytes) as u64;
    }
    (cover, per_block)
}

/// Over geometries, item counts and grids: every row of every item's two phases is staged
/// exactly once, pieces are whole 16-byte scale words (rows a multiple of 4 from a multiple
/// of 4), and no block stages more weight bytes than the whole rounds' share plus one piece.
#[test]
fn the_cut_walk_covers_every_row_once_and_bounds_each_block() {
    let mut cut = 0;
    for (h, f, g) in [
        (2560, 640, 128),
        (2080, 544, 32),
        (2048, 768, 128),
        (256, 128, 64),
    ] {
        for blocks in [24u32, 78, 132] {
            let p = plan(h, f, g, blocks);
            let (t_gu, t_d) = p.tile_rows(2);
            let tile_bytes = (t_gu * h / 2).max(t_d * f / 2) as u64;
            for items in 1..=70 {
                let s = FusedSchedule::new(&p, items, h as u32, f as u32, 2);
                let (cover, per_block) = walk(&s);
                for c in &cover {
                    assert!(c[0].iter().chain(&c[1]).all(|&n| n == 1), "{h}x{f} {items}");
                }
                if s.pieces > 1 {
                    cut += 1;
                    assert_eq!(s.piece_rows % 4, 0);
                    assert!(s.tiles() - s.whole_tiles <= blocks);
                    let bound = (s.whole_tiles / blocks) as u64 * tile_bytes
                        + (s.piece_rows as usize * f / 2) as u64;
                    let worst = *per_block.iter().max().unwrap();
                    assert!(
                        worst <= bound,
                        "{h}x{f} {items} on {blocks}: {worst} > {bound}"
                    );
                }
            }
        }
    }
    eprintln!("{cut} cut walks");
    assert!(cut > 100, "only {cut} of the walks were cut");
}

mod cases;

/// The GPU test's cut case on an H200's 132 multiprocessors: 3 slots, 6 pieces of 24 rows
/// (the hand computation in `cases::cut_tail`'s doc).
#[test]
fn the_gpu_cut_case_is_three_slots_on_an_h200() {
    let (case, s) = cases::cut_tail(132);
    assert_eq!(case.sel.len(), 3);
    assert_eq!((s.whole_tiles, s.pieces, s.piece_rows), (132, 6, 24));
    let last = s.tiles() - 6; // item 2's 32-row last down tile
    let rows: Vec<u32> = (last..s.tiles()).map(|v| s.tile(v).rows).collect();
    assert_eq!(rows, [24, 8, 0, 0, 0, 0]);
}
