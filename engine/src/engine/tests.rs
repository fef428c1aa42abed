//! Analytic cases computed by hand, and cross-checks against the cache driver.

use super::*;
use crate::cost::{CostModel, CostOptions, Paging};
use crate::model_profile::ComputeModel;
use policies::{UnitInfo, UnitMap};
use profile::{Constant, ConstantName as C, Device, Profile};
use traces::{KeySpace, ModelSpec};

const MIB: u64 = 1 << 20;
/// 2 MiB at 1 GB/s (1000 B/µs)
const COPY_2MIB: f64 = 2097.152;

/// A test profile with round numbers: commit 10 µs and decommit 5 µs per granule, H2D
/// 1 GB/s, faults 0.5 GB/s, prefetch 2 GB/s, usable 10 MiB, first touch 100/200/300 µs.
pub(super) fn test_profile(spread: Option<f64>) -> Profile {
    let mut p = Profile::new("test", "hand-made", Device::default());
    let a = |v: f64, u: &str| Constant::assumed(v, u, "test value");
    p.set(C::VmmCommit, a(10.0, "us"))
        .set(C::VmmDecommit, a(5.0, "us"))
        .set(C::H2dBandwidth, a(1.0, "GB/s"))
        .set(C::FaultBandwidth, a(0.5, "GB/s"))
        .set(C::PrefetchBandwidth, a(2.0, "GB/s"))
        .set(C::VramUsable, a(10.0, "MiB"))
        .set(C::FirstTouchBelow90, a(100.0, "us"))
        .set(C::FirstTouch90To100, a(200.0, "us"));
    let mut above = a(300.0, "us");
    if let Some(s) = spread {
        above = above.with_range(300.0 * (1.0 - s / 2.0), 300.0 * (1.0 + s / 2.0));
    }
    p.set(C::FirstTouchAbove100, above);
    p.validate().unwrap();
    p
}

/// `n` units of `bytes` useful bytes each, one per key, 2 MiB granules, over `layers` layers.
pub(super) fn unit_map(layers: usize, per_layer: usize, bytes: u64, granule: u64) -> UnitMap {
    let n = layers * per_layer;
    UnitMap {
        spec: "e1".into(),
        paging: Paging::Vmm,
        expert_bytes: bytes,
        granule_bytes: granule,
        key_first: (0..n as u32).collect(),
        key_count: vec![1; n],
        units: (0..n)
            .map(|k| UnitInfo {
                useful_bytes: bytes,
                committed_bytes: bytes.div_ceil(granule) * granule,
                experts: 1,
                first_moe_layer: (k / per_layer) as u32,
                last_moe_layer: (k / per_layer) as u32,
            })
            .collect(),
    }
}

pub(super) fn compute(ne: f64, ex: f64) -> ComputeModel {
    ComputeModel {
        nonexpert_us: ne,
        expert_us: ex,
        ..ComputeModel::zero()
    }
}

pub(super) fn vmm_cost(p: &Profile) -> CostModel {
    CostModel::new(p, Paging::Vmm, CostOptions::default()).unwrap()
}

fn ks(layers: usize, experts: u16) -> KeySpace {
    KeySpace::new(&ModelSpec::uniform("t", layers, experts, 1))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b.abs().max(1.0)
}

#[test]
fn one_layer_without_overlap_is_the_sum_of_its_parts() {
    let map = unit_map(1, 4, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0, 1], &[0, 1], &[0, 1], &[]);
    let opts = EngineOptions {
        serial_loader: true,
        ..Default::default()
    };
    let p = test_profile(None);
    let r = replay(
        &plans,
        &map,
        &ks(1, 4),
        &vmm_cost(&p),
        &compute(50.0, 20.0),
        opts,
    )
    .unwrap();
    let want = 50.0 + 2.0 * (10.0 + COPY_2MIB) + 2.0 * 20.0;
    assert!(close(r.step_us[0], want), "{} vs {want}", r.step_us[0]);
    assert!(close(
        r.timing.stall_ms_per_step * 1e3,
        2.0 * (10.0 + COPY_2MIB)
    ));
    // with an asynchronous loader the second commit overlaps the first copy
    let r = replay(
        &plans,
        &map,
        &ks(1, 4),
        &vmm_cost(&p),
        &compute(50.0, 20.0),
        EngineOptions::default(),
    )
    .unwrap();
    assert!(close(r.step_us[0], 50.0 + 10.0 + 2.0 * COPY_2MIB + 40.0));
    assert_eq!((r.timing.map_calls, r.timing.unmap_calls), (2, 0));
}

#[test]
fn copy_is_hidden_behind_compute_with_a_prefetch() {
    // two MoE layers, unit 0 needed by layer 0, unit 2 by layer 1; layer 0's experts take
    // 5000 µs, longer than the prefetch of unit 2 issued at layer 0's router
    let map = unit_map(2, 2, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(2);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0], &[0], &[0], &[]);
    plans.push_group(1, &[2], &[2], &[2], &[]);
    let opts = EngineOptions {
        predictor: PredictorKind::Oracle,
        window: 1,
        ..Default::default()
    };
    let p = test_profile(None);
    let r = replay(
        &plans,
        &map,
        &ks(2, 2),
        &vmm_cost(&p),
        &compute(100.0, 5000.0),
        opts,
    )
    .unwrap();
    // layer 0 stalls for its own page-in (commit + copy); layer 1 does not stall at all
    let stall0 = 10.0 + COPY_2MIB;
    assert!(close(r.timing.stall_ms_per_step * 1e3, stall0));
    assert!(close(
        r.step_us[0],
        100.0 + stall0 + 5000.0 + 100.0 + 5000.0
    ));
    assert!(close(r.timing.h2d_ms_per_step * 1e3, 2.0 * COPY_2MIB));
    assert_eq!((r.timing.prefetch_issued, r.timing.prefetch_used), (1, 1));
}

