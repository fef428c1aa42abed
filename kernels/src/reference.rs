//! CPU reference of the expert FFN on the packed int4 layout, and random expert weights.

use crate::geometry::ExpertGeometry;
use rand::Rng;
use rand_pcg::Pcg64;

/// SiLU activation `v / (1 + e^-v)`.
pub fn silu(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}

/// Dequantized weight at `(row, col)` of a packed int4 matrix with `cols` columns whose rows
/// start at `weights` and whose scales (`cols/group` per row) start at `scales`.
fn weight(weights: &[u8], scales: &[u8], cols: usize, group: usize, row: usize, col: usize) -> f32 {
    let byte = weights[row * cols / 2 + col / 2];
    let nibble = if col.is_multiple_of(2) {
        byte & 0xF
    } else {
        byte >> 4
    };
    let s = (row * (cols / group) + col / group) * 4;
    let scale = f32::from_le_bytes(scales[s..s + 4].try_into().expect("4 bytes"));
    (nibble as i32 - 8) as f32 * scale
}

/// `out[r] = sum_c W[r][c] * x[c]` for a packed int4 matrix of `rows x x.len()`.
fn matvec(weights: &[u8], scales: &[u8], rows: usize, group: usize, x: &[f32]) -> Vec<f32> {
    let cols = x.len();
    (0..rows)
        .map(|r| {
            (0..cols)
                .map(|c| weight(weights, scales, cols, group, r, c) * x[c])
                .sum()
        })
        .collect()
}

/// One expert's FFN for one token: `down(silu(gate x) * (up x))`.
///
/// `expert` is the expert's byte block (`geom.expert_bytes()` long), `x` the token's activation
/// (`geom.hidden` values); returns `geom.hidden` values.
pub fn expert_ffn(geom: &ExpertGeometry, expert: &[u8], x: &[f32]) -> Vec<f32> {
    assert_eq!(expert.len(), geom.expert_bytes(), "expert block length");
    assert_eq!(x.len(), geom.hidden, "activation length");
    let gu = gate_up(geom, expert, x);
    down(geom, expert, &gu)
}

/// The gate+up projection of one token: `2*ffn` values, gate first (before SiLU).
pub fn gate_up(geom: &ExpertGeometry, expert: &[u8], x: &[f32]) -> Vec<f32> {
    let w = &expert[..geom.gate_up_weight_bytes()];
    let s = &expert[geom.gate_up_scale_offset()..geom.down_scale_offset()];
    matvec(w, s, 2 * geom.ffn, geom.group, x)
}

/// The down projection applied to `silu(gate) * up` of a gate+up output `gu` (`2*ffn` values).
pub fn down(geom: &ExpertGeometry, expert: &[u8], gu: &[f32]) -> Vec<f32> {
    let h: Vec<f32> = (0..geom.ffn)
        .map(|j| silu(gu[j]) * gu[geom.ffn + j])
        .collect();
    let w = &expert[geom.down_weight_offset()..geom.gate_up_scale_offset()];
    let s = &expert[geom.down_scale_offset()..geom.expert_bytes()];
    matvec(w, s, geom.hidden, geom.group, &h)
}

/// A layer's routed slots on the CPU: slot `i` applies expert `sel[i]` (a block of `bank`
/// at `sel[i] * geom.expert_stride()`) to token `slot_token[i]` of `x` (`tokens x hidden`).
/// Returns `slots x hidden` values, slot-major.
pub fn moe_slots(
    geom: &ExpertGeometry,
    bank: &[u8],
    x: &[f32],
    slot_token: &[u32],
    sel: &[u32],
) -> Vec<f32> {
    slots_with(geom, bank, x, slot_token, sel, expert_ffn)
}

/// [`moe_slots`] with the per-slot dot kernels' arithmetic ([`expert_ffn_dot`]).
pub fn moe_slots_dot(
    geom: &ExpertGeometry,
    bank: &[u8],
    x: &[f32],
    slot_token: &[u32],
    sel: &[u32],
) -> Vec<f32> {
    slots_with(geom, bank, x, slot_token, sel, expert_ffn_dot)
}

