//! Benchmark of the discrete-event engine (figures in BENCHMARKS.md, "Timing engine"): the granite
//! geometry (24 MoE layers x 32 experts, top-8, hidden 1024, expert FFN 512: 3 MiB bf16
//! experts), `e2`, LRU at 25%, batch 8, on the RTX 4060 profile with the geometry compute
//! model. The trace is generated in memory with rand_pcg (uniform selections, seed 11):
//! 64 sequences x 256 decode tokens = 2,048 batch steps = 49,152 layer-steps per replay.
//! - `engine_replay`: the engine alone, pricing recorded plans (throughput in layer-steps);
//! - `engine_plans_and_replay`: the retention driver recording the plans, then the replay.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use sim::cache::{Batching, Budget, CacheConfig, Semantics, Split};
use sim::cost::{CostModel, CostOptions, Paging};
use sim::engine::{build, replay, EngineOptions};
use sim::model_profile::{ComputeMode, ComputeModel, ComputeOverrides};
use sim::runner::{build_units, RunConfig, TraceInput, Workload};
use traces::{
    Header, ModelSpec, PhaseSel, Provenance, SequenceData, SequenceInfo, TokenBlock, Trace,
};

fn granite_like(seqs: usize, tokens: usize) -> Trace {
    let mut model = ModelSpec::uniform("granite-like", 24, 32, 8);
    model.hidden_size = Some(1024);
    model.expert_ffn = Some(512);
    let mut rng = Pcg64::seed_from_u64(11);
    let sequences = (0..seqs)
        .map(|_| {
            let mut ids = Vec::with_capacity(tokens * 24 * 8);
            for _ in 0..tokens * 24 {
                ids.extend(sample(&mut rng, 32, 8).iter().map(|e| e as u16));
            }
            SequenceData {
                prefill: TokenBlock::default(),
                decode: TokenBlock { ids, weights: None },
            }
        })
        .collect();
    Trace {
        header: Header {
            model,
            provenance: Provenance {
                synthetic: true,
                ..Default::default()
            },
            sequences: (0..seqs)
                .map(|s| SequenceInfo {
                    name: format!("s{s}"),
                    prefill_tokens: 32,
                    decode_tokens: tokens as u64,
                })
                .collect(),
            has_weights: false,
            passes: None,
        },
        sequences,
    }
}

fn engine(c: &mut Criterion) {
    let trace = granite_like(64, 256);
    let w = Workload::new(
        TraceInput {
            label: "granite-like".into(),
            trace: trace.clone(),
        },
        None,
    )
    .unwrap();
    let (map, _) = build_units(&RunConfig::default(), &w).unwrap(); // e2
    let hw = profile::load("rtx4060-laptop-wddm").unwrap();
    let cost = CostModel::new(&hw, Paging::Vmm, CostOptions::default()).unwrap();
    let compute = ComputeModel::new(
        ComputeMode::Geometry,
        &trace.header.model,
        map.expert_bytes,
        &hw,
        &ComputeOverrides::default(),
    )
    .unwrap();
    let cfg = CacheConfig {
        policy: policies::retention::PolicyKind::Lru,
        budget: Budget::parse("25%").unwrap(),
        split: Split::Global,
        semantics: Semantics::Group,
        dram: None,
        seed: 0,
    };
    let batching = Batching {
        batch: 8,
        ..Batching::default()
    };
    let ks = trace.keyspace();
    let plans = build::plans(&trace, PhaseSel::Decode, &map, batching, None, Some(&cfg)).unwrap();
    let layer_steps = plans.groups.len() as u64;
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(layer_steps));
    g.bench_function("engine_replay", |b| {
        b.iter(|| replay(&plans, &map, &ks, &cost, &compute, EngineOptions::default()).unwrap())
    });
    g.bench_function("engine_plans_and_replay", |b| {
        b.iter(|| {
            let p =
                build::plans(&trace, PhaseSel::Decode, &map, batching, None, Some(&cfg)).unwrap();
            replay(&p, &map, &ks, &cost, &compute, EngineOptions::default()).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
