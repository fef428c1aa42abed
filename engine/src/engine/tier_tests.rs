//! Timed tiers (`--dram`) on a hand-computed replay: a DRAM hit is its commit and copy; an
//! SSD read is the NVMe read, then the copy; in page-cache mode both copies run at the
//! pageable rate (250 B/µs here). The CPU lane tests' round-number profile:
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

/// 2 MiB at the pageable rate of [`page_cache_run`]'s profile, 250 B/µs.
const PAGEABLE_2MIB: f64 = 8388.608;

/// One group paging in unit 0 from DRAM, or from SSD at 500 B/µs when `miss`; in page-cache
/// mode when `page_cache`, with `h2d_pageable_bandwidth` 0.25 GB/s when `pageable`.
fn page_cache_run(page_cache: bool, miss: bool, pageable: bool) -> Result<Replay, EngineError> {
    let mut p = gpu_profile();
    if pageable {
        let a = profile::Constant::assumed(0.25, "GB/s", "test value");
        p.set(profile::ConstantName::H2dPageableBandwidth, a);
    }
    let mut cost = CostModel::new(&p, Paging::Vmm, CostOptions::default()).unwrap();
    cost.ssd_bytes_per_us = Some(500.0);
    let mut plans = Plans::new(1);
    plans.tiered = true;
    plans.page_cache = page_cache;
    plans.begin_step(1, 1);
    plans.push_group(0, &[0], &[0], &[0], &[]);
    if miss {
        plans.ssd_reads = vec![(0, 0)];
    }
    try_run(&plans, &unit_map(1, 4), &ks(1, 4), &cost)
}

#[test]
fn a_page_cache_hit_differs_from_a_pinned_hit_by_the_copy_rate() {
    // 50 µs non-expert, commit 10 µs, copy, one expert 20 µs
    let pinned = page_cache_run(false, false, true).unwrap();
    assert!((pinned.step_us[0] - (50.0 + 10.0 + COPY_2MIB + 20.0)).abs() < 1e-6);
    let paged = page_cache_run(true, false, true).unwrap();
    let want = 50.0 + 10.0 + PAGEABLE_2MIB + 20.0;
    assert!(
        (paged.step_us[0] - want).abs() < 1e-6,
        "{}",
        paged.step_us[0]
    );
    let gap = 2.0 * MIB as f64 * (1.0 / 250.0 - 1.0 / 1000.0);
    assert!((paged.step_us[0] - pinned.step_us[0] - gap).abs() < 1e-6);
    assert!((paged.tiers.dram_copy_us - PAGEABLE_2MIB).abs() < 1e-9);
    assert_eq!((paged.tiers.dram_hits, paged.tiers.ssd_reads), (1, 0));
}

#[test]
fn a_page_cache_miss_adds_the_ssd_read_before_the_pageable_copy() {
    // the read (2 MiB at 500 B/µs) from the router on; the commit runs meanwhile
    let hit = page_cache_run(true, false, true).unwrap();
    let miss = page_cache_run(true, true, true).unwrap();
    let read = 2.0 * MIB as f64 / 500.0;
    let want = 50.0 + read + PAGEABLE_2MIB + 20.0;
    assert!((miss.step_us[0] - want).abs() < 1e-6, "{}", miss.step_us[0]);
    // the hit's copy waited for the 10 µs commit, the miss's for the read only
    assert!((miss.step_us[0] - hit.step_us[0] - (read - 10.0)).abs() < 1e-6);
    assert!((miss.tiers.ssd_read_us - read).abs() < 1e-9);
    assert!((miss.tiers.ssd_copy_us - PAGEABLE_2MIB).abs() < 1e-9);
}

#[test]
fn page_cache_mode_without_the_pageable_rate_names_it() {
    let e = page_cache_run(true, false, false).unwrap_err().to_string();
    assert!(
        e.contains("h2d_pageable_bandwidth") && e.contains("--dram-mode"),
        "{e}"
    );
    // pinned mode does not need it
    assert!(page_cache_run(false, false, false).is_ok());
}
