//! Timed tiers (`--dram`) on a hand-computed replay: a DRAM hit is its commit and copy; an
//! SSD read is the NVMe read, then the copy. The CPU lane tests' round-number profile:
//! commit 10 µs per 2 MiB granule, H2D 1000 B/µs, 50 µs non-expert and 20 µs per expert.

use super::cpu_tests::{gpu_profile, ks, try_run, unit_map};
use super::*;
use crate::cost::{CostModel, CostOptions, Paging};

const MIB: u64 = 1 << 20;
/// 2 MiB at 1000 B/µs.
const COPY_2MIB: f64 = 2097.152;

/// One group paging in units 0 (a DRAM hit) and 1 (read from SSD), with the SSD at `ssd`.
fn run(ssd: Option<f64>) -> Result<Replay, EngineError> {
    let mut cost = CostModel::new(&gpu_profile(), Paging::Vmm, CostOptions::default()).unwrap();
    cost.ssd_bytes_per_us = ssd;
    let mut plans = Plans::new(1);
    plans.tiered = true;
    plans.begin_step(1, 1);
    plans.push_group(0, &[0, 1], &[0, 1], &[0, 1], &[]);
    plans.ssd_reads = vec![(0, 1)];
    try_run(&plans, &unit_map(1, 4), &ks(1, 4), &cost)
}

#[test]
fn an_ssd_read_precedes_its_copy_and_a_dram_hit_is_a_copy() {
    let r = run(Some(500.0)).unwrap();
    // unit 0 (DRAM): commit 50..60, copy 60..2157.152; unit 1 (SSD): read 50..4244.304,
    // commit 60..70, copy from the read's end; then 2 experts x 20 µs
    let read = 2.0 * MIB as f64 / 500.0;
    let want = 50.0 + read + COPY_2MIB + 40.0;
    assert!(
        (r.step_us[0] - want).abs() < 1e-6,
        "{} vs {want}",
        r.step_us[0]
    );
    let t = r.tiers;
    assert_eq!((t.dram_hits, t.ssd_reads), (1, 1));
    assert!((t.ssd_read_us - read).abs() < 1e-9);
    assert!((t.dram_copy_us - COPY_2MIB).abs() < 1e-9);
    assert!((t.ssd_copy_us - COPY_2MIB).abs() < 1e-9);
    let d = r.detail.tiers.unwrap();
    assert!((d.ssd_read_ms_per_step - read / 1e3).abs() < 1e-12);
}

#[test]
fn an_ssd_read_without_the_ssd_rate_names_it() {
    let e = run(None).unwrap_err().to_string();
    assert!(
        e.contains("host_ssd_read_bandwidth") && e.contains("--hw-host"),
        "{e}"
    );
}
