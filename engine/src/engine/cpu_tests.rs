//! The CPU lane on hand-computed cases: one per placement, on the round-number test
//! profile (commit 10 µs per 2 MiB granule, H2D 1 GB/s = 1000 B/µs, no H2D latency) and a
//! hand-made host profile (bf16 experts at `bw` B/µs plus 30 µs per call; bf16 is priced on
//! the expert's own bytes, int4 on its kernel layout's 68/66 of them, `host_cost`).

use super::cpu::{gpu_unit_map, CpuExperts, CpuLane};
use super::*;
use crate::cost::{CostModel, CostOptions, Paging};
use crate::host_cost::HostCostModel;
use crate::model_profile::ComputeModel;
use policies::{UnitInfo, UnitMap};
use profile::{Constant, ConstantName as C, Device, Profile};
use traces::model::DType;
use traces::{KeySpace, ModelSpec};

const MIB: u64 = 1 << 20;
/// 2 MiB at 1000 B/µs.
const COPY_2MIB: f64 = 2097.152;
/// One token's activation (hidden 1024, bf16: 2048 B) one way at 1000 B/µs.
const ACT_1: f64 = 2.048;

/// The round-number GPU profile (also the timed tiers' tests').
pub(super) fn gpu_profile() -> Profile {
    let mut p = Profile::new("test", "hand-made", Device::default());
    let a = |v: f64, u: &str| Constant::assumed(v, u, "test value");
    p.set(C::VmmCommit, a(10.0, "us"))
        .set(C::VmmDecommit, a(5.0, "us"))
        .set(C::H2dBandwidth, a(1.0, "GB/s"))
        .set(C::VramUsable, a(100.0, "MiB"))
        .set(C::FirstTouchBelow90, a(100.0, "us"));
    p
}

/// A lane of `mode` over `layers` MoE layers of top-1, 2 MiB bf16 experts at `bw` B/µs.
fn cost(mode: CpuExperts, layers: usize, bw: f64) -> CostModel {
    let mut host = Profile::new("host", "hand-made", Device::default());
    let a = |v: f64, u: &str| Constant::assumed(v, u, "test value");
    host.set(C::HostExpertBf16Bandwidth, a(bw, "MB/s"))
        .set(C::HostExpertBf16CallOverhead, a(30.0, "us"));
    let mut c = CostModel::new(&gpu_profile(), Paging::Vmm, CostOptions::default()).unwrap();
    c.cpu = Some(CpuLane {
        mode,
        host: HostCostModel::new(&host),
        dtype: DType::Bf16,
        expert_bytes: 2 * MIB,
        activation_bytes_per_token: 2048,
        top_k: vec![1; layers],
        cpu_layers: mode.cpu_layers(layers),
    });
    c
}

/// `layers x per_layer` one-expert units of 2 MiB (one granule each).
pub(super) fn unit_map(layers: usize, per_layer: usize) -> UnitMap {
    let n = layers * per_layer;
    let units = (0..n)
        .map(|k| UnitInfo {
            useful_bytes: 2 * MIB,
            committed_bytes: 2 * MIB,
            experts: 1,
            first_moe_layer: (k / per_layer) as u32,
            last_moe_layer: (k / per_layer) as u32,
        })
        .collect();
    UnitMap::one_unit_per_key(
        "e1".into(),
        Paging::Vmm,
        2 * MIB,
        2 * MIB,
        (0..n as u32).collect(),
        units,
    )
}

pub(super) fn ks(layers: usize, experts: u16) -> KeySpace {
    KeySpace::new(&ModelSpec::uniform("t", layers, experts, 1))
}

/// Non-expert compute 50 µs per group, 20 µs per expert.
pub(super) fn compute() -> ComputeModel {
    ComputeModel {
        nonexpert_us: 50.0,
        expert_us: 20.0,
        ..ComputeModel::zero()
    }
}