/// Apply `ffn` slot by slot (the loop shared by [`moe_slots`] and [`moe_slots_dot`]).
fn slots_with(
    geom: &ExpertGeometry,
    bank: &[u8],
    x: &[f32],
    slot_token: &[u32],
    sel: &[u32],
    ffn: fn(&ExpertGeometry, &[u8], &[f32]) -> Vec<f32>,
) -> Vec<f32> {
    assert_eq!(slot_token.len(), sel.len(), "one token per slot");
    let mut out = Vec::with_capacity(sel.len() * geom.hidden);
    for (&t, &e) in slot_token.iter().zip(sel) {
        let start = e as usize * geom.expert_stride();
        let expert = &bank[start..start + geom.expert_bytes()];
        let xt = &x[t as usize * geom.hidden..(t as usize + 1) * geom.hidden];
        out.extend(ffn(geom, expert, xt));
    }
    out
}

/// A bank of `experts` random experts, `geom.expert_stride()` apart (padding zero).
///
/// Nibbles are uniform over 0..16; scales uniform in [0.5, 1.5] / sqrt(columns), which keeps
/// outputs of order one for activations of order one (a choice for testing, not a model value).
pub fn random_bank(geom: &ExpertGeometry, experts: usize, rng: &mut Pcg64) -> Vec<u8> {
    let stride = geom.expert_stride();
    let mut bank = vec![0u8; experts * stride];
    for e in 0..experts {
        let block = &mut bank[e * stride..e * stride + geom.expert_bytes()];
        let (weights, scales) = block.split_at_mut(geom.gate_up_scale_offset());
        rng.fill(weights);
        let gu_scales = geom.gate_up_scale_bytes() / 4;
        for (i, chunk) in scales.chunks_exact_mut(4).enumerate() {
            let cols = if i < gu_scales { geom.hidden } else { geom.ffn };
            let s: f32 = rng.gen_range(0.5f32..1.5) / (cols as f32).sqrt();
            chunk.copy_from_slice(&s.to_le_bytes());
        }
    }
    bank
}

/// `n` activations uniform in [-1, 1].
pub fn random_activations(n: usize, rng: &mut Pcg64) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

/// Largest quantized activation magnitude of the per-slot dot kernels (`QMAX` in
/// `cuda/moe_dot.cu`): 16-bit integers whose split `256 h + l` keeps `h` a signed byte.
pub const DOT_QMAX: f32 = 32639.0;

/// The per-slot dot kernels' arithmetic (`cuda/moe_dot.cu`) on the CPU, written directly from
/// its definition rather than from the kernel's int8 limbs: each 32-column chunk of an input row
/// is quantized to `round_ties_even(x * DOT_QMAX / m)` with `m` the chunk's largest magnitude,
/// each chunk of a weight row is then an exact integer dot product, and chunks are summed in f32
/// with their group scale times `m / DOT_QMAX`. `expert` and `x` as in [`expert_ffn`]; returns
/// `geom.hidden` values.
pub fn expert_ffn_dot(geom: &ExpertGeometry, expert: &[u8], x: &[f32]) -> Vec<f32> {
    assert_eq!(expert.len(), geom.expert_bytes(), "expert block length");
    assert_eq!(x.len(), geom.hidden, "activation length");
    let w = &expert[..geom.gate_up_weight_bytes()];
    let s = &expert[geom.gate_up_scale_offset()..geom.down_scale_offset()];
    let gu = matvec_dot(w, s, 2 * geom.ffn, geom.group, x);
    let h: Vec<f32> = (0..geom.ffn)
        .map(|j| silu(gu[j]) * gu[geom.ffn + j])
        .collect();
    let w = &expert[geom.down_weight_offset()..geom.gate_up_scale_offset()];
    let s = &expert[geom.down_scale_offset()..geom.expert_bytes()];
    matvec_dot(w, s, geom.hidden, geom.group, &h)
}

