//! Launch geometry and the kernel's magic-number dequantization, checked on the CPU (CI).

use kernels::gpu::SOURCE;
use kernels::launch::{lanes_per_row, rows_per_block, BLOCKS_PER_MULTIPROCESSOR, BLOCK_THREADS};
use kernels::{Variant, WorkList};

/// Hand-computed: 60 per-slot items of 2560x640 on 132 multiprocessors (target 1056 blocks).
/// Gate+up: 1280 rows of 80 chunks; P = 2, 4, 8 give 180, 300, 600 blocks (rows per block
/// 512, 256, 128); P = 16 gives 64 rows per block, 20 x 60 = 1200 blocks.
/// Down: 2560 rows of 20 chunks; P = 8 gives 128 rows per block, 20 x 60 = 1200 blocks.
#[test]
fn sixty_slot_launch_gets_enough_blocks() {
    assert_eq!(lanes_per_row(1280, 80, 60, 4, 132), 16);
    assert_eq!(rows_per_block(16, 4), 64);
    assert_eq!(lanes_per_row(2560, 20, 60, 4, 132), 8);
    assert_eq!(rows_per_block(8, 4), 128);
}

/// Hand-computed: Qwen3-30B-A3B batch 1 (8 items). Gate+up: 1536 rows of 64 chunks; even P = 64
/// (16 rows per block, 96 x 8 = 768 blocks) is short of 1056, and 64 is the cap (64 chunks).
/// Down: 2048 rows of 24 chunks, capped at P = 16 (largest power of two <= 24).
#[test]
fn small_launches_stop_at_the_chunk_count() {
    assert_eq!(lanes_per_row(1536, 64, 8, 4, 132), 64);
    assert_eq!(lanes_per_row(2048, 24, 8, 4, 132), 16);
    assert_eq!(lanes_per_row(64, 1, 1, 4, 132), 1);
    // A huge launch keeps the minimum of 2 lanes (one 32-byte sector per row and load).
    assert_eq!(lanes_per_row(1 << 16, 80, 1000, 4, 132), 2);
}

/// The choice is the smallest power of two reaching the block target, within [min(2, cap), cap].
#[test]
fn lanes_are_the_smallest_power_of_two_reaching_the_target() {
    for rows in [1usize, 7, 64, 1000, 4096] {
        for chunks in [1usize, 2, 3, 20, 64, 80, 224, 1000] {
            for items in [1usize, 8, 60, 300] {
                for r in [2usize, 4] {
                    let p = lanes_per_row(rows, chunks, items, r, 132);
                    assert!(p.is_power_of_two() && p <= BLOCK_THREADS);
                    assert!(p as usize <= chunks.max(1));
                    let blocks = |p: u32| items * rows.div_ceil(rows_per_block(p, r));
                    let target = BLOCKS_PER_MULTIPROCESSOR * 132;
                    if p > 2 {
                        assert!(blocks(p / 2) < target, "{rows} {chunks} {items} {r}: {p}");
                    }
                    if blocks(p) < target {
                        // only when capped by the chunk count or the block size
                        assert!(2 * p as usize > chunks || p == BLOCK_THREADS);
                    }
                }
            }
        }
    }
}

/// `#define NAME <float>f` of the kernel source.
fn source_float(name: &str) -> f32 {
    let line = SOURCE
        .lines()
        .find(|l| l.starts_with(&format!("#define {name} ")))
        .unwrap_or_else(|| panic!("{name} not in moe.cu"));
    let lit = line.split_whitespace().nth(2).unwrap();
    lit.trim_end_matches('f').parse().unwrap()
}

