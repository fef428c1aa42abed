//! Retention benchmarks (figures in BENCHMARKS.md, "Retention policies and the cache engine").
//!
//! - `grid`: the whole policy grid on the bundled granite traces: 3 prompts x budgets
//!   10, 25, 50, 75, 90% x every registered policy (`PolicyKind::ALL`) x {global, per-layer},
//!   e1 units, decode phase, group semantics; each prompt's stream, next uses and profile are
//!   built once, the runs of a prompt go through `run_grid` (rayon). The benchmark's name
//!   counts the policies (`grid/granite-3x5x10x2` with 10). Target: under 50 ms wall.
//! - `throughput/{lru,belady}`: one policy on a generated 100 M-access stream (4,096 units,
//!   groups of 8 distinct units drawn with a cubic skew towards low ids, PCG64 seed 42),
//!   budget 25%, one thread. Target: above 50 M accesses/s.
//!
//! Run: `cargo bench -p sim --bench retention`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use policies::retention::PolicyKind;
use policies::{UnitInfo, UnitMap};
use rand::{Rng, SeedableRng};
use sim::cache::{
    run_grid, AccessStream, Batching, Budget, CacheConfig, ProfileStats, Semantics, Split, Workload,
};
use sim::runner::{build_units, RunConfig, TraceInput};
use std::path::Path;
use std::time::Duration;
use traces::PhaseSel;

fn grid(c: &mut Criterion) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/data/granite");
    let prompts: Vec<_> = ["english_prose", "code", "math"]
        .iter()
        .map(|p| {
            let input = TraceInput::load(Some(Path::new(&format!("{dir}/{p}.bin")))).unwrap();
            let w = sim::runner::Workload::new(input, None).unwrap();
            let (map, _) = build_units(
                &RunConfig {
                    policy: "e1".into(),
                    ..RunConfig::default()
                },
                &w,
            )
            .unwrap();
            (w.trace.trace, map)
        })
        .collect();
    let mut cfgs = Vec::new();
    for policy in PolicyKind::ALL {
        for pct in [10u128, 25, 50, 75, 90] {
            for split in [Split::Global, Split::PerLayer] {
                cfgs.push(CacheConfig {
                    policy,
                    budget: Budget::Fraction { num: pct, den: 100 },
                    split,
                    semantics: Semantics::Group,
                    dram: None,
                    seed: 0,
                });
            }
        }
    }
    let name = format!("grid/granite-3x5x{}x2", PolicyKind::ALL.len());
    c.bench_function(&name, |b| {
        b.iter(|| {
            let mut page_ins = 0u64;
            for (trace, map) in &prompts {
                let w = Workload::build(trace, map, PhaseSel::Decode, Batching::default(), None)
                    .unwrap();
                for r in run_grid(&w, map, &cfgs) {
                    page_ins += r.unwrap().cache.page_ins;
                }
            }
            page_ins
        })
    });
}

/// The generated stream of the throughput benchmark.
fn generated(accesses: usize, units: usize) -> (UnitMap, Workload) {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(42);
    let mut s = AccessStream::new(units);
    let mut stamp = vec![0u32; units];
    let mut group = Vec::with_capacity(8);
    let mut g = 0u32;
    s.units.reserve(accesses);
    while s.units.len() < accesses {
        g += 1;
        group.clear();
        while group.len() < 8 {
            let x: f64 = rng.gen();
            let u = ((x * x * x) * units as f64) as u32;
            if stamp[u as usize] != g {
                stamp[u as usize] = g;
                group.push(u);
            }
        }
        s.push_group(0, &group);
        s.end_batch(1);
    }
    let map = UnitMap {
        spec: "e1".into(),
        paging: policies::Paging::Vmm,
        expert_bytes: 1 << 20,
        granule_bytes: 2 << 20,
        key_first: (0..units as u32).collect(),
        key_count: vec![1; units],
        units: vec![
            UnitInfo {
                useful_bytes: 1 << 20,
                committed_bytes: 2 << 20,
                experts: 1,
                first_moe_layer: 0,
                last_moe_layer: 0,
            };
            units
        ],
    };
    let w = Workload {
        next_use: s.next_use(),
        profile: ProfileStats::from_stream(&s),
        stream: s,
        schedule: None,
    };
    (map, w)
}

fn throughput(c: &mut Criterion) {
    const ACCESSES: usize = 100_000_000;
    let (map, w) = generated(ACCESSES, 4096);
    let mut group = c.benchmark_group("throughput");
    group.throughput(Throughput::Elements(w.stream.units.len() as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    for policy in [PolicyKind::Lru, PolicyKind::Belady] {
        let cfg = CacheConfig {
            policy,
            budget: Budget::Fraction { num: 25, den: 100 },
            split: Split::Global,
            semantics: Semantics::Group,
            dram: None,
            seed: 0,
        };
        group.bench_function(policy.name(), |b| {
            b.iter(|| w.run(&map, &cfg).unwrap().cache.page_ins)
        });
    }
    group.finish();
}

criterion_group!(benches, grid, throughput);
criterion_main!(benches);
