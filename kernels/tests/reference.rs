//! CPU reference and work-list tests (run on CI, no GPU).

mod cases;

use kernels::reference::{
    expert_ffn, expert_ffn_dot, moe_slots, moe_slots_dot, random_activations, random_bank, silu,
    DOT_QMAX,
};
use kernels::{ExpertGeometry, Variant, WorkList, MAX_SLOTS_PER_ITEM};
use rand::SeedableRng;
use rand_pcg::Pcg64;

fn put_scale(block: &mut [u8], at: usize, v: f32) {
    block[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Hand-computed case: every gate/up weight is +1 (nibble 9), every down weight -2 (nibble 6),
/// all scales 1. With x = 1..=32 (hidden 32): gate = up = 528, h = silu(528) * 528 = 528^2
/// (silu(528) = 528 to f32 precision), and every output = -2 * ffn * 528^2.
#[test]
fn expert_ffn_matches_hand_computation() {
    let g = ExpertGeometry::new(32, 32, 32).unwrap();
    let mut e = vec![0u8; g.expert_bytes()];
    e[..g.gate_up_weight_bytes()].fill(0x99);
    e[g.down_weight_offset()..g.gate_up_scale_offset()].fill(0x66);
    for i in 0..(g.gate_up_scale_bytes() + g.down_scale_bytes()) / 4 {
        put_scale(&mut e, g.gate_up_scale_offset() + 4 * i, 1.0);
    }
    let x: Vec<f32> = (1..=32).map(|v| v as f32).collect();
    let y = expert_ffn(&g, &e, &x);
    let expected = -2.0 * 32.0 * 528.0f32 * 528.0;
    assert_eq!(y.len(), 32);
    for v in y {
        assert!(
            (v - expected).abs() <= expected.abs() * 1e-6,
            "{v} vs {expected}"
        );
    }
}

/// Nibble order and group scales: one gate row with distinct nibbles and two groups.
#[test]
fn low_nibble_is_the_even_column_and_groups_use_their_scale() {
    let g = ExpertGeometry::new(64, 32, 32).unwrap();
    let mut e = vec![0x88u8; g.expert_bytes()]; // all weights 0
                                                // gate row 0: byte 0 = columns 0 (low nibble 0xA -> +2) and 1 (high 0x7 -> -1); byte 16 = column 32 (+7).
    e[0] = 0x7A;
    e[16] = 0x8F;
    // up row 0 (row ffn = 32): column 0 = +1.
    e[32 * 32] = 0x89;
    let s = g.gate_up_scale_offset();
    let groups = g.hidden / g.group;
    put_scale(&mut e, s, 0.5); // gate row 0, group 0
    put_scale(&mut e, s + 4, 3.0); // gate row 0, group 1
    put_scale(&mut e, s + 32 * groups * 4, 1.0); // up row 0, group 0
    let mut x = vec![0.0f32; 64];
    x[0] = 1.0;
    x[1] = 4.0;
    x[32] = 0.25;
    let gu = kernels::reference::gate_up(&g, &e, &x);
    // gate0 = 0.5*(2*1 + (-1)*4) + 3*(7*0.25) = -1 + 5.25; up0 = 1*1
    assert!((gu[0] - 4.25).abs() < 1e-6, "gate {}", gu[0]);
    assert!((gu[32] - 1.0).abs() < 1e-6, "up {}", gu[32]);
    assert!(gu
        .iter()
        .enumerate()
        .all(|(i, &v)| i == 0 || i == 32 || v == 0.0));
}

/// Independent method: dequantize the whole expert into f32 matrices with plain nested loops
/// and compare the reference against dense matrix-vector products.
#[test]
fn reference_equals_dense_dequantized_matvec() {
    let g = ExpertGeometry::new(128, 64, 32).unwrap();
    let mut rng = Pcg64::seed_from_u64(7);
    let bank = random_bank(&g, 2, &mut rng);
    let e = &bank[g.expert_stride()..g.expert_stride() + g.expert_bytes()];
    let x = random_activations(g.hidden, &mut rng);
    let dense = |woff: usize, soff: usize, rows: usize, cols: usize| -> Vec<Vec<f32>> {
        let mut m = vec![vec![0f32; cols]; rows];
        for (r, row) in m.iter_mut().enumerate() {
            for (c, w) in row.iter_mut().enumerate() {
                let byte = e[woff + (r * cols + c) / 2];
                let q = if c.is_multiple_of(2) {
                    byte & 15
                } else {
                    byte >> 4
                } as f32
                    - 8.0;
                let si = soff + 4 * (r * cols / g.group + c / g.group);
                *w = q * f32::from_le_bytes(e[si..si + 4].try_into().unwrap());
            }
        }
        m
    };
    let wgu = dense(0, g.gate_up_scale_offset(), 2 * g.ffn, g.hidden);
    let wd = dense(
        g.down_weight_offset(),
        g.down_scale_offset(),
        g.hidden,
        g.ffn,
    );
    let mv = |m: &Vec<Vec<f32>>, v: &[f32]| -> Vec<f64> {
        m.iter()
            .map(|r| {
                r.iter()
                    .zip(v)
                    .map(|(a, b)| (*a as f64) * (*b as f64))
                    .sum()
            })
            .collect()
    };
    let gu = mv(&wgu, &x);
    let h: Vec<f32> = (0..g.ffn)
        .map(|j| (silu(gu[j] as f32) as f64 * gu[g.ffn + j]) as f32)
        .collect();
    let want = mv(&wd, &h);
    let got = expert_ffn(&g, e, &x);
    for (a, b) in got.iter().zip(&want) {
        assert!(
            (*a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{a} vs {b}"
        );
    }
}

#[test]
fn moe_slots_applies_each_slots_expert_to_its_token() {
    let g = ExpertGeometry::new(32, 32, 32).unwrap();
    let mut rng = Pcg64::seed_from_u64(3);
    let bank = random_bank(&g, 3, &mut rng);
    let x = random_activations(2 * g.hidden, &mut rng);
    let y = moe_slots(&g, &bank, &x, &[1, 0], &[2, 0]);
    let e2 = &bank[2 * g.expert_stride()..2 * g.expert_stride() + g.expert_bytes()];
    assert_eq!(&y[..32], &expert_ffn(&g, e2, &x[32..])[..]);
    assert_eq!(
        &y[32..],
        &expert_ffn(&g, &bank[..g.expert_bytes()], &x[..32])[..]
    );
}

#[test]
fn geometry_rejects_groups_the_kernel_cannot_split() {
    assert!(ExpertGeometry::new(2560, 640, 48).is_err());
    assert!(ExpertGeometry::new(2560, 640, 0).is_err());
    assert!(ExpertGeometry::new(2560, 96, 64).is_err());
    let g = ExpertGeometry::new(2560, 640, 128).unwrap();
    // 2*640*2560/2 + 2560*640/2 weights, (2*640*20 + 2560*5)*4 scales
    assert_eq!(g.expert_bytes(), 1_638_400 + 819_200 + 102_400 + 51_200);
    assert_eq!(g.expert_stride() % 256, 0);
}

#[test]
fn per_slot_list_has_one_item_per_slot() {
    let l = WorkList::build(Variant::PerSlot, &[10, 20, 10]);
    assert_eq!(l.items, vec![10, 0, 0, 1, 20, 0, 1, 1, 10, 0, 2, 1]);
    assert_eq!(l.slot_list, vec![0, 1, 2]);
}

#[test]
fn union_list_groups_slots_by_expert_in_first_use_order_and_splits_big_groups() {
    let p = (1u64 << 33) + 5;
    let mut ptrs = vec![p; MAX_SLOTS_PER_ITEM + 2];
    ptrs.insert(1, 7);
    let l = WorkList::build(Variant::Union, &ptrs);
    assert_eq!(l.len(), 3);
    // expert p first (its slots 0,2,..: one full item, then the remaining 2), then expert 7 (slot 1)
    let m = MAX_SLOTS_PER_ITEM as u32;
    assert_eq!(&l.items[..4], &[5, 2, 0, m]);
    assert_eq!(&l.items[4..8], &[5, 2, m, 2]);
    assert_eq!(&l.items[8..], &[7, 0, m + 2, 1]);
    let mut seen = l.slot_list.clone();
    seen.sort();
    assert_eq!(seen, (0..ptrs.len() as u32).collect::<Vec<_>>());
    assert_eq!(l.slot_list[MAX_SLOTS_PER_ITEM + 2], 1);
    assert_eq!(&l.slot_list[..3], &[0, 2, 3]);
    assert_eq!(l.max_slots(), MAX_SLOTS_PER_ITEM);
}

#[test]
fn library_check_never_panics() {
    // On CI (no driver) this is an error naming the driver; on a GPU machine it is Ok.
    if let Err(e) = kernels::check_cuda_libraries() {
        assert!(e.to_string().contains("could not be loaded"), "{e}");
    }
}

/// Hand-computed case of the dot kernels' quantization: every weight +1 (nibble 9), scales 1,
/// x = (1, 0.5, 0, ...). max|x| = 1, so x quantizes to (32639, 16320, 0, ...): 0.5 * 32639 =
/// 16319.5 is a tie and rounds to even. Every gate/up output is then (32639 + 16320) / 32639.
#[test]
fn dot_quantization_rounds_ties_to_even_on_the_row_maximum() {
    let g = ExpertGeometry::new(32, 32, 32).unwrap();
    let mut e = vec![0u8; g.expert_bytes()];
    e[..g.gate_up_weight_bytes()].fill(0x99);
    for i in 0..(g.gate_up_scale_bytes() + g.down_scale_bytes()) / 4 {
        put_scale(&mut e, g.gate_up_scale_offset() + 4 * i, 1.0);
    }
    // Down weights: row r has +1 (nibble 9) in column 0 only, so y[r] = h[0] quantized on h's max.
    e[g.down_weight_offset()..g.gate_up_scale_offset()].fill(0x88);
    for r in 0..g.hidden {
        e[g.down_weight_offset() + r * g.ffn / 2] = 0x89;
    }
    let mut x = vec![0f32; 32];
    x[0] = 1.0;
    x[1] = 0.5;
    let gate = (32639.0f64 + 16320.0) / 32639.0;
    // Every h value is the same, silu(gate) * up, so it is the row maximum and quantizes to QMAX.
    let h = gate / (1.0 + (-gate).exp()) * gate;
    let y = expert_ffn_dot(&g, &e, &x);
    assert_eq!(DOT_QMAX, 32639.0);
    for v in y {
        assert!((v as f64 - h).abs() <= h * 1e-6, "{v} vs {h}");
    }
}

/// The dot kernels' arithmetic (16-bit activations, exact integer chunk sums) stays within the
/// GPU tests' tolerance (1e-4 of the largest output + 1e-5) of the f32 reference on the
/// benchmark geometries, with random weights and activations uniform in [-1, 1].
#[test]
fn dot_arithmetic_is_within_the_gpu_tolerance_of_the_f32_reference() {
    let mut rng = Pcg64::seed_from_u64(3);
    for (hidden, ffn) in [(2560, 640), (2048, 768)] {
        let g = ExpertGeometry::new(hidden, ffn, 128).unwrap();
        let bank = random_bank(&g, 2, &mut rng);
        for e in 0..2 {
            let expert = &bank[e * g.expert_stride()..e * g.expert_stride() + g.expert_bytes()];
            let x = random_activations(hidden, &mut rng);
            let want = expert_ffn(&g, expert, &x);
            let got = expert_ffn_dot(&g, expert, &x);
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= 1e-4 * scale + 1e-5,
                "{hidden}x{ffn} expert {e}: error {worst} of outputs up to {scale}"
            );
            // Not trivially equal: quantization does change the result.
            assert!(worst > 0.0);
        }
    }
}

/// On exactly the GPU tests' inputs, the dot kernels' arithmetic is within their tolerance of
/// the f32 reference with room to spare (at most half of it), so the GPU tests of the dot
/// kernels check the kernels, not luck in the quantization.
#[test]
fn dot_arithmetic_passes_the_gpu_cases_with_margin() {
    for case in cases::all() {
        let (bank, x) = case.data();
        // Slots naming the same (expert, token) have the same output: compute each pair once.
        let mut pairs: Vec<(u32, u32)> = case
            .sel
            .iter()
            .copied()
            .zip(case.slot_token.iter().copied())
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        let (sel, tok): (Vec<u32>, Vec<u32>) = pairs.into_iter().unzip();
        let want = moe_slots(&case.geom, &bank, &x, &tok, &sel);
        let got = moe_slots_dot(&case.geom, &bank, &x, &tok, &sel);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!(
            "{}: worst error / tolerance {:.3}",
            case.name,
            worst / cases::tolerance(scale)
        );
        assert!(
            worst <= 0.5 * cases::tolerance(scale),
            "{}: error {worst} of outputs up to {scale}",
            case.name
        );
    }
}

/// The unsigned-nibble kernels' per-chunk arithmetic (unsigned nibbles, four accumulators, zero
/// point off with the activation sum) equals the direct sum 16 sum (n - 8) x, on random chunks and
/// on the extremes (all nibbles 0 or 15 against all activations +-DOT_QMAX, where the bounds bite).
#[test]
fn unsigned_nibble_chunk_dot_equals_the_direct_sum() {
    use kernels::reference::{chunk_dot_two_limbs, DOT_QMAX};
    use rand::Rng;
    let q = DOT_QMAX as i32;
    let direct = |w: [u32; 4], x: &[i32; 32]| -> i64 {
        (0..32)
            .map(|c| {
                let n = (w[c / 8] >> (4 * (c % 8))) & 0xF;
                16 * (n as i64 - 8) * x[c] as i64
            })
            .sum()
    };
    let mut rng = Pcg64::seed_from_u64(3);
    for _ in 0..2000 {
        let w: [u32; 4] = rng.gen();
        let mut x = [0i32; 32];
        for v in &mut x {
            *v = rng.gen_range(-q..=q);
        }
        assert_eq!(chunk_dot_two_limbs(w, &x) as i64, direct(w, &x));
    }
    for w in [0u32, 0xFFFF_FFFF, 0x0F0F_0F0F, 0xF0F0_F0F0, 0x8888_8888] {
        for xv in [q, -q] {
            let x = [xv; 32];
            let words = [w; 4];
            assert_eq!(
                chunk_dot_two_limbs(words, &x) as i64,
                direct(words, &x),
                "{w:#x} {xv}"
            );
        }
    }
    // By hand: nibbles all 15 (n - 8 = 7) against x = 1: 16 x 7 x 32 = 3584.
    assert_eq!(chunk_dot_two_limbs([0xFFFF_FFFF; 4], &[1; 32]), 3584);
}
