//! Streaming metrics of every mechanism family and order on a tiny trace, computed by hand.
//!
//! The trace: 2 MoE layers x 4 experts, top-2, 4 decode tokens:
//!
//! | token | layer 0 | layer 1 |
//! |---|---|---|
//! | 0 | 0, 3 | 0, 2 |
//! | 1 | 0, 3 | 1, 3 |
//! | 2 | 1, 2 | 0, 2 |
//! | 3 | 0, 3 | 1, 3 |
//!
//! Layer 0 counts 0:3, 1:1, 2:1, 3:3 -> hot order 0, 3, 1, 2; co-activation (0,3)=3, (1,2)=1.
//! Layer 1 counts all 2 -> hot order = index order; co-activation (0,2)=2, (1,3)=2.
//! Experts are 3 MiB and the granule 2 MiB unless said otherwise; 8 (step, layer) pairs.

mod common;

use common::{cfg, trace, workload};
use sim::runner::run;
use sim::streaming::StreamingMetrics;
use traces::Trace;

fn tiny() -> Trace {
    trace(
        2,
        4,
        &[
            vec![vec![0, 3], vec![0, 2]],
            vec![vec![0, 3], vec![1, 3]],
            vec![vec![1, 2], vec![0, 2]],
            vec![vec![0, 3], vec![1, 3]],
        ],
    )
}

fn metrics(policy: &str, expert_mib: f64) -> StreamingMetrics {
    run(&cfg(policy, expert_mib), &workload(tiny()))
        .unwrap()
        .streaming
        .unwrap()
}

/// Sums over the 8 (step, layer) pairs of committed MiB, useful MiB, experts and units.
#[allow(clippy::too_many_arguments)]
fn expect(
    m: &StreamingMetrics,
    committed: f64,
    useful: f64,
    experts: f64,
    units: f64,
    waste: f64,
    always_on: u64,
    units_per_layer: f64,
    bank: (f64, f64),
) {
    let close = |a: f64, b: f64, what: &str| assert!((a - b).abs() < 1e-12, "{what}: {a} != {b}");
    close(m.resident_mib_per_layer_step, committed / 8.0, "resident");
    close(m.transfer_mib_per_layer_step, useful / 8.0, "transfer");
    close(m.resident_experts_per_layer_step, experts / 8.0, "experts");
    close(m.hot_units_per_layer_step, units / 8.0, "hot units");
    close(m.selectivity, experts / 16.0, "selectivity");
    close(m.waste_factor, waste, "waste");
    assert_eq!(m.always_on_units, always_on, "always-on");
    close(m.units_per_layer, units_per_layer, "units per layer");
    close(m.committed_mib_total, bank.0, "committed total");
    close(m.useful_mib_total, bank.1, "useful total");
}

#[test]
fn e1_one_expert_per_commit() {
    // every (step, layer): 2 experts, each 3 MiB useful in 4 MiB committed; no unit hot in every step
    let m = metrics("e1", 3.0);
    expect(
        &m,
        16.0 * 4.0,
        16.0 * 3.0,
        16.0,
        16.0,
        4.0 / 3.0,
        0,
        4.0,
        (32.0, 24.0),
    );
}

#[test]
fn e1_expert_larger_than_granule() {
    // 5 MiB experts take 3 granules = 6 MiB
    let m = metrics("e1", 5.0);
    expect(
        &m,
        16.0 * 6.0,
        16.0 * 5.0,
        16.0,
        16.0,
        1.2,
        0,
        4.0,
        (48.0, 40.0),
    );
}

#[test]
fn e2_index() {
    // chunks {0,1},{2,3} in both layers: every (step, layer) touches both chunks
    let m = metrics("e2:index", 3.0);
    expect(
        &m,
        16.0 * 6.0,
        16.0 * 6.0,
        32.0,
        16.0,
        1.0,
        4,
        2.0,
        (24.0, 24.0),
    );
}

#[test]
fn e2_hot() {
    // layer 0 chunks {0,3},{1,2}: one chunk per step (4); layer 1 = index order: 2 per step (8)
    // always-on: layer 1's two chunks
    let m = metrics("e2", 3.0);
    expect(
        &m,
        12.0 * 6.0,
        12.0 * 6.0,
        24.0,
        12.0,
        1.0,
        2,
        2.0,
        (24.0, 24.0),
    );
}