#[test]
fn copy_bound_steps_by_hand() {
    // no compute; each step pages in three 2 MiB units and drops them after the group
    let map = unit_map(1, 9, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    for s in 0..3u32 {
        let u: Vec<u32> = (3 * s..3 * s + 3).collect();
        plans.begin_step(1, 1);
        plans.push_group(0, &u, &u, &u, &u);
    }
    let p = test_profile(None);
    let r = replay(
        &plans,
        &map,
        &ks(1, 9),
        &vmm_cost(&p),
        &compute(0.0, 0.0),
        EngineOptions::default(),
    )
    .unwrap();
    // step 1: first commit, then three back-to-back copies
    assert!(close(r.step_us[0], 10.0 + 3.0 * COPY_2MIB));
    // later steps: the previous group's three decommits (5 µs each) come first on the driver
    assert!(close(r.step_us[1], 15.0 + 10.0 + 3.0 * COPY_2MIB));
    assert!(close(r.step_us[2], 15.0 + 10.0 + 3.0 * COPY_2MIB));
    assert_eq!((r.timing.map_calls, r.timing.unmap_calls), (9, 9));
    // tokens per second = 3 tokens / total time
    let total: f64 = r.step_us.iter().sum();
    assert!(close(r.timing.tokens_per_s, 3.0 / (total / 1e6)));
}

#[test]
fn fault_bound_os4k_step() {
    // one 1 MiB expert in 4 KiB pages: 256 page units, faulted at 0.5 GB/s in one batch
    let pages = 256usize;
    let map = UnitMap {
        spec: "os4k".into(),
        paging: Paging::Os,
        expert_bytes: MIB,
        granule_bytes: 4096,
        key_first: vec![0],
        key_count: vec![pages as u32],
        units: vec![
            UnitInfo {
                useful_bytes: 4096,
                committed_bytes: 4096,
                experts: 1,
                first_moe_layer: 0,
                last_moe_layer: 0,
            };
            pages
        ],
    };
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    let u: Vec<u32> = (0..pages as u32).collect();
    plans.push_group(0, &[0], &u, &u, &[]);
    let p = test_profile(None);
    let cost = CostModel::new(&p, Paging::Os, CostOptions::default()).unwrap();
    let r = replay(
        &plans,
        &map,
        &ks(1, 1),
        &cost,
        &compute(30.0, 70.0),
        EngineOptions::default(),
    )
    .unwrap();
    let fault = MIB as f64 / 500.0; // 2097.152 µs
    assert!(close(r.step_us[0], 30.0 + fault + 70.0));
    assert!(close(r.timing.fault_ms_per_step * 1e3, fault));
    assert_eq!((r.timing.map_calls, r.timing.h2d_ms_per_step), (0, 0.0));
}

/// Four MoE layers, three steps, one fresh unit per group, streamed.
fn chain_plans() -> (Plans, UnitMap) {
    let map = unit_map(4, 3, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(4);
    for s in 0..3u32 {
        plans.begin_step(1, 1);
        for m in 0..4u32 {
            let u = [m * 3 + s];
            plans.push_group(m as usize, &u, &u, &u, &u);
        }
    }
    (plans, map)
}

#[test]
fn oracle_prefetch_with_enough_window_removes_every_stall_but_the_first() {
    let (plans, map) = chain_plans();
    let p = test_profile(None);
    // non-expert compute (3000 µs) is longer than one commit + copy (2107 µs)
    let c = compute(3000.0, 0.0);
    let oracle = EngineOptions {
        predictor: PredictorKind::Oracle,
        window: 1,
        ..Default::default()
    };
    let r = replay(&plans, &map, &ks(4, 3), &vmm_cost(&p), &c, oracle).unwrap();
    let first = 10.0 + COPY_2MIB; // the very first group cannot be predicted
    assert!(close(r.timing.stall_ms_per_step * 3e3, first));
    assert_eq!((r.timing.prefetch_issued, r.timing.prefetch_used), (11, 11));
    assert_eq!(r.detail.prefetch_wasted, 0);
    let none = replay(
        &plans,
        &map,
        &ks(4, 3),
        &vmm_cost(&p),
        &c,
        EngineOptions::default(),
    )
    .unwrap();
    // without prefetch every group stalls at least commit + copy
    assert!(none.timing.stall_ms_per_step * 3e3 >= 12.0 * first - 1e-6);
}

#[test]
fn prefetches_that_cannot_finish_in_a_layer_are_late_and_the_report_says_how_much_they_hid() {
    let (plans, map) = chain_plans();
    let p = test_profile(None);
    // non-expert compute 1000 µs < commit + copy 2107.152 µs: each prefetch, issued at the
    // router before its group, is still copying at that group's router
    let c = compute(1000.0, 0.0);
    let price = |k: PredictorKind| {
        let o = EngineOptions {
            predictor: k,
            window: 1,
            ..Default::default()
        };
        replay(&plans, &map, &ks(4, 3), &vmm_cost(&p), &c, o)
    };
    let r = price(PredictorKind::Oracle).unwrap();
    let f = r.prefetch;
    assert_eq!((f.issued, f.used, f.late, f.wasted), (11, 0, 11, 0));
    // by hand: group 0 stalls commit + copy; the copy engine then runs the prefetches back
    // to back, so each later group waits copy - 1000 µs of the 1000 µs its router took
    let first = 10.0 + COPY_2MIB;
    let with = first + 11.0 * (COPY_2MIB - 1000.0);
    assert!(close(r.timing.stall_ms_per_step * 3e3, with));
    let learning = Learning::Online;
    let rep = prefetch::report(
        PredictorKind::Oracle,
        1,
        PrefetchIssue::Legacy,
        None,
        None,
        None,
        &learning,
        &r,
        price,
    )
    .unwrap();
    // without prefetch all 12 groups stall commit + copy
    assert!(close(rep.stall_ms_per_step_none * 3e3, 12.0 * first));
    assert!(close(
        rep.stall_hidden_ms_per_step * 3e3,
        12.0 * first - with
    ));
    assert_eq!(rep.stall_hidden_of_oracle, Some(1.0));
    assert_eq!((rep.precision, rep.recall), (Some(1.0), Some(11.0 / 12.0)));
    assert_eq!((rep.page_ins, rep.learns_from.as_str()), (12, "future"));
    assert_eq!(rep.wasted_bytes_per_token, 0.0);
    // a wrong predictor: prev-token's 8 prefetches all wasted, 2 MiB each over 3 tokens
    let r = price(PredictorKind::PrevToken).unwrap();
    let rep = prefetch::report(
        PredictorKind::PrevToken,
        1,
        PrefetchIssue::Legacy,
        None,
        None,
        None,
        &learning,
        &r,
        price,
    )
    .unwrap();
    assert_eq!((rep.issued, rep.used + rep.late, rep.wasted), (8, 0, 8));
    assert_eq!((rep.precision, rep.recall), (Some(0.0), Some(0.0)));
    assert!(close(
        rep.wasted_bytes_per_token,
        8.0 * 2.0 * MIB as f64 / 3.0
    ));
    assert!(close(rep.stall_ms_per_step_oracle * 3e3, with));
    assert_eq!(rep.learns_from, "online");
}

#[test]
fn a_wrong_predictor_wastes_its_prefetches() {
    let (plans, map) = chain_plans();
    let p = test_profile(None);
    let opts = EngineOptions {
        predictor: PredictorKind::PrevToken,
        window: 1,
        ..Default::default()
    };
    // every group uses a fresh unit: the previous token's units are never needed again
    let r = replay(
        &plans,
        &map,
        &ks(4, 3),
        &vmm_cost(&p),
        &compute(3000.0, 0.0),
        opts,
    )
    .unwrap();
    assert_eq!(r.timing.prefetch_used, 0);
    assert_eq!(r.timing.prefetch_issued, r.detail.prefetch_wasted);
    // prev-token predicts target groups 4..=11 (those with a previous step), issued at
    // groups 3..=10: 8 prefetches, each of a unit that was dropped after its use
    assert_eq!(r.timing.prefetch_issued, 8);
}

#[test]
fn oversubscription_raises_cost_exactly_as_the_curve_says() {
    let map = unit_map(1, 1, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0], &[0], &[0], &[]);
    let p = test_profile(None);
    let cost = vmm_cost(&p);
    let run = |nonexpert_mib: f64| {
        let c = ComputeModel {
            nonexpert_bytes: nonexpert_mib * MIB as f64,
            ..ComputeModel::zero()
        };
        replay(&plans, &map, &ks(1, 1), &cost, &c, EngineOptions::default()).unwrap()
    };
    let base = run(0.0); // 2 of 10 MiB: below 90%
    let mid = run(7.5); // 9.5 of 10 MiB: the 90-100% band, x 200/100
    let over = run(8.5); // 10.5 of 10 MiB: above 100%, x 300/100
    assert!(close(base.step_us[0], 10.0 + COPY_2MIB));
    assert!(close(mid.step_us[0], 2.0 * (10.0 + COPY_2MIB)));
    assert!(close(over.step_us[0], 3.0 * (10.0 + COPY_2MIB)));
    assert_eq!(over.detail.oversubscribed_page_ins, 1);
    assert!(close(over.timing.peak_mapped_mib, 10.5));
    // a profile without the band's constant stops with an error naming it
    let mut q = test_profile(None);
    q.constants.remove("first_touch_above_100");
    let e = replay(
        &plans,
        &map,
        &ks(1, 1),
        &vmm_cost(&q),
        &ComputeModel {
            nonexpert_bytes: 8.5 * MIB as f64,
            ..ComputeModel::zero()
        },
        EngineOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("first_touch_above_100") && e.contains("test"),
        "{e}"
    );
}

#[test]
fn same_seed_same_bits_other_seed_other_jitter() {
    let (plans, map) = chain_plans();
    let p = test_profile(Some(0.4));
    let c = ComputeModel {
        nonexpert_bytes: 9.0 * MIB as f64, // every page-in lands above 100%
        ..compute(100.0, 50.0)
    };
    let run = |seed| {
        let o = EngineOptions {
            seed,
            ..Default::default()
        };
        replay(&plans, &map, &ks(4, 3), &vmm_cost(&p), &c, o).unwrap()
    };
    let (a, b, d) = (run(7), run(7), run(8));
    let bits = |r: &Replay| r.step_us.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(a.timing, b.timing);
    assert_ne!(bits(&a), bits(&d));
    // jitter stays within +-20% around the curve's factor 3 for every page-in
    let lo = 3.0 * 0.8 * COPY_2MIB * 12.0;
    let hi = 3.0 * 1.2 * COPY_2MIB * 12.0;
    let copy = a.timing.h2d_ms_per_step * 3e3;
    assert!(lo <= copy && copy <= hi, "{copy}");
}

#[test]
fn admission_cap_never_lets_mapped_memory_pass_the_cap() {
    // n sequences, 6 steps; each sequence holds 1 MiB of KV per token; one 2 MiB unit per
    // group, streamed; usable 10 MiB, cap 0.9 = 9 MiB.
    let map = unit_map(1, 6, 2 * MIB, 2 * MIB);
    let build = |n: usize| -> anyhow::Result<Plans> {
        let mut plans = Plans::new(1);
        for s in 0..6u32 {
            plans.begin_step(n as u32, n as u64 * (s as u64 + 1));
            plans.push_group(0, &[s], &[s], &[s], &[s]);
        }
        Ok(plans)
    };
    let c = ComputeModel {
        kv_bytes_per_token: MIB as f64,
        ..compute(10.0, 10.0)
    };
    let p = test_profile(None);
    let cost = vmm_cost(&p);
    let (adm, plans, r) = admit(
        4,
        0.9,
        &map,
        &ks(1, 6),
        &cost,
        &c,
        EngineOptions::default(),
        Learning::Online,
        build,
    )
    .unwrap();
    // by hand: peak = 6 n MiB of KV + 2 MiB unit <= 9 MiB  =>  n = 1
    assert_eq!(adm.admitted, 1);
    assert_eq!(plans.steps[0].sequences, 1);
    assert!(r.peak_mapped_bytes <= 0.9 * 10.0 * MIB as f64);
    assert!(close(r.timing.peak_mapped_mib, 8.0));
    // and a cap that holds nobody is an error naming the memory needed
    let e = admit(
        4,
        0.5,
        &map,
        &ks(1, 6),
        &cost,
        &c,
        EngineOptions::default(),
        Learning::Online,
        build,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("admits no sequence"), "{e}");
}

#[test]
fn deferred_unmap_takes_decommits_off_the_critical_path_but_holds_memory_longer() {
    let map = unit_map(1, 9, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    for s in 0..3u32 {
        let u: Vec<u32> = (3 * s..3 * s + 3).collect();
        plans.begin_step(1, 1);
        plans.push_group(0, &u, &u, &u, &u);
    }
    let mut p = test_profile(None);
    p.set(
        C::VramUsable,
        Constant::assumed(100.0, "MiB", "no oversubscription here"),
    );
    let run = |deferred_unmap| {
        let o = EngineOptions {
            deferred_unmap,
            ..Default::default()
        };
        replay(
            &plans,
            &map,
            &ks(1, 9),
            &vmm_cost(&p),
            &compute(0.0, 0.0),
            o,
        )
        .unwrap()
    };
    let (crit, def) = (run(false), run(true));
    // critical path: steps 2 and 3 start with the previous group's three 5 µs decommits
    assert!(close(crit.step_us[1], 15.0 + 10.0 + 3.0 * COPY_2MIB));
    // deferred: demand commits go first; the decommits run while the driver idles
    for s in 0..3 {
        assert!(close(def.step_us[s], 10.0 + 3.0 * COPY_2MIB));
    }
    // the same driver work is done either way: 9 commits and 9 decommits
    assert_eq!((def.timing.map_calls, def.timing.unmap_calls), (9, 9));
    assert!(close(
        def.timing.vmm_ms_per_step * 3e3,
        9.0 * 10.0 + 9.0 * 5.0
    ));
    // but the old group stays mapped while the new one comes in: 12 MiB instead of 6
    assert!(close(crit.timing.peak_mapped_mib, 6.0));
    assert!(close(def.timing.peak_mapped_mib, 12.0));
}

#[test]
fn conservation_bytes_copied_equal_page_ins_times_useful_bytes_of_the_cache_driver() {
    use crate::cache::{Batching, Budget, CacheConfig, Semantics, Split};
    use policies::retention::PolicyKind;
    let trace = churn::churn_trace(churn::Routing::Uniform, 5);
    let map = unit_map(1, 32, 3 * MIB, 2 * MIB); // e1: 3 MiB experts in two granules
    let cfg = CacheConfig {
        policy: PolicyKind::Lru,
        budget: Budget::Units(8),
        split: Split::Global,
        semantics: Semantics::Group,
        dram: None,
        seed: 0,
    };
    let plans = build::plans(
        &trace,
        traces::PhaseSel::Decode,
        &map,
        Batching::default(),
        None,
        Some(&cfg),
    )
    .unwrap();
    // the cache driver's own count, run independently
    let w = crate::cache::Workload::build(
        &trace,
        &map,
        traces::PhaseSel::Decode,
        Batching::default(),
        None,
    )
    .unwrap();
    let driver = w.run(&map, &cfg).unwrap().cache;
    assert_eq!(plans.total_page_ins(), driver.page_ins);
    // a naive LRU of budget 8 under group semantics: resident = the last group's 8 experts
    let ks = trace.keyspace();
    let mut prev: Vec<u16> = Vec::new();
    let mut naive = 0u64;
    for t in 0..200 {
        let sel = trace.selection(&ks, 0, traces::Phase::Decode, t, 0);
        naive += sel.iter().filter(|e| !prev.contains(e)).count() as u64;
        prev = sel.to_vec();
    }
    assert_eq!(driver.page_ins, naive);
    let p = test_profile(None);
    let mut p = p;
    p.set(
        C::VramUsable,
        Constant::assumed(1000.0, "MiB", "no oversubscription here"),
    );
    let r = replay(
        &plans,
        &map,
        &ks,
        &vmm_cost(&p),
        &compute(0.0, 0.0),
        EngineOptions::default(),
    )
    .unwrap();
    assert_eq!(r.detail.bytes_in, driver.page_ins * 3 * MIB);
    assert_eq!(r.timing.map_calls, 2 * driver.page_ins);
    assert_eq!(r.timing.unmap_calls, 2 * driver.evictions);
    // copy time is exactly bytes / bandwidth: 1 GB/s = 1000 B/µs
    let copy_us = r.timing.h2d_ms_per_step * 1e3 * 200.0;
    assert!(close(copy_us, (driver.page_ins * 3 * MIB) as f64 / 1000.0));
}

#[test]
fn plans_are_consistent_when_the_budget_is_below_one_group() {
    // granite prose, e2, LRU 25% split per layer: 4 slots per layer but about 7 units per
    // group, so the policy evicts units of the group it just paged in
    use crate::cache::{Batching, Budget, CacheConfig, Semantics, Split};
    use policies::retention::PolicyKind;
    let ti = crate::runner::TraceInput::load(None).unwrap();
    let w = crate::runner::Workload::new(ti.clone(), None).unwrap();
    let (map, _) = crate::runner::build_units(&crate::runner::RunConfig::default(), &w).unwrap();
    let cfg = CacheConfig {
        policy: PolicyKind::Lru,
        budget: Budget::parse("25%").unwrap(),
        split: Split::PerLayer,
        semantics: Semantics::Group,
        dram: None,
        seed: 0,
    };
    let plans = build::plans(
        &ti.trace,
        traces::PhaseSel::Decode,
        &map,
        Batching::default(),
        None,
        Some(&cfg),
    )
    .unwrap();
    // naive replay of the plan: no page-in of a resident unit, no eviction of an absent one
    // (physical order: victims resident before the group are unmapped before the page-ins,
    // the group's own victims after its compute)
    let mut resident = std::collections::HashSet::new();
    let mut peak_units = 0;
    for g in &plans.groups {
        let late: Vec<u32> = plans
            .evicted(g)
            .iter()
            .copied()
            .filter(|u| !resident.remove(u))
            .collect();
        for &u in plans.page_ins(g) {
            assert!(resident.insert(u), "unit {u} paged in while resident");
        }
        peak_units = peak_units.max(resident.len());
        for u in late {
            assert!(resident.remove(&u), "unit {u} evicted while absent");
        }
    }
    let unit = map.units[0].committed_bytes as f64;
    let peak = batch::plan_peak_bytes(&plans, &map, &ComputeModel::zero());
    assert_eq!(peak, peak_units as f64 * unit);
    let p = profile::load("rtx4060-laptop-wddm").unwrap();
    let r = replay(
        &plans,
        &map,
        &ti.trace.keyspace(),
        &vmm_cost(&p),
        &ComputeModel::zero(),
        EngineOptions::default(),
    )
    .unwrap();
    assert_eq!(r.peak_mapped_bytes, peak);
    // the driver's peak (after each group) is the budget: 24 layers x 4 slots of 6 MiB
    let driver = crate::cache::Workload::build(
        &ti.trace,
        &map,
        traces::PhaseSel::Decode,
        Batching::default(),
        None,
    )
    .unwrap()
    .run(&map, &cfg)
    .unwrap()
    .cache;
    assert_eq!(driver.peak_resident_mib, 576.0);
    assert!(peak >= 576.0 * 1048576.0);
    assert_eq!(r.timing.unmap_calls, 3 * driver.evictions);
}

#[test]
fn a_unit_paged_in_again_before_its_deferred_unmap_never_holds_two_mappings() {
    // unit 0 is used and dropped by every step; with a busy driver its deferred decommit is
    // still queued when the next step needs it again
    let map = unit_map(1, 1, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    for _ in 0..50 {
        plans.begin_step(1, 1);
        plans.push_group(0, &[0], &[0], &[0], &[0]);
    }
    let mut p = test_profile(None);
    p.set(
        C::VramUsable,
        Constant::assumed(100.0, "MiB", "no oversubscription here"),
    );
    let o = EngineOptions {
        deferred_unmap: true,
        ..Default::default()
    };
    let r = replay(
        &plans,
        &map,
        &ks(1, 1),
        &vmm_cost(&p),
        &compute(0.0, 0.0),
        o,
    )
    .unwrap();
    assert!(close(r.timing.peak_mapped_mib, 2.0));
    assert_eq!((r.timing.map_calls, r.timing.unmap_calls), (50, 50));
}

#[test]
fn compute_touches_past_usable_vram_rise_by_the_curves_factor() {
    // one group, nothing paged in: non-expert compute 100 µs, one expert of 50 µs. Mapped
    // memory is only non-expert weights + KV: at 9.5 of 10 MiB (90-100%) touches of resident
    // memory run at device speed; at 10.5 MiB (past usable) they cost x 300 / 100.
    let map = unit_map(1, 1, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0], &[0], &[], &[]);
    plans.preloaded = vec![];
    let p = test_profile(None);
    let cost = vmm_cost(&p);
    let run = |nonexpert_mib: f64| {
        let c = ComputeModel {
            nonexpert_bytes: nonexpert_mib * MIB as f64,
            ..compute(100.0, 50.0)
        };
        replay(&plans, &map, &ks(1, 1), &cost, &c, EngineOptions::default()).unwrap()
    };
    assert!(close(run(5.0).step_us[0], 150.0));
    assert!(close(run(9.5).step_us[0], 150.0));
    let over = run(10.5);
    assert!(close(over.step_us[0], 3.0 * 150.0));
    assert!(close(over.timing.compute_ms_per_step * 1e3, 450.0));
    // touches are not page-ins: the page-in oversubscription counter stays 0
    assert_eq!(over.detail.oversubscribed_page_ins, 0);
}

#[test]
fn dense_faults_router_sync_and_kernel_fixed_part_by_hand() {
    // os pages: 2 keys of 4 pages each (1 MiB pages), both selected in one group; the keys
    // are apart (units 0..4 and 8..12 of a 16-page bank) so they fault as 2 runs.
    let mut p = test_profile(None);
    let a = |v: f64, u: &str| Constant::assumed(v, u, "test value");
    p.set(C::FaultRunLatency, a(40.0, "us"))
        .set(C::FaultDenseBandwidth, a(2.0, "GB/s"))
        .set(C::RouterSync, a(7.0, "us"));
    let cost = CostModel::new(&p, Paging::Os, CostOptions::default()).unwrap();
    assert_eq!(cost.host_sync_us, 7.0);
    let mut map = unit_map(1, 16, MIB, MIB);
    map.spec = "os1m".into();
    map.paging = Paging::Os;
    map.key_first = vec![0, 4, 8, 12];
    map.key_count = vec![4; 4];
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    let units: Vec<u32> = (0..4).chain(8..12).collect();
    plans.push_group(0, &[0, 2], &units, &units, &[]);
    let c = ComputeModel {
        expert_group_fixed_us: 20.0,
        ..compute(100.0, 50.0)
    };
    let r = replay(&plans, &map, &ks(1, 4), &cost, &c, EngineOptions::default()).unwrap();
    // 100 (non-expert) + 7 (router to host) + 2 runs x 40 + 8 MiB / 2000 B/µs (faults)
    // + 20 + 2 x 50 (experts)
    let faults = 2.0 * 40.0 + 8.0 * MIB as f64 / 2000.0;
    assert!(
        close(r.step_us[0], 100.0 + 7.0 + faults + 120.0),
        "{} vs {}",
        r.step_us[0],
        100.0 + 7.0 + faults + 120.0
    );
    assert!(close(r.timing.fault_ms_per_step * 1e3, faults));
}

#[test]
fn step_parts_split_each_step_by_hand() {
    // two steps of one layer: step 0 pages in units 0 and 1 (2 MiB each), step 1 evicts
    // unit 0 and pages in unit 2; asynchronous loader, no overlap with compute
    let map = unit_map(1, 4, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0, 1], &[0, 1], &[0, 1], &[]);
    plans.begin_step(1, 2);
    plans.push_group(0, &[1, 2], &[1, 2], &[2], &[0]);
    let p = test_profile(None);
    let r = replay(
        &plans,
        &map,
        &ks(1, 4),
        &vmm_cost(&p),
        &compute(50.0, 20.0),
        EngineOptions::default(),
    )
    .unwrap();
    let (a, b) = (&r.step_parts[0], &r.step_parts[1]);
    assert_eq!(r.step_parts.len(), 2);
    // step 0: 2 commits of 10 µs, 2 copies, compute 50 + 2 x 20, stall = commit + 2 copies
    assert!(close(a.commit_us, 20.0) && close(a.decommit_us, 0.0));
    assert!(close(a.copy_us, 2.0 * COPY_2MIB));
    assert!(close(a.compute_us, 90.0) && close(a.expert_us, 40.0));
    assert!(close(a.stall_us, 10.0 + 2.0 * COPY_2MIB));
    assert_eq!(a.groups, 1);
    // step 1: one decommit of 5 µs first, then one commit and one copy
    assert!(close(b.decommit_us, 5.0) && close(b.commit_us, 10.0));
    assert!(close(b.copy_us, COPY_2MIB));
    assert!(close(b.stall_us, 5.0 + 10.0 + COPY_2MIB));
    // each step's time is its compute plus its stall, and the parts add up to the totals
    for (s, t) in r.step_parts.iter().zip(&r.step_us) {
        assert!(close(s.compute_us + s.stall_us, *t));
    }
    let sum = |f: fn(&StepParts) -> f64| r.step_parts.iter().map(f).sum::<f64>();
    assert!(close(
        sum(|s| s.commit_us + s.decommit_us),
        r.timing.vmm_ms_per_step * 2e3
    ));
}

#[test]
fn fresh_granules_pay_the_premium_released_ones_do_not() {
    // 1-granule units; commit 10 µs + 3 µs per fresh granule, decommit 5 µs
    let mut p = test_profile(None);
    p.set(
        C::VmmCommitFresh,
        Constant::assumed(3.0, "us", "test value"),
    );
    let map = unit_map(1, 4, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0, 1], &[0, 1], &[0, 1], &[]);
    plans.begin_step(1, 2);
    plans.push_group(0, &[1, 2], &[1, 2], &[2], &[0]); // reuses unit 0's granule
    plans.begin_step(1, 3);
    plans.push_group(0, &[1, 2, 3], &[1, 2, 3], &[3], &[]); // grows again
    let r = replay(
        &plans,
        &map,
        &ks(1, 4),
        &vmm_cost(&p),
        &compute(50.0, 20.0),
        EngineOptions::default(),
    )
    .unwrap();
    let commits: Vec<f64> = r.step_parts.iter().map(|s| s.commit_us).collect();
    assert!(close(commits[0], 2.0 * 13.0), "{commits:?}");
    assert!(close(commits[1], 10.0), "{commits:?}");
    assert!(close(commits[2], 13.0), "{commits:?}");
}

