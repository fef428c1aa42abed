//! Timing of the host expert kernels against expert bytes, tokens and threads, and the fit of
//! call time against expert bytes per (format, tokens, threads).

use super::expert_kernel::{expert_ffn, Format};
use super::{pool, HostOptions, Sizes};
use crate::stats::{LinearFit, Summary};
use half::bf16;
use kernels::geometry::ExpertGeometry;
use kernels::reference;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Token counts of one expert call the sweep measures (decode 1, small batches 4 and 16).
pub const TOKENS: [usize; 3] = [1, 4, 16];

/// One measured point: median call time of one expert at one size, tokens and threads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExpertPoint {
    /// Weight format.
    pub format: Format,
    /// Geometry as `[hidden, ffn, group]`.
    pub geometry: [usize; 3],
    /// Bytes of one expert (weights and scales).
    pub expert_bytes: usize,
    /// Tokens per call.
    pub tokens: usize,
    /// Rayon threads.
    pub threads: usize,
    /// Call time, µs, over calls that each read a different expert of a bank larger than the
    /// last-level cache (so weights come from DRAM).
    pub call_us: Summary,
}

/// The fit `call_us = overhead + expert_bytes / bandwidth` over the sizes of one
/// (format, tokens, threads).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExpertFit {
    /// Weight format.
    pub format: Format,
    /// Tokens per call.
    pub tokens: usize,
    /// Rayon threads.
    pub threads: usize,
    /// The fit (`latency_us`: per-call overhead; `bytes_per_us`: expert bytes per µs).
    pub fit: LinearFit,
    /// Largest relative spread of the points' repetitions.
    pub spread: f64,
}

/// A bank of `n` random experts of `geom` in `format`, contiguous.
fn bank(geom: &ExpertGeometry, format: Format, n: usize, rng: &mut Pcg64) -> Vec<u8> {
    match format {
        Format::Int4 => {
            let b = reference::random_bank(geom, n, rng);
            let (stride, len) = (geom.expert_stride(), geom.expert_bytes());
            (0..n)
                .flat_map(|e| b[e * stride..e * stride + len].to_vec())
                .collect()
        }
        Format::Bf16 => {
            // uniform in [-1, 1] / sqrt(hidden): outputs of order one, no subnormals
            let scale = 1.0 / (geom.hidden as f32).sqrt();
            (0..n * format.expert_bytes(geom) / 2)
                .flat_map(|_| bf16::from_f32(rng.gen_range(-1.0f32..1.0) * scale).to_le_bytes())
                .collect()
        }
    }
}

/// Time every (size, tokens, threads) of one format; `progress` gets one line per point.
pub fn measure(
    opts: &HostOptions,
    sizes: &Sizes,
    format: Format,
    progress: &mut dyn FnMut(String),
) -> Vec<ExpertPoint> {
    let mut rng = Pcg64::seed_from_u64(opts.seed);
    let mut points = Vec::new();
    for &(h, f, g) in &sizes.geometries {
        let geom = ExpertGeometry::new(h, f, g).expect("calibration geometries are valid");
        let bytes = format.expert_bytes(&geom);
        let n = (sizes.bank_bytes / bytes).max(2);
        let bank = bank(&geom, format, n, &mut rng);
        let x = reference::random_activations(16 * h, &mut rng);
        for threads in sizes.thread_counts() {
            let pool = pool(threads);
            for tokens in TOKENS {
                let xs = &x[..tokens * h];
                let mut next = 0usize;
                let mut samples = Vec::new();
                let start = Instant::now();
                // one untimed call, then calls on successive experts
                for i in 0..=sizes.max_samples {
                    let e = &bank[next * bytes..(next + 1) * bytes];
                    next = (next + 1) % n;
                    let t0 = Instant::now();
                    std::hint::black_box(pool.install(|| expert_ffn(&geom, format, e, xs)));
                    if i > 0 {
                        samples.push(t0.elapsed().as_secs_f64() * 1e6);
                    }
                    if i >= 3 && start.elapsed().as_secs_f64() > sizes.seconds_per_point {
                        break;
                    }
                }
                let call_us = Summary::of(&samples).expect("at least 3 finite samples");
                progress(format!(
                    "host expert {format:?} {bytes} B, {tokens} tok, {threads} thr: {:.1} us",
                    call_us.median
                ));
                points.push(ExpertPoint {
                    format,
                    geometry: [h, f, g],
                    expert_bytes: bytes,
                    tokens,
                    threads,
                    call_us,
                });
            }
        }
    }
    points
}

/// The per-(format, tokens, threads) fits of `points`, in the order first seen; a group whose
/// fit has a non-positive slope is left out (its bandwidth is unmeasured, not 0).
pub fn fits(points: &[ExpertPoint]) -> Vec<ExpertFit> {
    let mut keys: Vec<(Format, usize, usize)> = Vec::new();
    for p in points {
        let k = (p.format, p.tokens, p.threads);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .filter_map(|(format, tokens, threads)| {
            let group: Vec<&ExpertPoint> = points
                .iter()
                .filter(|p| (p.format, p.tokens, p.threads) == (format, tokens, threads))
                .collect();
            let xy: Vec<(f64, f64)> = group
                .iter()
                .map(|p| (p.expert_bytes as f64, p.call_us.median))
                .collect();
            let spread = group.iter().map(|p| p.call_us.spread).fold(0.0, f64::max);
            LinearFit::fit(&xy).map(|fit| ExpertFit {
                format,
                tokens,
                threads,
                fit,
                spread,
            })
        })
        .collect()
}