/// [`matvec`] with the dot kernels' quantized activations (see [`expert_ffn_dot`]).
fn matvec_dot(weights: &[u8], scales: &[u8], rows: usize, group: usize, x: &[f32]) -> Vec<f32> {
    let cols = x.len();
    let mut q = vec![0i64; cols];
    let mut step = vec![0f32; cols / 32];
    for (c, chunk) in x.chunks_exact(32).enumerate() {
        let m = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let inv = if m > 0.0 { DOT_QMAX / m } else { 0.0 };
        for (qi, v) in q[c * 32..].iter_mut().zip(chunk) {
            *qi = (v * inv).round_ties_even() as i64;
        }
        step[c] = m / DOT_QMAX;
    }
    (0..rows)
        .map(|r| {
            let mut acc = 0f32;
            for c0 in (0..cols).step_by(32) {
                let dot: i64 = (c0..c0 + 32)
                    .map(|c| {
                        let byte = weights[r * cols / 2 + c / 2];
                        let n = if c % 2 == 0 { byte & 0xF } else { byte >> 4 };
                        (n as i64 - 8) * q[c]
                    })
                    .sum();
                let at = (r * (cols / group) + c0 / group) * 4;
                let scale = f32::from_le_bytes(scales[at..at + 4].try_into().expect("4 bytes"));
                acc += scale * step[c0 / 32] * dot as f32;
            }
            acc
        })
        .collect()
}

/// The sum of 4 products of `a`'s unsigned bytes and `b`'s signed bytes, plus `c`: PTX
/// `dp4a.u32.s32`, the product the unsigned-nibble kernels use.
fn dp4a_us(a: u32, b: u32, c: i32) -> i32 {
    (0..4).fold(c, |acc, i| {
        let ua = ((a >> (8 * i)) & 0xFF) as i32;
        let sb = ((b >> (8 * i)) & 0xFF) as u8 as i8 as i32;
        acc + ua * sb
    })
}

/// The integer sum of one 32-column chunk as the unsigned-nibble two-limb kernels (`moe_dot6`
/// with `LIMBS = 2` in `cuda/moe_dot.cu`) compute it, step by step: `words` are the chunk's 4
/// weight words (8 nibbles each, low nibble = even column), `x` its 32 quantized activations
/// (`|x| <= DOT_QMAX`). Each activation splits into limbs `x = 256 h + l` (h, l signed bytes);
/// low nibbles enter `dp4a.u32.s32` as `w & 0x0F0F0F0F` (values n), high ones as
/// `w & 0xF0F0F0F0` (values 16 n), into four accumulators combined once; the zero point 8 comes
/// off with the chunk's activation sum. Returns `16 sum (n - 8) x`, the value the earlier
/// kernels (weights `16 (n - 8)` as signed bytes) compute, so the f32 steps after it are the
/// same and [`expert_ffn_dot`] models both. Every intermediate fits in `i32` (asserted by the
/// wrapping-free arithmetic in debug builds).
pub fn chunk_dot_two_limbs(words: [u32; 4], x: &[i32; 32]) -> i32 {
    let limbs = |i: usize| {
        // (h even, l even, h odd, l odd) of word i's 8 columns, byte b = column 2b or 2b + 1
        let mut q = [0u32; 4];
        for b in 0..4 {
            for (odd, (hq, lq)) in [(0usize, (0usize, 1usize)), (1, (2, 3))] {
                let v = x[8 * i + 2 * b + odd];
                let h = (v + 128) >> 8;
                let l = v - (h << 8);
                q[hq] |= ((h as u32) & 0xFF) << (8 * b);
                q[lq] |= ((l as u32) & 0xFF) << (8 * b);
            }
        }
        q
    };
    let sum: i32 = x.iter().sum();
    let (mut hl, mut hh, mut ll, mut lh) = (0, 0, 0, -128 * sum);
    for (i, &w) in words.iter().enumerate() {
        let a = limbs(i);
        let (lo, hi) = (w & 0x0F0F_0F0F, w & 0xF0F0_F0F0);
        hl = dp4a_us(lo, a[0], hl);
        ll = dp4a_us(lo, a[1], ll);
        hh = dp4a_us(hi, a[2], hh);
        lh = dp4a_us(hi, a[3], lh);
    }
    (hl * 16 + hh) * 256 + ll * 16 + lh
}