/// The kernel's dequantization (see `dequant8` in moe.cu), replayed with the source's constants:
/// for every nibble at every position, `from_bits(0x3F800000 | nibble bits) - BIAS` times the
/// activation pre-scale must be exactly `nibble - 8` (f32 arithmetic is the same IEEE
/// round-to-nearest on the CPU and the GPU).
#[test]
fn magic_number_dequantization_is_exact() {
    let bias: Vec<f32> = (0..5).map(|p| source_float(&format!("BIAS{p}"))).collect();
    for (p, b) in bias.iter().enumerate() {
        assert_eq!(*b, 1.0 + 2f32.powi(4 * p as i32 - 20), "BIAS{p}");
    }
    // Column p of a word: (shift applied first, position after the shift).
    let place = |p: u32| if p < 5 { (0u32, p) } else { (12, p - 3) };
    for p in 0..8u32 {
        let (shift, pos) = place(p);
        let x_scale = 2f32.powi(23 - 4 * pos as i32);
        for n in 0..16u32 {
            // The nibble of column p set to n, every other nibble set to a different value.
            let word = (0x5A3C_E197u32 & !(0xF << (4 * p))) | (n << (4 * p));
            let v = word >> shift;
            let f = f32::from_bits((v & (0xF << (4 * pos))) | 0x3F80_0000) - bias[pos as usize];
            assert_eq!(f * x_scale, n as f32 - 8.0, "column {p} nibble {n}");
        }
    }
}

#[test]
fn capped_union_items_hold_at_most_the_cap() {
    let ptrs = [9u64, 9, 9, 4, 9, 9];
    let l = WorkList::build_capped(Variant::Union, &ptrs, 2);
    // expert 9: slots 0,1 | 2,4 | 5; expert 4: slot 3
    assert_eq!(l.slot_list, vec![0, 1, 2, 4, 5, 3]);
    assert_eq!(l.len(), 4);
    assert_eq!(l.max_slots(), 2);
    // A cap of 0 is clamped to 1 slot per item.
    assert_eq!(WorkList::build_capped(Variant::Union, &ptrs, 0).len(), 6);
}

/// Hand-computed, tensor-core kernel (16-row warp tiles, 8 warps): 60 items of 2560x640.
/// Gate+up: 1280 rows, 20 K blocks; ks = 1 gives 128 rows per block, 10 x 60 = 600 blocks,
/// short of 1056; ks = 2 gives 1200. Down: 2560 rows, 5 K blocks: ks = 1 already gives 1200.
/// Qwen3-30B-A3B batch 1 (8 items): gate+up 1536 rows of 16 K blocks reaches the cap ks = 8
/// (768 blocks); down 2048 rows of 6 K blocks is capped at 4.
#[test]
fn tensor_core_split_of_k_matches_hand_computation() {
    use kernels::launch::{tc_rows_per_block, tensor_core_group, warps_per_tile};
    assert_eq!(warps_per_tile(1280, 20, 60, 132), 2);
    assert_eq!(tc_rows_per_block(2), 64);
    assert_eq!(warps_per_tile(2560, 5, 60, 132), 1);
    assert_eq!(warps_per_tile(1536, 16, 8, 132), 8);
    assert_eq!(warps_per_tile(2048, 6, 8, 132), 4);
    assert_eq!(warps_per_tile(64, 1, 1, 132), 1);
    assert!(tensor_core_group(128) && tensor_core_group(256));
    assert!(!tensor_core_group(64) && !tensor_core_group(32));
}

