//! The host's memory read bandwidth: a streaming read over a buffer many times the
//! last-level cache, one thread and all threads.

use super::{pool, Sizes};
use crate::stats::Summary;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Read bandwidth at one thread count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPoint {
    /// Rayon threads.
    pub threads: usize,
    /// Bytes read per pass.
    pub buffer_bytes: usize,
    /// Bytes per µs (= MB/s) of each pass.
    pub bytes_per_us: Summary,
}

/// Wrapping sum of `words` in 8 independent lanes (vectorised loads, no dependency chain).
fn sum(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    for c in words.chunks_exact(8) {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    let tail = words.chunks_exact(8).remainder();
    acc.iter().chain(tail).fold(0, |a, &b| a.wrapping_add(b))
}

/// Stream `sizes.memory_bytes` bytes (written first, so every page is backed) at each thread
/// count, `sizes.memory_passes` timed passes after one untimed.
pub fn measure(sizes: &Sizes, progress: &mut dyn FnMut(String)) -> Vec<MemoryPoint> {
    let words: Vec<u64> = (0..sizes.memory_bytes as u64 / 8).collect();
    let bytes = words.len() * 8;
    sizes
        .thread_counts()
        .into_iter()
        .map(|threads| {
            let pool = pool(threads);
            // 1 MiB pieces (2^17 words) so the threads share the passes evenly
            let pass = || {
                pool.install(|| {
                    words
                        .par_chunks(1 << 17)
                        .map(sum)
                        .reduce(|| 0, u64::wrapping_add)
                })
            };
            std::hint::black_box(pass());
            let rates: Vec<f64> = (0..sizes.memory_passes)
                .map(|_| {
                    let t0 = Instant::now();
                    std::hint::black_box(pass());
                    bytes as f64 / (t0.elapsed().as_secs_f64() * 1e6)
                })
                .collect();
            let bytes_per_us = Summary::of(&rates).expect("finite rates");
            progress(format!(
                "host memory read, {threads} threads: {:.0} MB/s",
                bytes_per_us.median
            ));
            MemoryPoint {
                threads,
                buffer_bytes: bytes,
                bytes_per_us,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_lane_sum_is_the_sum() {
        let w: Vec<u64> = (0..1003).collect();
        assert_eq!(super::sum(&w), 1002 * 1003 / 2);
    }
}