#[test]
fn os_evictions_hold_the_fault_handler_per_run_after_the_experts() {
    // os pages of 1 MiB, 2 keys of 4 pages apart (2 runs), streamed: faulted in and evicted
    // by the same group, two steps
    let mut p = test_profile(None);
    let a = |v: f64, u: &str| Constant::assumed(v, u, "test value");
    p.set(C::FaultRunLatency, a(40.0, "us"))
        .set(C::FaultDenseBandwidth, a(2.0, "GB/s"))
        .set(C::RouterSync, a(7.0, "us"))
        .set(C::OsEvictRunLatency, a(1000.0, "us"))
        .set(C::OsEvictBandwidth, a(4.0, "GB/s"));
    let cost = CostModel::new(&p, Paging::Os, CostOptions::default()).unwrap();
    let mut map = unit_map(1, 16, MIB, MIB);
    map.spec = "os1m".into();
    map.paging = Paging::Os;
    map.key_first = vec![0, 4, 8, 12];
    map.key_count = vec![4; 4];
    let units: Vec<u32> = (0..4).chain(8..12).collect();
    let mut plans = Plans::new(1);
    for step in 1..=2 {
        plans.begin_step(1, step);
        plans.push_group(0, &[0, 2], &units, &units, &units);
    }
    let c = ComputeModel {
        expert_group_fixed_us: 20.0,
        ..compute(100.0, 50.0)
    };
    let r = replay(&plans, &map, &ks(1, 4), &cost, &c, EngineOptions::default()).unwrap();
    let faults = 2.0 * 40.0 + 8.0 * MIB as f64 / 2000.0;
    // step 0: non-expert 100, router 7, faults, experts 20 + 2 x 50; its eviction (2 runs x
    // 1000 µs, bytes not priced) starts when the experts are done
    assert!(
        close(r.step_us[0], 107.0 + faults + 120.0),
        "{:?}",
        r.step_us
    );
    // step 1: its faults wait for step 0's eviction (2000 µs > non-expert + router 107 µs)
    assert!(
        close(r.step_us[1], 2000.0 + faults + 120.0),
        "{:?}",
        r.step_us
    );
    assert!(close(r.step_parts[1].fault_us, 2000.0 + faults));
    // without the eviction constant evictions cost nothing again
    let mut q = p.clone();
    q.constants.remove("os_evict_run_latency");
    let cost = CostModel::new(&q, Paging::Os, CostOptions::default()).unwrap();
    let r = replay(&plans, &map, &ks(1, 4), &cost, &c, EngineOptions::default()).unwrap();
    assert!(close(r.step_us[1], 107.0 + faults + 120.0));
}