pub(super) fn try_run(
    plans: &Plans,
    map: &UnitMap,
    ks: &KeySpace,
    cost: &CostModel,
) -> Result<Replay, EngineError> {
    replay(plans, map, ks, cost, &compute(), EngineOptions::default())
}

fn run(plans: &Plans, map: &UnitMap, ks: &KeySpace, cost: &CostModel) -> Replay {
    try_run(plans, map, ks, cost).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b.abs().max(1.0)
}

#[test]
fn placements_parse_and_print() {
    for s in ["none", "all", "layers:8", "misses", "cheaper"] {
        assert_eq!(CpuExperts::parse(s).unwrap().to_string(), s);
    }
    for bad in ["layers:0", "layers:", "layers:x", "gpu", ""] {
        let e = CpuExperts::parse(bad).unwrap_err();
        assert!(e.contains("layers:N"), "{bad}: {e}");
    }
    assert_eq!(CpuExperts::Layers(9).cpu_layers(4), 4);
    assert_eq!(CpuExperts::All.cpu_layers(4), 4);
    assert_eq!(CpuExperts::Misses.cpu_layers(4), 0);
}

#[test]
fn the_cpu_layers_units_leave_the_gpu_map() {
    let map = unit_map(3, 2);
    let g = gpu_unit_map(&map, &ks(3, 2), 1);
    // keys 0, 1 (layer 0) hold no unit; keys 2..6 hold units 0..4, renumbered in order
    assert_eq!(g.num_units(), 4);
    assert_eq!(g.key_count, vec![0, 0, 1, 1, 1, 1]);
    assert_eq!(g.units_of(2), 0..1);
    assert_eq!(g.units_of(5), 3..4);
    assert_eq!(g.units[0].first_moe_layer, 1);
    assert!(g.units_of(0).is_empty());
    assert_eq!(gpu_unit_map(&map, &ks(3, 2), 3).num_units(), 0);
}

#[test]
fn layers_n_runs_the_first_layer_on_the_cpu_beside_the_gpu() {
    // 2 layers x 2 experts; layer 0 on the CPU; one step selecting key 0, then key 2
    let k = ks(2, 2);
    let map = gpu_unit_map(&unit_map(2, 2), &k, 1);
    let mut plans = Plans::new(2);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0], &[], &[], &[]);
    plans.push_group(1, &[2], &[0], &[0], &[]);
    let r = run(&plans, &map, &k, &cost(CpuExperts::Layers(1), 2, 1000.0));
    // layer 0: non-expert 0..50; CPU 50 + 2 x 2.048 + (30 + 2097.152) = 2181.248
    let cpu0 = 50.0 + 2.0 * ACT_1 + 30.0 + COPY_2MIB;
    // layer 1: non-expert to cpu0 + 50, commit 10, copy, expert 20
    let want = cpu0 + 50.0 + 10.0 + COPY_2MIB + 20.0;
    assert!(close(r.step_us[0], want), "{} vs {want}", r.step_us[0]);
    assert_eq!(r.cpu.experts, 1);
    assert!(close(r.cpu.wait_us, cpu0 - 50.0));
    assert!(close(r.cpu.calls_us, 30.0 + COPY_2MIB));
    assert!(close(r.cpu.activation_us, 2.0 * ACT_1));
}

#[test]
fn all_computes_every_expert_on_the_cpu() {
    let k = ks(1, 4);
    let map = gpu_unit_map(&unit_map(1, 4), &k, 1);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0, 1], &[], &[], &[]);
    let r = run(&plans, &map, &k, &cost(CpuExperts::All, 1, 1000.0));
    // two one-token calls; the group's 2 slots / top-1 = 2 tokens of activations each way
    let want = 50.0 + 2.0 * 2.0 * ACT_1 + 2.0 * (30.0 + COPY_2MIB);
    assert!(close(r.step_us[0], want), "{} vs {want}", r.step_us[0]);
    assert_eq!((r.cpu.experts, r.timing.map_calls), (2, 0));
}

