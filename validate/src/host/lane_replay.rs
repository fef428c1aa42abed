//! The real replay of a CPU lane: every expert call a trace's steps put on the CPU, run with
//! the host calibration's kernels ([`expert_ffn`]) on the calibration's thread pool, each step
//! timed with a monotonic clock ([`Instant`]). The GPU is never touched.
//!
//! Weights: when the CPU-resident experts fit [`LANE_BANK_BYTES`], each gets its own block
//! (an expert the steps pick again is the same memory, so a re-read hits the cache exactly
//! when a real model's would); otherwise a bank of [`LANE_BANK_BYTES`] (24 times the 32 MiB
//! L3 of the development machine's EPYC) is cycled call by call, as the calibration cycles
//! its bank, so every call reads its weights from DRAM.

use super::expert_arms::bank;
use super::expert_kernel::{expert_ffn, Format};
use kernels::geometry::ExpertGeometry;
use kernels::reference;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use std::time::Instant;

/// Most bytes of expert weights the replay allocates: 768 MiB, 24 times the development
/// machine's 32 MiB L3 (the calibration's bank is 4 times it), and room for every int4
/// expert of granite-3.0-1b-a400m (24 layers x 32 experts x 835,584 B = 642 MB).
pub const LANE_BANK_BYTES: usize = 768 << 20;

/// One expert call of a step: which CPU-resident expert (`0..experts` of the bank) on how
/// many tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneCall {
    /// Index of the expert among the CPU-resident ones.
    pub expert: u32,
    /// Tokens of the step that picked it (>= 1).
    pub tokens: u32,
}

/// The weights and activations a CPU-lane replay reads.
pub struct LaneBank {
    geom: ExpertGeometry,
    format: Format,
    /// Bytes of one expert block (weights and scales).
    block_bytes: usize,
    /// Distance between blocks in `data`.
    stride: usize,
    /// Blocks in `data`.
    blocks: usize,
    /// True: one block per CPU-resident expert; false: blocks cycled call by call.
    pub distinct: bool,
    data: Vec<u8>,
    /// `max_tokens x hidden` activations.
    x: Vec<f32>,
    /// Next block of a cycled bank.
    next: usize,
}

impl LaneBank {
    /// Random weights (seeded PCG64, the calibration's distributions) for `experts`
    /// CPU-resident experts of `geom` in `format`, within `cap_bytes` (see the module doc),
    /// and activations for calls of up to `max_tokens` tokens.
    pub fn new(
        geom: ExpertGeometry,
        format: Format,
        experts: usize,
        cap_bytes: usize,
        max_tokens: usize,
        seed: u64,
    ) -> LaneBank {
        let mut rng = Pcg64::seed_from_u64(seed);
        let block_bytes = format.expert_bytes(&geom);
        let distinct = experts.saturating_mul(block_bytes) <= cap_bytes;
        let blocks = if distinct {
            experts.max(1)
        } else {
            (cap_bytes / block_bytes).max(2)
        };
        let (data, stride) = match format {
            Format::Int4 => (
                reference::random_bank(&geom, blocks, &mut rng),
                geom.expert_stride(),
            ),
            Format::Bf16 => (bank(&geom, format, blocks, &mut rng), block_bytes),
        };
        let x = reference::random_activations(max_tokens.max(1) * geom.hidden, &mut rng);
        LaneBank {
            geom,
            format,
            block_bytes,
            stride,
            blocks,
            distinct,
            data,
            x,
            next: 0,
        }
    }

    /// Bytes of weights allocated.
    pub fn bank_bytes(&self) -> usize {
        self.blocks * self.block_bytes
    }

    /// Bytes of one expert as the kernel lays it out.
    pub fn block_bytes(&self) -> usize {
        self.block_bytes
    }

    /// The block call `call` reads.
    fn block(&mut self, call: LaneCall) -> std::ops::Range<usize> {
        let b = if self.distinct {
            call.expert as usize % self.blocks
        } else {
            let b = self.next;
            self.next = (self.next + 1) % self.blocks;
            b
        };
        b * self.stride..b * self.stride + self.block_bytes
    }

    /// Run every call of `step` back to back on `pool`; wall µs of the whole step.
    pub fn time_step(&mut self, step: &[LaneCall], pool: &rayon::ThreadPool) -> f64 {
        let t0 = Instant::now();
        for &call in step {
            let range = self.block(call);
            let tokens = (call.tokens.max(1) as usize).min(self.x.len() / self.geom.hidden);
            let (e, x) = (&self.data[range], &self.x[..tokens * self.geom.hidden]);
            std::hint::black_box(pool.install(|| expert_ffn(&self.geom, self.format, e, x)));
        }
        t0.elapsed().as_secs_f64() * 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom() -> ExpertGeometry {
        ExpertGeometry::new(64, 32, 32).unwrap()
    }

    #[test]
    fn experts_that_fit_get_their_own_block_and_others_cycle() {
        let g = geom();
        let one = Format::Int4.expert_bytes(&g);
        let fits = LaneBank::new(g, Format::Int4, 3, 3 * one, 1, 1);
        assert!(fits.distinct);
        assert_eq!(fits.bank_bytes(), 3 * one);
        let mut cycled =
            LaneBank::new(g, Format::Bf16, 10, 4 * Format::Bf16.expert_bytes(&g), 1, 1);
        assert!(!cycled.distinct);
        let call = LaneCall {
            expert: 7,
            tokens: 1,
        };
        let bf = Format::Bf16.expert_bytes(&g);
        let starts: Vec<usize> = (0..5).map(|_| cycled.block(call).start).collect();
        assert_eq!(starts, vec![0, bf, 2 * bf, 3 * bf, 0]);
    }

    #[test]
    fn a_step_runs_its_calls_and_takes_time() {
        let g = geom();
        let mut b = LaneBank::new(g, Format::Int4, 4, 1 << 20, 2, 2);
        let pool = super::super::pool(1);
        let calls = [
            LaneCall {
                expert: 0,
                tokens: 1,
            },
            LaneCall {
                expert: 3,
                tokens: 2,
            },
        ];
        assert!(b.time_step(&calls, &pool) > 0.0);
        assert!(b.time_step(&[], &pool) < 1e5);
    }
}