#[test]
fn streamed_units_are_decommitted_a_round_trip_after_the_experts() {
    // one layer, one 1-granule unit streamed per step; router sync 7 µs, non-expert 1 µs,
    // commit 10, decommit 5, experts 20
    let mut p = test_profile(None);
    p.set(C::RouterSync, Constant::assumed(7.0, "us", "test value"));
    let map = unit_map(1, 4, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    for (step, u) in [(1, 0u32), (2, 1)] {
        plans.begin_step(1, step);
        plans.push_group(0, &[u], &[u], &[u], &[u]);
    }
    let r = replay(
        &plans,
        &map,
        &ks(1, 4),
        &vmm_cost(&p),
        &compute(1.0, 20.0),
        EngineOptions::default(),
    )
    .unwrap();
    // step 0: 1 + 7 + 10 + copy + 20; unit 0's decommit runs from its experts' end + 7 to + 12
    assert!(close(r.step_us[0], 38.0 + COPY_2MIB), "{:?}", r.step_us);
    // step 1: its router is at + 1 + 7 = 8 after step 0 ends, the driver is free at + 12:
    // the commit waits 4 µs
    assert!(
        close(r.step_us[1], 1.0 + 7.0 + 4.0 + 10.0 + COPY_2MIB + 20.0),
        "{:?}",
        r.step_us
    );
}

#[test]
fn read_slopes_price_vmm_calls_by_the_read_live_set() {
    // 1-granule units; commit 10 + 1024 µs x read / 1024 per granule, decommit 5 + 2048 x
    // read / 1024 (1 and 2 µs per read granule)
    let mut p = test_profile(None);
    let a = |v: f64| Constant::assumed(v, "us", "test value");
    p.set(C::VmmCommitReadSlope, a(1024.0))
        .set(C::VmmDecommitReadSlope, a(2048.0));
    let map = unit_map(1, 4, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0, 1], &[0, 1], &[0, 1], &[]); // nothing read yet
    plans.begin_step(1, 2);
    plans.push_group(0, &[1, 2], &[1, 2], &[2], &[0]); // 0 and 1 read
    plans.begin_step(1, 3);
    plans.push_group(0, &[3], &[3], &[3], &[]); // 1 and 2 read
    let r = replay(
        &plans,
        &map,
        &ks(1, 4),
        &vmm_cost(&p),
        &compute(50.0, 20.0),
        EngineOptions::default(),
    )
    .unwrap();
    let commits: Vec<f64> = r.step_parts.iter().map(|s| s.commit_us).collect();
    let decommits: Vec<f64> = r.step_parts.iter().map(|s| s.decommit_us).collect();
    // step 1: two commits with nothing read; step 2: unit 0 evicted with 2 granules read
    // (5 + 2 x 2), then unit 2 committed with 1 read (10 + 1); step 3: 2 read (10 + 2)
    assert!(close(commits[0], 20.0), "{commits:?}");
    assert!(close(decommits[1], 9.0), "{decommits:?}");
    assert!(close(commits[1], 11.0), "{commits:?}");
    assert!(close(commits[2], 12.0), "{commits:?}");
    // without the slopes, the same plan costs the plain per-granule figures
    let mut q = p.clone();
    q.constants.remove("vmm_commit_read_slope");
    q.constants.remove("vmm_decommit_read_slope");
    let r = replay(
        &plans,
        &map,
        &ks(1, 4),
        &vmm_cost(&q),
        &compute(50.0, 20.0),
        EngineOptions::default(),
    )
    .unwrap();
    let commits: Vec<f64> = r.step_parts.iter().map(|s| s.commit_us).collect();
    assert!(close(commits[1], 10.0) && close(commits[2], 10.0));
    assert!(close(r.step_parts[1].decommit_us, 5.0));
}

