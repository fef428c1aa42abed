//! Benchmarks of the streaming regime (figures in BENCHMARKS.md, "Streaming regime"):
//! - `sweep_granite_all`: the 9 x 3 granularity sweep (E in {1,2,3,4,6,8,11,16,32} x
//!   {index, hot, coact}) on the bundled `all.bin`, trace load and profile included;
//! - `streaming_pass`: one streaming pass (`e2:hot`, `e1`, `os2m`) over a synthetic trace
//!   with DeepSeek-V3's routed geometry (58 MoE layers x 256 experts, top-8), generated in
//!   memory with rand_pcg (uniform selections, seed 7). Throughput is in selections.
//!   `STREAMING_BENCH_TOKENS` sets the tokens (default 1,000,000: 464 M selections, 928 MB).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use policies::mechanisms::{self, BuildContext, Sizes};
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use sim::runner::{sweep, RunConfig, TraceInput, Workload};
use sim::streaming::streaming_metrics;
use std::path::Path;
use traces::{
    Header, ModelSpec, PhaseSel, Provenance, SequenceData, SequenceInfo, TokenBlock, Trace,
};

fn sweep_granite_all(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/data/granite/all.bin");
    let configs: Vec<RunConfig> = [1, 2, 3, 4, 6, 8, 11, 16, 32]
        .iter()
        .flat_map(|n| ["index", "hot", "coact"].map(|o| format!("e{n}:{o}")))
        .map(|policy| RunConfig {
            policy,
            ..RunConfig::default()
        })
        .collect();
    c.bench_function("sweep_granite_all_27", |b| {
        b.iter(|| {
            let w = Workload::new(TraceInput::load(Some(&path)).unwrap(), None).unwrap();
            let r = sweep(&configs, &w);
            assert!(r.iter().all(|x| x.is_ok()));
            r
        })
    });
}

/// DeepSeek-V3 routed geometry: 58 MoE layers (after 3 dense ones) of 256 experts, top-8,
/// hidden 7168, expert FFN 2048 (the model's public config.json).
fn deepseek_trace(tokens: usize) -> Trace {
    let mut model = ModelSpec::uniform("deepseek-v3-synthetic", 58, 256, 8);
    model.hidden_size = Some(7168);
    model.expert_ffn = Some(2048);
    let mut rng = Pcg64::seed_from_u64(7);
    let mut ids = Vec::with_capacity(tokens * 58 * 8);
    for _ in 0..tokens * 58 {
        ids.extend(sample(&mut rng, 256, 8).into_iter().map(|i| i as u16));
    }
    Trace {
        header: Header {
            model,
            provenance: Provenance {
                synthetic: true,
                ..Provenance::default()
            },
            sequences: vec![SequenceInfo {
                name: "s".into(),
                prefill_tokens: 0,
                decode_tokens: tokens as u64,
            }],
            has_weights: false,
            passes: None,
        },
        sequences: vec![SequenceData {
            prefill: TokenBlock::default(),
            decode: TokenBlock { ids, weights: None },
        }],
    }
}

fn streaming_pass(c: &mut Criterion) {
    let tokens: usize = std::env::var("STREAMING_BENCH_TOKENS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let t = deepseek_trace(tokens);
    let ks = t.keyspace();
    let sizes = Sizes::resolve(&t.header.model, &Default::default()).unwrap();
    let profile = mechanisms::ProfileStats::new(&t, PhaseSel::Decode, false);
    let mut g = c.benchmark_group("streaming_pass_deepseek_v3");
    g.sample_size(10);
    g.throughput(Throughput::Elements((tokens * ks.ids_per_token()) as u64));
    for spec in ["e1", "e2:hot", "os2m"] {
        let mech = mechanisms::parse(spec).unwrap();
        let map = mech
            .build(&BuildContext {
                keyspace: &ks,
                sizes,
                profile: Some(&profile),
            })
            .unwrap();
        g.bench_function(spec, |b| {
            b.iter(|| streaming_metrics(&t, PhaseSel::Decode, &map).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, sweep_granite_all, streaming_pass);
criterion_main!(benches);