#[test]
fn e2_coact() {
    // layer 0 {0,3},{1,2}; layer 1 {0,2},{1,3}: one chunk per (step, layer), none always on
    let m = metrics("e2:coact", 3.0);
    expect(
        &m,
        8.0 * 6.0,
        8.0 * 6.0,
        16.0,
        8.0,
        1.0,
        0,
        2.0,
        (24.0, 24.0),
    );
}

#[test]
fn e3_index_last_chunk_smaller() {
    // chunks {0,1,2} (9 MiB useful in 10 committed) and {3} (3 in 4), per layer.
    // layer 0: t0,t1,t3 both chunks (14/12/4 experts), t2 first only (10/9/3): 52/45/15, 7 units
    // layer 1: {0,2} first only, {1,3} both: 10/9/3 + 14/12/4 twice: 48/42/14, 6 units
    // always-on: {0,1,2} of both layers
    let m = metrics("e3:index", 3.0);
    expect(
        &m,
        100.0,
        87.0,
        29.0,
        13.0,
        28.0 / 24.0,
        2,
        2.0,
        (28.0, 24.0),
    );
}

#[test]
fn region_spanning_layers() {
    // region:10 holds 3 experts: R0 = L0 {0,1,2} (9/10), R1 = L0 {3} + L1 {0,1} (9/10),
    // R2 = L1 {2,3} (6/6). Every step touches all three regions: 26 MiB committed, 24 useful,
    // 8 experts, 3 units per step over the whole model, divided by 2 layers.
    let m = metrics("region:10", 3.0);
    expect(
        &m,
        104.0,
        96.0,
        32.0,
        12.0,
        26.0 / 24.0,
        3,
        1.5,
        (26.0, 24.0),
    );
}

#[test]
fn region_hot_order() {
    // hot order: L0 0,3,1,2 and L1 0,1,2,3. region:6 holds 2 experts: R0 = L0 {0,3},
    // R1 = L0 {1,2}, R2 = L1 {0,1}, R3 = L1 {2,3}; all 6/6 MiB.
    // L0: one region per step (4); L1: both its regions every step (8). always-on: R2, R3.
    let m = metrics("region:6:hot", 3.0);
    expect(&m, 72.0, 72.0, 24.0, 12.0, 1.0, 2, 2.0, (24.0, 24.0));
}

#[test]
fn os_pages_partial_last_page() {
    // 10,000-byte experts in 4 KiB pages: 4096 + 4096 + 1808 useful, 3 x 4096 committed.
    // every (step, layer): 2 experts, 6 pages, 24,576 B committed, 20,000 B useful.
    let mib = (1u64 << 20) as f64;
    let m = metrics("os4k", 10_000.0 / mib);
    let c = 8.0 * 24_576.0 / mib;
    let u = 8.0 * 20_000.0 / mib;
    expect(
        &m,
        c,
        u,
        16.0,
        48.0,
        1.2288,
        0,
        12.0,
        (8.0 * 12_288.0 / mib, 8.0 * 10_000.0 / mib),
    );
}

#[test]
fn os2m_larger_than_expert() {
    // a 3 MiB expert takes two 2 MiB pages (2 + 1 MiB useful)
    let m = metrics("os2m", 3.0);
    expect(
        &m,
        16.0 * 4.0,
        16.0 * 3.0,
        16.0,
        32.0,
        4.0 / 3.0,
        0,
        8.0,
        (32.0, 24.0),
    );
}

#[test]
fn inputs_echo() {
    let r = run(&cfg("e2", 3.0), &workload(tiny())).unwrap();
    assert_eq!(r.inputs.policy, "e2:hot");
    assert_eq!(r.inputs.expert_bytes, 3 << 20);
    assert_eq!(r.inputs.granule_bytes, 2 << 20);
    assert_eq!(r.inputs.tokens, 4);
    assert_eq!(r.inputs.trace, "tiny");
    assert_eq!(r.inputs.dtype, None);
    let v = serde_json::to_value(&r).unwrap();
    let keys: Vec<&str> = v["streaming"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "resident_mib_per_layer_step",
            "transfer_mib_per_layer_step",
            "resident_experts_per_layer_step",
            "hot_units_per_layer_step",
            "waste_factor",
            "selectivity",
            "always_on_units",
            "units_per_layer",
            "committed_mib_total",
            "useful_mib_total"
        ]
    );
}