#[test]
fn os_evictions_overlapping_faults_hold_the_handler_per_run_and_per_byte() {
    // the setup of os_evictions_hold_the_fault_handler_per_run_after_the_experts, with the
    // overlap fit: 100 µs per evicted run + evicted bytes at 1 GB/s (1000 B/µs)
    let mut p = test_profile(None);
    let a = |v: f64, u: &str| Constant::assumed(v, u, "test value");
    p.set(C::FaultRunLatency, a(40.0, "us"))
        .set(C::FaultDenseBandwidth, a(2.0, "GB/s"))
        .set(C::RouterSync, a(7.0, "us"))
        .set(C::OsEvictRunLatency, a(1000.0, "us"))
        .set(C::OsEvictOverlapRunLatency, a(100.0, "us"))
        .set(C::OsEvictOverlapBandwidth, a(1.0, "GB/s"));
    let mut map = unit_map(1, 16, MIB, MIB);
    map.spec = "os1m".into();
    map.paging = Paging::Os;
    map.key_first = vec![0, 4, 8, 12];
    map.key_count = vec![4; 4];
    let units: Vec<u32> = (0..4).chain(8..12).collect();
    let mut plans = Plans::new(1);
    for step in 1..=2 {
        plans.begin_step(1, step);
        plans.push_group(0, &[0, 2], &units, &units, &units);
    }
    let c = ComputeModel {
        expert_group_fixed_us: 20.0,
        ..compute(100.0, 50.0)
    };
    let faults = 2.0 * 40.0 + 8.0 * MIB as f64 / 2000.0;
    let cost = CostModel::new(&p, Paging::Os, CostOptions::default()).unwrap();
    let r = replay(&plans, &map, &ks(1, 4), &cost, &c, EngineOptions::default()).unwrap();
    // step 1's faults wait for step 0's eviction: 2 runs x 100 + 8 MiB / 1000 B/µs (the
    // per-run migration time of 1000 µs is replaced, not added)
    let evict = 200.0 + 8.0 * MIB as f64 / 1000.0;
    assert!(
        close(r.step_us[0], 107.0 + faults + 120.0),
        "{:?}",
        r.step_us
    );
    assert!(
        close(r.step_us[1], evict + faults + 120.0),
        "{:?}",
        r.step_us
    );
    // a per-run term only (no bytes term measured): 200 µs, more than the 107 µs of
    // non-expert compute and router before the next faults
    let mut q = p.clone();
    q.constants.remove("os_evict_overlap_bandwidth");
    let cost = CostModel::new(&q, Paging::Os, CostOptions::default()).unwrap();
    let r = replay(&plans, &map, &ks(1, 4), &cost, &c, EngineOptions::default()).unwrap();
    assert!(
        close(r.step_us[1], 200.0 + faults + 120.0),
        "{:?}",
        r.step_us
    );
}