/// Hand-computed, one-wave grids (2 rows per row group, 3 resident blocks per multiprocessor,
/// 132 multiprocessors: 396 blocks at most). 60 items of 2560x640: gate+up (1280 rows of 80
/// chunks) P = 1, 2, 4 give 180, 300, 600 blocks (512, 256, 128 rows per block), so P = 2;
/// down (2560 rows of 20 chunks) P = 1, 2 give 300, 600, so P = 1. Qwen3-30B-A3B batch 1
/// (8 items): gate+up 1536 rows of 64 chunks, P = 16 gives 32 rows per block, 48 x 8 = 384,
/// P = 32 gives 768, so P = 16; down 2048 rows of 24 chunks, P = 8 gives 32 x 8 = 256, P = 16
/// 512, so P = 8. Capped by the chunk count: 16 rows of 8 chunks, one item, P = 8. More than a
/// wave even at P = 1: 1.
#[test]
fn one_wave_lanes_match_hand_computation() {
    use kernels::launch::lanes_per_row_one_wave as one_wave;
    assert_eq!(one_wave(1280, 80, 60, 2, 132, 3), 2);
    assert_eq!(one_wave(2560, 20, 60, 2, 132, 3), 1);
    assert_eq!(one_wave(1536, 64, 8, 2, 132, 3), 16);
    assert_eq!(one_wave(2048, 24, 8, 2, 132, 3), 8);
    assert_eq!(one_wave(16, 8, 1, 2, 132, 3), 8);
    assert_eq!(one_wave(64, 1, 1, 2, 132, 3), 1);
    assert_eq!(one_wave(1 << 16, 80, 1000, 2, 132, 3), 1);
    // 2 resident blocks (264): gate+up of 60 items: P = 1 gives 180, P = 2 gives 300, so 1.
    assert_eq!(one_wave(1280, 80, 60, 2, 132, 2), 1);
}

/// Against a naive search over every power of two: the one-wave choice is the largest `P`
/// (up to the chunk cap) whose grid fits the resident capacity, or 1 when none does.
#[test]
fn one_wave_lanes_are_the_largest_fitting_power_of_two() {
    use kernels::launch::lanes_per_row_one_wave as one_wave;
    for rows in [1usize, 7, 64, 1000, 4096] {
        for chunks in [1usize, 2, 3, 20, 64, 80, 224, 1000] {
            for items in [1usize, 8, 60, 300] {
                for r in [1usize, 2, 4] {
                    for resident in [2u32, 3] {
                        let capacity = resident as usize * 132;
                        let fits = |p: u32| {
                            items * rows.div_ceil(r * (BLOCK_THREADS / p) as usize) <= capacity
                        };
                        let naive = (0..=8)
                            .map(|e| 1u32 << e)
                            .filter(|&p| p == 1 || (p as usize <= chunks && fits(p)))
                            .max()
                            .unwrap();
                        assert_eq!(
                            one_wave(rows, chunks, items, r, 132, resident),
                            naive,
                            "{rows} {chunks} {items} {r} {resident}"
                        );
                    }
                }
            }
        }
    }
}

/// Every dot kernel named in launch.rs has an entry line in moe_dot.cu (the macro of its
/// staging: `DOT_ENTRY`, `NIBP_ENTRY`, `PREQP_ENTRY`, `PREQ8_ENTRY` or `FUSED_ENTRY`) with the same rows,
/// batch chunks, ring depth and resident blocks, and every one-wave partner is a kernel of the
/// table.
#[test]
fn dot_kernel_table_matches_the_cuda_entries() {
    use kernels::gpu::DOT_SOURCE;
    use kernels::launch::DOT_KERNELS;
    for d in DOT_KERNELS {
        let macro_name = d
            .entry_macro()
            .unwrap_or_else(|| panic!("{}: no entry macro for its kind", d.name));
        // The persistent kernels' entries add how tiles are drawn after these arguments.
        let want = format!(
            "{}({}, {}, {}, {}, {}",
            macro_name, d.name, d.rows, d.batch_chunks, d.ring, d.min_blocks
        );
        let found = DOT_SOURCE
            .match_indices(&want)
            .any(|(i, _)| matches!(DOT_SOURCE.as_bytes().get(i + want.len()), Some(b')' | b',')));
        assert!(found, "moe_dot.cu lacks {want})");
        for p in [d.one_wave_partner, d.repeat_partner].into_iter().flatten() {
            assert!(
                DOT_KERNELS.iter().any(|e| e.name == p),
                "{}: partner {p}",
                d.name
            );
        }
    }
}