#[test]
fn misses_with_a_fixed_gpu_set_run_the_streamed_unit_on_the_cpu() {
    // unit 0 pinned; unit 1 streamed (paged in and evicted by the group, as static-pin does)
    let k = ks(1, 4);
    let map = unit_map(1, 4);
    let mut plans = Plans::new(1);
    plans.preloaded = vec![0];
    plans.begin_step(1, 1);
    plans.push_group(0, &[0, 1], &[0, 1], &[1], &[1]);
    let r = run(&plans, &map, &k, &cost(CpuExperts::Misses, 1, 1000.0));
    // GPU: key 0 at 50..70; CPU: 2 tokens of activations each way + one call
    let want = 50.0 + 2.0 * 2.0 * ACT_1 + 30.0 + COPY_2MIB;
    assert!(close(r.step_us[0], want), "{} vs {want}", r.step_us[0]);
    assert_eq!((r.cpu.experts, r.cpu.background_page_ins), (1, 0));
    assert_eq!((r.timing.map_calls, r.detail.bytes_in), (0, 0));
}

#[test]
fn misses_with_a_dynamic_policy_page_in_off_the_critical_path() {
    let k = ks(1, 4);
    let map = unit_map(1, 4);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[1], &[1], &[1], &[]);
    plans.begin_step(1, 2);
    plans.push_group(0, &[1], &[1], &[], &[]);
    let r = run(&plans, &map, &k, &cost(CpuExperts::Misses, 1, 1000.0));
    // step 0: the copy (ready at 50 + 10 + 2097.152) runs beside the CPU call, which ends later
    let step0 = 50.0 + 2.0 * ACT_1 + 30.0 + COPY_2MIB;
    assert!(close(r.step_us[0], step0), "{}", r.step_us[0]);
    // step 1: the unit is resident and ready by its router: on the GPU
    assert!(close(r.step_us[1], 70.0), "{}", r.step_us[1]);
    assert_eq!((r.cpu.experts, r.cpu.background_page_ins), (1, 1));
}

#[test]
fn cheaper_pages_in_when_the_cpu_is_slower() {
    let k = ks(1, 4);
    let map = unit_map(1, 4);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[1], &[1], &[1], &[]);
    // CPU at 100 B/µs: 50 + 4.096 + 30 + 20971.52 against the page-in 50 + 10 + copy + 20
    let r = run(&plans, &map, &k, &cost(CpuExperts::Cheaper, 1, 100.0));
    assert!(close(r.step_us[0], 50.0 + 10.0 + COPY_2MIB + 20.0));
    assert_eq!((r.cpu.experts, r.cpu.cheaper_paged), (0, 1));
}

#[test]
fn cheaper_runs_the_miss_on_the_cpu_when_faster_and_misses_it_again() {
    let k = ks(1, 4);
    let map = unit_map(1, 4);
    let mut plans = Plans::new(1);
    plans.begin_step(1, 1);
    plans.push_group(0, &[1], &[1], &[1], &[]);
    plans.begin_step(1, 2);
    plans.push_group(0, &[1], &[1], &[], &[]);
    // CPU at 10000 B/µs: 2 x 2.048 + 30 + 209.7152 = 243.8112 µs after the router, against
    // 10 + 2097.152 + 20 on the GPU; the unit is not copied, so step 1 misses it again
    let r = run(&plans, &map, &k, &cost(CpuExperts::Cheaper, 1, 10_000.0));
    let step = 50.0 + 2.0 * ACT_1 + 30.0 + 2.0 * MIB as f64 / 10_000.0;
    assert!(close(r.step_us[0], step), "{}", r.step_us[0]);
    assert!(close(r.step_us[1], step), "{}", r.step_us[1]);
    assert_eq!((r.cpu.experts, r.cpu.cheaper_paged), (2, 0));
    assert_eq!(r.timing.map_calls, 0);
}
