//! The host CPU's expert FFN kernels (int4 with group scales, bf16), threaded with rayon.
//!
//! The int4 kernel computes the `kernels` crate's CPU reference (`kernels::reference`) on the
//! same packed layout (`[gate_up int4 | down int4 | gate_up scales | down scales]`), for a batch
//! of tokens at once: each weight group is unpacked once into an f32 buffer and dotted with
//! every token's slice, so the weights are read once per call whatever the token count. The
//! bf16 layout is `[gate_up bf16 (2 ffn x hidden) | down bf16 (hidden x ffn)]`, row-major,
//! little-endian, gate rows first, as the int4 one without scales.

use half::bf16;
use kernels::geometry::ExpertGeometry;
use kernels::reference::silu;
use rayon::prelude::*;

/// Output rows one rayon task computes: enough work per task to amortise scheduling, few
/// enough that 2 ffn / 16 tasks keep every thread busy at the smallest geometry measured.
const ROWS_PER_TASK: usize = 16;

/// Weight format of an expert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Packed int4, one f32 scale per `group` columns (the `kernels` crate's layout).
    Int4,
    /// bf16 weights, no scales.
    Bf16,
}

impl Format {
    /// Bytes of one expert of `geom` in this format.
    pub fn expert_bytes(self, geom: &ExpertGeometry) -> usize {
        match self {
            Format::Int4 => geom.expert_bytes(),
            Format::Bf16 => 3 * geom.hidden * geom.ffn * 2,
        }
    }
}

/// Sum of products, in 8 independent lanes so the compiler vectorises it.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Unpack one row's group of packed nibbles (`bytes`, low nibble first) into `out` as
/// `(nibble - 8) * scale`.
fn unpack_group(bytes: &[u8], scale: f32, out: &mut [f32]) {
    for (pair, &b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = ((b & 0xF) as i32 - 8) as f32 * scale;
        pair[1] = ((b >> 4) as i32 - 8) as f32 * scale;
    }
}

/// `out[t][r] = sum_c W[r][c] x[t][c]` for a packed int4 `rows x cols` matrix with scales;
/// `x` is `tokens x cols`, the result `tokens x rows`.
fn matmul_int4(
    w: &[u8],
    s: &[u8],
    rows: usize,
    group: usize,
    x: &[f32],
    tokens: usize,
) -> Vec<f32> {
    let cols = x.len() / tokens;
    let mut by_row = vec![0f32; rows * tokens];
    by_row
        .par_chunks_mut(ROWS_PER_TASK * tokens)
        .enumerate()
        .for_each(|(task, out)| {
            let mut buf = vec![0f32; group];
            for (i, acc) in out.chunks_exact_mut(tokens).enumerate() {
                let r = task * ROWS_PER_TASK + i;
                let row = &w[r * cols / 2..(r + 1) * cols / 2];
                for g in 0..cols / group {
                    let at = (r * (cols / group) + g) * 4;
                    let scale = f32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"));
                    unpack_group(&row[g * group / 2..(g + 1) * group / 2], scale, &mut buf);
                    for (t, a) in acc.iter_mut().enumerate() {
                        *a += dot(&buf, &x[t * cols + g * group..t * cols + (g + 1) * group]);
                    }
                }
            }
        });
    transpose(&by_row, rows, tokens)
}

/// `out[t][r] = sum_c W[r][c] x[t][c]` for a bf16 `rows x cols` matrix (`w`: 2 bytes per
/// weight, little-endian); `x` is `tokens x cols`, the result `tokens x rows`.
fn matmul_bf16(w: &[u8], rows: usize, x: &[f32], tokens: usize) -> Vec<f32> {
    let cols = x.len() / tokens;
    let mut by_row = vec![0f32; rows * tokens];
    by_row
        .par_chunks_mut(ROWS_PER_TASK * tokens)
        .enumerate()
        .for_each(|(task, out)| {
            let mut buf = vec![0f32; cols];
            for (i, acc) in out.chunks_exact_mut(tokens).enumerate() {
                let r = task * ROWS_PER_TASK + i;
                let row = &w[r * cols * 2..(r + 1) * cols * 2];
                for (v, b) in buf.iter_mut().zip(row.chunks_exact(2)) {
                    *v = bf16::from_le_bytes([b[0], b[1]]).to_f32();
                }
                for (t, a) in acc.iter_mut().enumerate() {
                    *a = dot(&buf, &x[t * cols..(t + 1) * cols]);
                }
            }
        });
    transpose(&by_row, rows, tokens)
}

/// `rows x tokens` to `tokens x rows`.
fn transpose(by_row: &[f32], rows: usize, tokens: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * tokens];
    for r in 0..rows {
        for t in 0..tokens {
            out[t * rows + r] = by_row[r * tokens + t];
        }
    }
    out
}