/// The adaptive grid (of `moe_dot_a_r2b3`): one wave where that keeps 8+ lanes per row, else
/// the several-wave rule. Hand values from `one_wave_lanes_match_hand_computation` and
/// `sixty_slot_launch_gets_enough_blocks`: 60 items of 2560x640 get 2 and 1 lanes from the
/// one-wave rule, so the several-wave choice: gate+up P = 8 (64 rows per block, 1200 blocks),
/// down P = 4 (128 rows per block, 20 x 60 = 1200 blocks; P = 2 gives 600, short of 1056);
/// the Qwen3-30B-A3B batch-1 layer gets 16 and 8 from the one-wave rule and keeps them.
#[test]
fn adaptive_grid_takes_one_wave_only_when_it_stays_coalesced() {
    use kernels::launch::{DotGrid, DOT_FALLBACK_KERNEL, DOT_KERNELS};
    let d = DOT_KERNELS[DOT_FALLBACK_KERNEL];
    assert_eq!(d.name, "moe_dot_a_r2b3");
    assert_eq!(d.grid, DotGrid::Adaptive);
    assert_eq!(
        d.lanes(1280, 80, 60, 132),
        lanes_per_row(1280, 80, 60, 2, 132)
    );
    assert_eq!(d.lanes(1280, 80, 60, 132), 8);
    assert_eq!(d.lanes(2560, 20, 60, 132), 4);
    assert_eq!(d.lanes(1536, 64, 8, 132), 16);
    assert_eq!(d.lanes(2048, 24, 8, 132), 8);
}

/// Activation rows of the dot kernels, by hand: k = 2560 (80 chunks): signed nibbles
/// (`DotStaging::Registers`) 2 x 2560 + 4 x 80 = 5440 B; two limbs with step and sum per chunk:
/// 80 x 64 B of limbs + 80 x 8 B = 5120 + 640 = 5760 B (already a multiple of 16); one limb:
/// 2560 + 640 = 3200 B. k = 96 (3 chunks): 3 x 64 + 3 x 8 = 216 B, padded to 224.
#[test]
fn dot_activation_rows_match_hand_computation() {
    use kernels::launch::{dot_activation_bytes, DotStaging};
    assert_eq!(dot_activation_bytes(2560, DotStaging::Registers), 5440);
    assert_eq!(dot_activation_bytes(2560, DotStaging::PrequantPdl), 5760);
    assert_eq!(dot_activation_bytes(2560, DotStaging::NibblesPdl), 5760);
    assert_eq!(dot_activation_bytes(2560, DotStaging::Prequant8), 3200);
    assert_eq!(dot_activation_bytes(96, DotStaging::PrequantPdl), 224);
    assert!(
        DotStaging::PrequantPdl.unsigned_nibbles() && !DotStaging::Registers.unsigned_nibbles()
    );
    assert_eq!(DotStaging::Prequant8.prepass_limbs(), Some(1));
    assert_eq!(DotStaging::NibblesPdl.prepass_limbs(), None);
    assert!(DotStaging::PrequantPdl.programmatic() && !DotStaging::Prequant8.programmatic());
}