#[test]
fn read_unit_slopes_price_vmm_calls_by_the_read_units() {
    // 2-granule units; commit 10 + 1024 µs x read units / 1024 per granule, decommit 5 +
    // 2048 x read units / 1024 per granule (1 and 2 µs per read unit and granule)
    let mut p = test_profile(None);
    let a = |v: f64| Constant::assumed(v, "us", "test value");
    p.set(C::VmmCommitReadUnitSlope, a(1024.0))
        .set(C::VmmDecommitReadUnitSlope, a(2048.0));
    // two units resident at a time: 8 MiB of the test profile's 10 MiB (below 90%)
    let map = unit_map(1, 4, 4 * MIB, 2 * MIB);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0, 1], &[0, 1], &[0, 1], &[]);
    plans.begin_step(1, 2);
    plans.push_group(0, &[1, 2], &[1, 2], &[2], &[0]);
    plans.begin_step(1, 3);
    plans.push_group(0, &[3], &[3], &[3], &[1]);
    let r = replay(
        &plans,
        &map,
        &ks(1, 4),
        &vmm_cost(&p),
        &compute(50.0, 20.0),
        EngineOptions::default(),
    )
    .unwrap();
    let commits: Vec<f64> = r.step_parts.iter().map(|s| s.commit_us).collect();
    // step 1: 2 units x 2 granules x 10; step 2: unit 0 evicted with 2 units read
    // (2 x 5 + 2 x 2 x 2), unit 2 committed with 1 read (2 x 10 + 2 x 1); step 3 the same
    // with units 1 and 3
    assert!(close(commits[0], 40.0), "{commits:?}");
    for s in &r.step_parts[1..] {
        assert!(
            close(s.decommit_us, 18.0) && close(s.commit_us, 22.0),
            "{s:?}"
        );
    }
}

