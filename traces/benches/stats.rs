//! Trace statistics benchmark: the streaming reader alone and `trace stats` (reader + accumulator) on a
//! generated DeepSeek-V3-geometry trace (58 MoE layers x top-8 = 464 selections per token).
//! Throughput is reported in selections per second. Figures go to BENCHMARKS.md, "Trace reader and statistics".

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use traces::gen::{write_trace, GenParams};
use traces::presets::preset;
use traces::stats::StatsAccumulator;
use traces::{PhaseSel, TraceReader};

/// 20,000 tokens = 9.28 M selections, an 18.6 MB file: large enough to stream many 4 MiB
/// blocks, small enough to generate in a second.
const TOKENS: u64 = 20_000;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.bin");
    let model = preset("deepseek-v3").unwrap().model_spec();
    let params = GenParams {
        preset: Some("deepseek-v3".into()),
        skew: vec![1.0],
        locality: vec![0.3],
        cross_layer: 0.2,
        sequences: 4,
        tokens: TOKENS / 4,
        seed: 1,
        fitted_to: None,
        always_on: Vec::new(),
        archetypes: None,
    };
    write_trace(&path, &model, &params).unwrap();
    let selections = TOKENS * 464;

    let mut g = c.benchmark_group("trace_deepseek_v3_20k_tokens");
    g.throughput(Throughput::Elements(selections));
    g.sample_size(10);
    g.bench_function("reader_only", |b| {
        b.iter(|| {
            let mut r = TraceReader::open(&path).unwrap();
            let mut sum = 0u64;
            while let Some(t) = r.next_token().unwrap() {
                sum += t.ids[0] as u64;
            }
            sum
        })
    });
    g.bench_function("reader_plus_stats", |b| {
        b.iter(|| {
            let mut r = TraceReader::open(&path).unwrap();
            let mut acc = StatsAccumulator::new(r.header(), PhaseSel::Decode);
            while let Some(t) = r.next_token().unwrap() {
                acc.push_token(t.pos.sequence, t.pos.phase, t.ids).unwrap();
            }
            acc.finish().unwrap()
        })
    });
    let trace = traces::read_file(&path).unwrap();
    g.bench_function("stats_in_memory", |b| {
        b.iter(|| traces::stats::trace_stats(&trace, PhaseSel::Decode).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