/// The per-launch choice of the default `moe_dot_fd_r2j1s3b1`, which decides as its fallback
/// `moe_dot_xp_r2j1n3b4` (2 rows, 4 resident blocks): the Qwen3-30B-A3B batch-1 layer
/// (8 slots, gate+up 1536 rows of 64 chunks) fits in one wave with at least 8 lanes per row on
/// 132 multiprocessors (16 lanes: 32-row tiles, 8 x 48 = 384 blocks, within 528 = 4 resident
/// blocks x 132; 32 lanes would need 768), so it runs its partner `moe_dot_up_r2b3`; 60 slots of
/// 2560x640 (1280 rows of 80 chunks) get 2 lanes from the one-wave rule, so they keep the kernel
/// itself. Kernels without a partner never switch.
#[test]
fn one_wave_partner_serves_the_small_launches() {
    use kernels::launch::{lanes_per_row_one_wave, DEFAULT_DOT_KERNEL, DOT_KERNELS};
    let index = |name: &str| DOT_KERNELS.iter().position(|d| d.name == name).expect(name);
    let up = index("moe_dot_up_r2b3");
    let i = DEFAULT_DOT_KERNEL;
    let d = DOT_KERNELS[i];
    assert_eq!(d.name, "moe_dot_fd_r2j1s3b1");
    assert_eq!(d.one_wave_partner, Some("moe_dot_up_r2b3"));
    assert_eq!(lanes_per_row_one_wave(1536, 64, 8, 2, 132, 4), 16);
    assert_eq!(d.for_launch(i, 1536, 64, 8, 132), up);
    assert_eq!(lanes_per_row_one_wave(1280, 80, 60, 2, 132, 4), 2);
    assert_eq!(d.for_launch(i, 1280, 80, 60, 132), i);
    let q = index("moe_dot_qp_r2b3");
    assert_eq!(DOT_KERNELS[q].for_launch(q, 1536, 64, 8, 132), q);
}

/// Load-only twins (one: of the default's several-wave code) are never the default or the fallback, mirror a computing kernel of
/// the table with the same staging, grid, rows, ring, occupancy and weight reads, and have
/// their own macro.
#[test]
fn load_only_twins_mirror_a_computing_kernel() {
    use kernels::launch::{DEFAULT_DOT_KERNEL, DOT_FALLBACK_KERNEL, DOT_KERNELS};
    assert!(!DOT_KERNELS[DEFAULT_DOT_KERNEL].load_only);
    assert!(!DOT_KERNELS[DOT_FALLBACK_KERNEL].load_only);
    let twins: Vec<_> = DOT_KERNELS.iter().filter(|d| d.load_only).collect();
    assert_eq!(twins.len(), 1);
    for t in twins {
        assert!(t.entry_macro().is_some_and(|m| m.starts_with("LOAD")));
        assert!(t.one_wave_partner.is_none(), "{}", t.name);
        assert!(
            DOT_KERNELS.iter().any(|d| !d.load_only
                && d.staging == t.staging
                && d.weight_reads == t.weight_reads
                && d.grid == t.grid
                && (d.rows, d.batch_chunks, d.ring, d.min_blocks)
                    == (t.rows, t.batch_chunks, t.ring, t.min_blocks)),
            "{} mirrors no kernel",
            t.name
        );
    }
}

/// The persistent kernel's plan, by hand. 8 consumer warps x 32 threads x 2 rows
/// = 512 rows per P lanes; the fewest lanes whose tile stays within 40 KiB (40960 B):
/// - 2560x640, group 128: gate+up rows of 1280 B: P = 16 (32 rows, 40960 B); down rows of
///   320 B: P = 4 (128 rows, 40960 B). Scales: 32 x 20 x 4 = 2560 = 128 x 5 x 4. Activation
///   rows: 16 (4 x 80 + 160 / 4) = 5760 and 16 (4 x 20 + 40 / 4) = 1440. Stage 40960 + 2560 +
///   5760 = 49280 B, 3 stages 147840 B.
/// - Qwen3-30B-A3B, 2048x768: gate+up rows of 1024 B: P = 16 (32 rows, 32768 B; P = 8 gives
///   65536); down rows of 384 B: P = 8 (64 rows, 24576 B; P = 4 gives 49152). Scales max(32 x
///   16 x 4, 64 x 6 x 4) = 2048; activation rows 16 (4 x 64 + 128 / 4) = 4608; 3 x 39424 =
///   118272 B.
#[test]
fn fused_plan_matches_hand_computation() {
    use kernels::launch::{fused_plan, FusedPlan};
    let max_shared = 232448 - 1024;
    let p = fused_plan(2560, 640, 128, 2, 3, 132, max_shared).unwrap();
    assert_eq!(
        p,
        FusedPlan {
            p_gu: 16,
            p_d: 4,
            stage_w: 40960,
            stage_s: 2560,
            stage_a: 5760,
            shared_bytes: 147840,
            blocks: 132,
        }
    );
    assert_eq!(p.tile_rows(2), (32, 128));
    let q = fused_plan(2048, 768, 128, 2, 3, 132, max_shared).unwrap();
    assert_eq!((q.p_gu, q.p_d), (16, 8));
    assert_eq!((q.stage_w, q.stage_s, q.stage_a), (32768, 2048, 4608));
    assert_eq!(q.shared_bytes, 118272);
    assert_eq!(q.tile_rows(2), (32, 64));
}

