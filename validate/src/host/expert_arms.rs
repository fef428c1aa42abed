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
pub(crate) fn bank(geom: &ExpertGeometry, format: Format, n: usize, rng: &mut Pcg64) -> Vec<u8> {
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

/// One expert size's bank and activations.
struct Arm {
    geom: ExpertGeometry,
    bytes: usize,
    experts: usize,
    bank: Vec<u8>,
    x: Vec<f32>,
    next: usize,
}

/// Time calls of `tokens` tokens on successive experts of `arm` (one untimed call first):
/// up to `sizes.samples_per_round`, stopping after `sizes.seconds_per_round` once one is in.
fn time_calls(
    arm: &mut Arm,
    format: Format,
    pool: &rayon::ThreadPool,
    tokens: usize,
    sizes: &Sizes,
) -> Vec<f64> {
    let xs = &arm.x[..tokens * arm.geom.hidden];
    let mut samples = Vec::new();
    let start = Instant::now();
    for i in 0..=sizes.samples_per_round {
        let e = &arm.bank[arm.next * arm.bytes..(arm.next + 1) * arm.bytes];
        arm.next = (arm.next + 1) % arm.experts;
        let t0 = Instant::now();
        std::hint::black_box(pool.install(|| expert_ffn(&arm.geom, format, e, xs)));
        if i > 0 {
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
            if start.elapsed().as_secs_f64() > sizes.seconds_per_round {
                break;
            }
        }
    }
    samples
}

/// Time every (size, tokens, threads) of one format in `sizes.rounds` interleaved rounds (so
/// a slow spell of a shared machine spreads over all points instead of biasing one);
/// `progress` gets one line per point.
pub fn measure(
    opts: &HostOptions,
    sizes: &Sizes,
    format: Format,
    progress: &mut dyn FnMut(String),
) -> Vec<ExpertPoint> {
    let mut rng = Pcg64::seed_from_u64(opts.seed);
    let mut arms: Vec<Arm> = sizes
        .geometries
        .iter()
        .map(|&(h, f, g)| {
            let geom = ExpertGeometry::new(h, f, g).expect("calibration geometries are valid");
            let bytes = format.expert_bytes(&geom);
            let experts = (sizes.bank_bytes / bytes).max(2);
            let bank = bank(&geom, format, experts, &mut rng);
            let x = reference::random_activations(16 * h, &mut rng);
            Arm {
                geom,
                bytes,
                experts,
                bank,
                x,
                next: 0,
            }
        })
        .collect();
    let pools: Vec<(usize, rayon::ThreadPool)> = sizes
        .thread_counts()
        .into_iter()
        .map(|t| (t, pool(t)))
        .collect();
    let mut keys = Vec::new();
    for a in 0..arms.len() {
        for p in 0..pools.len() {
            keys.extend(TOKENS.iter().map(|&t| (a, p, t)));
        }
    }
    let mut samples = vec![Vec::new(); keys.len()];
    for _ in 0..sizes.rounds {
        for (k, &(a, p, tokens)) in keys.iter().enumerate() {
            samples[k].extend(time_calls(&mut arms[a], format, &pools[p].1, tokens, sizes));
        }
    }
    keys.iter()
        .zip(&samples)
        .map(|(&(a, p, tokens), s)| {
            let call_us = Summary::of(s).expect("every point has samples");
            let (arm, threads) = (&arms[a], pools[p].0);
            progress(format!(
                "host expert {format:?} {} B, {tokens} tok, {threads} thr: {:.1} us",
                arm.bytes, call_us.median
            ));
            let g = arm.geom;
            ExpertPoint {
                format,
                geometry: [g.hidden, g.ffn, g.group],
                expert_bytes: arm.bytes,
                tokens,
                threads,
                call_us,
            }
        })
        .collect()
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