/// Two MoE layers of 3 experts, top-2, four steps, every unit streamed (paged in and evicted
/// by its group). Layer 0 always selects {0, 1}; layer 1 selects `l1[s]` at step s.
fn cut_plans(l1: [[u32; 2]; 4]) -> (Plans, UnitMap, KeySpace) {
    let ks = KeySpace::new(&ModelSpec::uniform("t", 2, 3, 2));
    let mut plans = Plans::new(2);
    for sel in l1 {
        plans.begin_step(1, 1);
        for (m, keys) in [[0, 1], [3 + sel[0], 3 + sel[1]]].iter().enumerate() {
            plans.push_group(m, keys, keys, keys, keys);
        }
    }
    (plans, unit_map(2, 3, 2 * MIB, 2 * MIB), ks)
}

#[test]
fn a_confidence_cut_drops_the_predictions_below_it_by_hand() {
    // static, online, window 1. Layer 1's experts 0..3 are units 3..6.
    // At step s's layer-0 router it predicts layer 1 from the layer-1 counts of steps < s:
    //   s0: no counts, nothing;
    //   s1: {1, 1, 0} -> [0, 1], scores 1, 1; needs {0, 2}: 0 used, 1 wasted;
    //   s2: {2, 1, 1} -> [0, 1], scores 1, 0.5; needs {0, 2}: 0 used, 1 wasted;
    //   s3: {3, 1, 2} -> [0, 2], scores 1, 2/3; needs {0, 1}: 0 used, 2 wasted.
    // At the layer-1 routers of s0..s2 it predicts layer 0's {0, 1} (scores 1, 1): 6 used.
    // Without a cut: 12 issued, 9 used, 3 wasted. A cut of 0.6 drops only s2's expert 1
    // (0.5 < 0.6; 2/3 and the ties stay): 11 issued, 9 used, 2 wasted.
    let (plans, map, ks) = cut_plans([[0, 1], [0, 2], [0, 2], [0, 1]]);
    let p = test_profile(None);
    // non-expert compute far above a commit + copy: every prefetch is resident in time
    let (c, cost) = (compute(20_000.0, 0.0), vmm_cost(&p));
    let (plans, map, ks, c, cost) = (&plans, &map, &ks, &c, &cost);
    let price = |min_score: Option<f64>| {
        move |k: PredictorKind| {
            let o = EngineOptions {
                predictor: k,
                window: 1,
                min_score,
                ..Default::default()
            };
            replay(plans, map, ks, cost, c, o)
        }
    };
    let counts = |min_score| {
        let f = price(min_score)(PredictorKind::Static).unwrap().prefetch;
        (f.issued, f.used, f.late, f.wasted)
    };
    assert_eq!(counts(None), (12, 9, 0, 3));
    assert_eq!(counts(Some(0.6)), (11, 9, 0, 2));
    // 0.5 is at the cut, which keeps it; 0.7 drops s3's expert 2 too (2/3 < 0.7)
    assert_eq!(counts(Some(0.5)), (12, 9, 0, 3));
    assert_eq!(counts(Some(0.7)), (10, 9, 0, 1));
    // the report carries the cut, and precision and recall are the cut run's
    let r = price(Some(0.6))(PredictorKind::Static).unwrap();
    let rep = prefetch::report(
        PredictorKind::Static,
        1,
        PrefetchIssue::Legacy,
        None,
        None,
        Some(0.6),
        &Learning::Online,
        &r,
        price(Some(0.6)),
    )
    .unwrap();
    assert_eq!(rep.min_score, Some(0.6));
    // 16 page-ins (2 a group), 9 caught
    assert_eq!(
        (rep.precision, rep.recall),
        (Some(9.0 / 11.0), Some(9.0 / 16.0))
    );
}