/// Geometries the persistent kernel cannot run get no plan (the launch runs
/// `FUSED_FALLBACK_KERNEL`): a group that is not a power of two of at least 32, and stages that
/// do not fit (hidden 16384: 16-row gate+up tiles of 8192 B rows are 131072 B, 3 stages > 227 KiB).
#[test]
fn fused_plan_refuses_what_the_kernel_cannot_run() {
    use kernels::launch::{fused_plan, DOT_KERNELS, FUSED_FALLBACK_KERNEL};
    let max_shared = 232448 - 1024;
    assert_eq!(fused_plan(2560, 640, 96, 2, 3, 132, max_shared), None);
    assert_eq!(fused_plan(2560, 640, 16, 2, 3, 132, max_shared), None);
    assert_eq!(fused_plan(16384, 2048, 128, 2, 3, 132, max_shared), None);
    // 2560x640 needs 147840 B: not on a GPU with 100 KiB per block (an RTX 4060 has 99 KiB).
    assert_eq!(fused_plan(2560, 640, 128, 2, 3, 24, 101376 - 1024), None);
    let fb = DOT_KERNELS[FUSED_FALLBACK_KERNEL];
    assert!(!fb.staging.single_launch() && !fb.load_only);
}

/// The persistent kernel hands the same launches to its one-wave partner as the kernel it falls
/// back to (`moe_dot_xp_r2j1n3b4`): the Qwen3-30B-A3B batch-1 layer (8 slots, 1536 gate+up rows
/// of 64 chunks: 16 lanes per row on one wave of 4 blocks per multiprocessor) runs
/// `moe_dot_up_r2b3`; 60 slots of 2560x640 (2 lanes) and 34 Qwen3 slots (1536 rows x 34 items
/// over 528 blocks: 99 rows per block, 4 lanes) run the persistent kernel itself. (Deciding with
/// its own single resident block would give 4 lanes at 8 slots and keep 8-slot launches, which
/// it runs 1.5x slower: BENCHMARKS.md at commit 225ec1c.)
#[test]
fn persistent_kernel_partners_as_its_fallback_does() {
    use kernels::launch::{DOT_KERNELS, FUSED_FALLBACK_KERNEL};
    let index = |name: &str| DOT_KERNELS.iter().position(|d| d.name == name).expect(name);
    let fd = index("moe_dot_fd_r2j1s3b1");
    let up = index("moe_dot_up_r2b3");
    let d = DOT_KERNELS[fd];
    let fb = DOT_KERNELS[FUSED_FALLBACK_KERNEL];
    assert_eq!(d.for_launch(fd, 1536, 64, 8, 132), up);
    assert_eq!(d.for_launch(fd, 1280, 80, 60, 132), fd);
    assert_eq!(d.for_launch(fd, 1536, 64, 34, 132), fd);
    for (rows, chunks, items) in [(512, 64, 8), (3072, 64, 8), (1280, 80, 6), (1536, 64, 16)] {
        let mine = d.for_launch(fd, rows, chunks, items, 132) == up;
        let theirs = fb.for_launch(FUSED_FALLBACK_KERNEL, rows, chunks, items, 132) == up;
        assert_eq!(mine, theirs, "{rows} x {chunks}, {items} items");
    }
}

