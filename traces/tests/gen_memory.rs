//! The generator's memory estimate (`traces::gen::memory_bytes`), which `sim trace gen` checks
//! against the memory available before allocating, against an independent measurement: a
//! counting global allocator records the peak of live heap bytes while the generator runs.
//!
//! This file holds one test only, so that no other test allocates while the peak is measured.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use traces::gen::{generate_trace, memory_bytes, write_trace, GenParams};
use traces::ModelSpec;

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        LIVE.fetch_sub(l.size(), Relaxed);
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Peak heap bytes `f` allocates above what was live when it started.
fn peak_of(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    f();
    PEAK.load(Relaxed) - base
}

fn params(skew: f64, sequences: u64, tokens: u64) -> GenParams {
    GenParams {
        preset: None,
        skew: vec![skew],
        locality: vec![0.2],
        cross_layer: 0.3,
        sequences,
        tokens,
        seed: 5,
        fitted_to: None,
        always_on: Vec::new(),
        archetypes: None,
    }
}

#[test]
fn the_estimate_bounds_the_measured_peak_within_a_third() {
    let dir = tempfile::tempdir().unwrap();
    // (layers, experts, top-k, skew, sequences, tokens): tables dominate; a top-k near the
    // expert count with a high skew forces the exact fallback; many ids per token make the
    // record count; many sequences make the header count.
    let cases = [
        (64, 4_000, 8, 1.0, 2, 4),
        (4, 60_000, 2, 1.2, 2, 4),
        (16, 512, 500, 3.0, 2, 2),
        (2_000, 64, 32, 0.5, 2, 4),
        (2, 8, 2, 1.0, 40_000, 1),
    ];
    for (layers, experts, k, skew, sequences, tokens) in cases {
        let model = ModelSpec::uniform("m", layers, experts, k);
        let p = params(skew, sequences, tokens);
        let out = dir.path().join("t.bin");
        let streamed = peak_of(|| write_trace(&out, &model, &p).unwrap());
        let estimate = memory_bytes(&model, &p, false) as f64;
        let ratio = estimate / streamed as f64;
        // The estimate must not be below the peak (the check would let too much through), and
        // not so far above it that it refuses what fits: within a third.
        assert!(
            (1.0..1.34).contains(&ratio),
            "{layers} x {experts} top-{k}: estimate {estimate}, measured {streamed} ({ratio:.3})"
        );
        let held = peak_of(|| drop(generate_trace(&model, &p).unwrap()));
        let estimate = memory_bytes(&model, &p, true) as f64;
        // generate_trace has no writer (4 MiB buffer) but holds every token's ids.
        assert!(
            estimate >= held as f64,
            "in memory, {layers} x {experts}: estimate {estimate}, measured {held}"
        );
    }
}