/// `silu(gate) * up` per token of a `tokens x 2 ffn` gate+up output.
fn gated(gu: &[f32], ffn: usize) -> Vec<f32> {
    gu.chunks_exact(2 * ffn)
        .flat_map(|t| (0..ffn).map(move |j| silu(t[j]) * t[ffn + j]))
        .collect()
}

/// One expert's FFN `down(silu(gate x) * (up x))` for `tokens` tokens on the calling rayon
/// pool. `expert` is one block of `format.expert_bytes(geom)` bytes, `x` is `tokens x hidden`
/// activations; returns `tokens x hidden` values.
pub fn expert_ffn(geom: &ExpertGeometry, format: Format, expert: &[u8], x: &[f32]) -> Vec<f32> {
    assert_eq!(
        expert.len(),
        format.expert_bytes(geom),
        "expert block length"
    );
    assert!(
        x.len().is_multiple_of(geom.hidden),
        "activations of whole tokens"
    );
    let tokens = x.len() / geom.hidden;
    let (h, f) = (geom.hidden, geom.ffn);
    match format {
        Format::Int4 => {
            let w = &expert[..geom.gate_up_weight_bytes()];
            let s = &expert[geom.gate_up_scale_offset()..geom.down_scale_offset()];
            let g = gated(&matmul_int4(w, s, 2 * f, geom.group, x, tokens), f);
            let w = &expert[geom.down_weight_offset()..geom.gate_up_scale_offset()];
            let s = &expert[geom.down_scale_offset()..geom.expert_bytes()];
            matmul_int4(w, s, h, geom.group, &g, tokens)
        }
        Format::Bf16 => {
            let (gu, down) = expert.split_at(2 * f * h * 2);
            let g = gated(&matmul_bf16(gu, 2 * f, x, tokens), f);
            matmul_bf16(down, h, &g, tokens)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels::reference;
    use rand::SeedableRng;
    use rand_pcg::Pcg64;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "value {i}: {x} vs {y}"
            );
        }
    }

    #[test]
    fn int4_matches_the_kernels_crate_reference_for_each_token() {
        let geom = ExpertGeometry::new(256, 96, 32).unwrap();
        let mut rng = Pcg64::seed_from_u64(3);
        let bank = reference::random_bank(&geom, 1, &mut rng);
        let expert = &bank[..geom.expert_bytes()];
        let x = reference::random_activations(4 * geom.hidden, &mut rng);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let got = pool.install(|| expert_ffn(&geom, Format::Int4, expert, &x));
        let want: Vec<f32> = x
            .chunks_exact(geom.hidden)
            .flat_map(|t| reference::expert_ffn(&geom, expert, t))
            .collect();
        close(&got, &want);
    }

    /// bf16 against a plain triple loop over the same bytes, each weight widened by its bit
    /// pattern (`bf16` is the upper half of an `f32`), an independent route to the same value.
    #[test]
    fn bf16_matches_a_plain_loop() {
        let geom = ExpertGeometry::new(64, 32, 32).unwrap();
        let mut rng = Pcg64::seed_from_u64(5);
        let tokens = 3;
        let mut expert = vec![0u8; Format::Bf16.expert_bytes(&geom)];
        for (i, b) in expert.chunks_exact_mut(2).enumerate() {
            // weights k/64 for k in -8..8: exact in bf16
            let v = ((i * 7 % 16) as f32 - 8.0) / 64.0;
            b.copy_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes());
        }
        let x = reference::random_activations(tokens * geom.hidden, &mut rng);
        let wt = |m: &[u8], r: usize, c: usize, cols: usize| {
            let at = 2 * (r * cols + c);
            f32::from_bits((u16::from_le_bytes([m[at], m[at + 1]]) as u32) << 16)
        };
        let (gu, down) = expert.split_at(2 * geom.ffn * geom.hidden * 2);
        let mut want = Vec::new();
        for xt in x.chunks_exact(geom.hidden) {
            let proj = |r: usize| {
                (0..geom.hidden)
                    .map(|c| wt(gu, r, c, geom.hidden) * xt[c])
                    .sum::<f32>()
            };
            let h: Vec<f32> = (0..geom.ffn)
                .map(|j| silu(proj(j)) * proj(geom.ffn + j))
                .collect();
            want.extend((0..geom.hidden).map(|r| {
                (0..geom.ffn)
                    .map(|c| wt(down, r, c, geom.ffn) * h[c])
                    .sum::<f32>()
            }));
        }
        close(&expert_ffn(&geom, Format::Bf16, &expert, &x), &want);
    }
}