/// Bytes of one expert by phase, by hand. 2560x640, group 128: gate+up weights 1280 x 1280 =
/// 1638400 and scales 1280 x 20 x 4 = 102400; down 2560 x 320 = 819200 and 2560 x 5 x 4 = 51200.
/// 2048x768 (Qwen3-30B-A3B), group 128: gate+up 1536 x 1024 = 1572864 and 1536 x 16 x 4 =
/// 98304; down 2048 x 384 = 786432 and 2048 x 6 x 4 = 49152.
#[test]
fn phase_bytes_match_hand_computation() {
    use kernels::ExpertGeometry;
    let g = ExpertGeometry::new(2560, 640, 128).unwrap();
    assert_eq!((g.gate_up_bytes(), g.down_bytes()), (1740800, 870400));
    assert_eq!(g.gate_up_bytes() + g.down_bytes(), g.expert_bytes());
    let q = ExpertGeometry::new(2048, 768, 128).unwrap();
    assert_eq!((q.gate_up_bytes(), q.down_bytes()), (1671168, 835584));
}

/// The 60-slot layer of 2560x640 on the persistent kernel (its plan on 132 multiprocessors:
/// `fused_plan_matches_hand_computation`) is one programmatic launch of 132 blocks of 320
/// threads reading each of its 60 experts once: 60 x 2611200 = 156672000 B; it lets the next
/// layer's launches start at its own start.
#[test]
fn persistent_layer_is_one_launch_of_its_distinct_bytes() {
    use kernels::launch::{weight_launch_shapes, LaunchShape, LayerLaunches, FUSED_THREADS};
    use kernels::ExpertGeometry;
    let g = ExpertGeometry::new(2560, 640, 128).unwrap();
    let layer = LayerLaunches::Persistent {
        blocks: 132,
        block: FUSED_THREADS,
        shared_bytes: 147840,
    };
    let want = LaunchShape {
        grid: (132, 1),
        block: 320,
        shared_bytes: 147840,
        bytes: 156_672_000,
        programmatic: true,
        allows_dependents: true,
    };
    assert_eq!(weight_launch_shapes(g, 60, layer), vec![want]);
}

/// The Qwen3-30B-A3B batch-1 layer (8 slots of 2048x768) runs `moe_dot_up_r2b3` in two
/// launches (`persistent_kernel_partners_as_its_fallback_does`). By hand, on 132
/// multiprocessors of 3 resident blocks (396): gate+up, 1536 rows of 64 chunks, one wave at 16
/// lanes (32 rows per block: 48 x 8 = 384 blocks; 32 lanes would need 768); down, 2048 rows of
/// 24 chunks, at 8 lanes (64 rows: 32 x 8 = 256; 16 lanes would need 512). Activation rows of
/// 16 (4 x 64 + 32) = 4608 and 16 (4 x 24 + 12) = 1728 B. Each launch reads its phase of the 8
/// distinct experts; only the down launch is programmatic. With 6 distinct experts among the
/// slots the launches read 6 experts' bytes, whatever the grid.
#[test]
fn two_launch_layer_reads_each_phase_of_its_distinct_experts() {
    use kernels::launch::{
        dot_activation_bytes, rows_per_block, weight_launch_shapes, LaunchShape, LayerLaunches,
        DOT_KERNELS,
    };
    use kernels::ExpertGeometry;
    let up = DOT_KERNELS
        .iter()
        .find(|d| d.name == "moe_dot_up_r2b3")
        .unwrap();
    let (p_gu, p_d) = (up.lanes(1536, 64, 8, 132), up.lanes(2048, 24, 8, 132));
    assert_eq!((p_gu, p_d), (16, 8));
    let blocks = [
        1536usize.div_ceil(rows_per_block(p_gu, up.rows)) as u32,
        2048usize.div_ceil(rows_per_block(p_d, up.rows)) as u32,
    ];
    let shared = [
        dot_activation_bytes(2048, up.staging) as u32,
        dot_activation_bytes(768, up.staging) as u32,
    ];
    assert_eq!((blocks, shared), ([48, 32], [4608, 1728]));
    let g = ExpertGeometry::new(2048, 768, 128).unwrap();
    let layer = LayerLaunches::TwoPhase {
        blocks,
        shared_bytes: shared,
        items: 8,
        block: 256,
        programmatic_down: true,
    };
    let s = weight_launch_shapes(g, 8, layer);
    let shape = |grid, shared_bytes, bytes, programmatic| LaunchShape {
        grid,
        block: 256,
        shared_bytes,
        bytes,
        programmatic,
        allows_dependents: false,
    };
    assert_eq!(
        s,
        vec![
            shape((48, 8), 4608, 8 * 1671168, false),
            shape((32, 8), 1728, 8 * 835584, true),
        ]
    );
    let plain = LayerLaunches::TwoPhase {
        blocks,
        shared_bytes: shared,
        items: 8,
        block: 256,
        programmatic_down: false,
    };
    let s6 = weight_launch_shapes(g, 6, plain);
    assert_eq!(s6.iter().map(|s| s.bytes).sum::<u64>(), 6 * 2506752);
    assert!(s6
        .iter()
        .all(|s| !s.programmatic && !s.allows_dependents && s.grid.1 == 8));
}