/// The cut curve of one run without a cut, on [`cut_plans`] as the test above prices them
/// by hand (issued scores: six 1s and 1, 1 | 1, 0.5 | 1, 2/3 of layer 1; caught: the 1s but
/// s1's second): 12 issued, 9 caught at cuts to 0.5; 11 at 0.6; 10 at 0.7 to 1. Here every
/// prefetch is resident in time, so each point equals a separate run at that cut.
#[test]
fn the_cut_curve_of_one_run_equals_runs_at_each_cut_when_timing_does_not_interfere() {
    let (plans, map, ks) = cut_plans([[0, 1], [0, 2], [0, 2], [0, 1]]);
    let p = test_profile(None);
    let (c, cost) = (compute(20_000.0, 0.0), vmm_cost(&p));
    let run = |min_score| {
        let o = EngineOptions {
            predictor: PredictorKind::Static,
            window: 1,
            min_score,
            ..Default::default()
        };
        replay(&plans, &map, &ks, &cost, &c, o).unwrap().prefetch
    };
    let curve = run(None).curve;
    let by_hand = [12, 12, 12, 12, 12, 11, 10, 10, 10, 10];
    assert_eq!(curve.issued, by_hand);
    assert_eq!(curve.caught, [9; 10]);
    for (i, &cut) in super::replay::cut_curve::CUTS.iter().enumerate() {
        let f = run(Some(cut));
        assert_eq!(
            (curve.issued[i], curve.caught[i]),
            (f.issued, f.used + f.late)
        );
    }
}