/// Every launch's bytes are whole 16-byte words (the shaped read's unit) for geometries at the
/// edges of what `ExpertGeometry::new` accepts: groups of 32 with odd multiples of 32.
#[test]
fn launch_bytes_are_whole_words() {
    use kernels::launch::{weight_launch_shapes, LayerLaunches};
    use kernels::ExpertGeometry;
    for (h, f, group) in [
        (32, 32, 32),
        (2080, 544, 32),
        (96, 160, 32),
        (2560, 640, 64),
    ] {
        let g = ExpertGeometry::new(h, f, group).unwrap();
        let layer = LayerLaunches::TwoPhase {
            blocks: [1, 1],
            shared_bytes: [0, 0],
            items: 1,
            block: 256,
            programmatic_down: false,
        };
        for s in weight_launch_shapes(g, 3, layer) {
            assert_eq!(s.bytes % 16, 0, "{h}x{f} group {group}: {} B", s.bytes);
        }
    }
}

/// The default persistent kernel hands a launch to the static walk exactly when at most half
/// of its slots name distinct experts; a kernel without a repeat partner keeps every launch.
#[test]
fn repeated_experts_take_the_static_walk() {
    use kernels::launch::{DEFAULT_DOT_KERNEL, DOT_KERNELS};
    let d = DOT_KERNELS[DEFAULT_DOT_KERNEL];
    let name = |i: usize| DOT_KERNELS[i].name;
    let run = |slots, distinct| name(d.for_repeats(DEFAULT_DOT_KERNEL, slots, distinct));
    assert_eq!(run(60, 60), "moe_dot_fd_r2j1s3b1");
    assert_eq!(run(60, 31), "moe_dot_fd_r2j1s3b1");
    assert_eq!(run(60, 30), "moe_dot_fz_r2j1s3b1");
    assert_eq!(run(60, 6), "moe_dot_fz_r2j1s3b1");
    assert_eq!(run(7, 4), "moe_dot_fd_r2j1s3b1");
    assert_eq!(run(7, 3), "moe_dot_fz_r2j1s3b1");
    let walk = DOT_KERNELS
        .iter()
        .position(|k| k.name == "moe_dot_fz_r2j1s3b1")
        .unwrap();
    assert_eq!(DOT_KERNELS[walk].for_repeats(walk, 60, 6), walk);
}
