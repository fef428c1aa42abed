//! Streaming-reader and writer throughput on a DeepSeek-V3-geometry trace (3 dense layers,
//! 58 MoE layers of 256 experts, top-8: 464 selections per token). Figures go to
//! BENCHMARKS.md, section "Trace reader and statistics".
//!
//! `cargo bench -p traces --bench reader`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::SeedableRng;
use traces::{Header, LayerSpec, ModelSpec, Provenance, SequenceInfo, TraceReader, TraceWriter};

/// Tokens of the benchmark trace: 50,000 x 464 = 23.2 M selections, 46.4 MB of payload.
const TOKENS: u64 = 50_000;

fn deepseek_header() -> Header {
    let mut layers = vec![
        LayerSpec {
            experts: 0,
            top_k: 0,
            shared_experts: 0
        };
        3
    ];
    layers.extend(vec![
        LayerSpec {
            experts: 256,
            top_k: 8,
            shared_experts: 1
        };
        58
    ]);
    Header {
        model: ModelSpec {
            name: "DeepSeek-V3 geometry".into(),
            revision: None,
            layers,
            hidden_size: Some(7168),
            expert_ffn: Some(2048),
            expert_matrices: traces::GATED_EXPERT_MATRICES,
            shared_expert_ffn: None,
        },
        provenance: Provenance {
            synthetic: true,
            ..Default::default()
        },
        sequences: vec![SequenceInfo {
            name: "bench".into(),
            prefill_tokens: 0,
            decode_tokens: TOKENS,
        }],
        has_weights: false,
        passes: None,
    }
}

/// Uniformly random distinct top-8 of 256 per layer (seeded).
fn records(n: usize) -> Vec<Vec<u16>> {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
    (0..n)
        .map(|_| {
            (0..58)
                .flat_map(|_| {
                    rand::seq::index::sample(&mut rng, 256, 8)
                        .into_iter()
                        .map(|e| e as u16)
                })
                .collect()
        })
        .collect()
}

fn write_trace(path: &std::path::Path, recs: &[Vec<u16>]) {
    let mut w = TraceWriter::create(path, &deepseek_header()).unwrap();
    for t in 0..TOKENS as usize {
        w.write_token(&recs[t % recs.len()], None).unwrap();
    }
    w.finish().unwrap();
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deepseek.bin");
    let recs = records(4096);
    let selections = TOKENS * 464;
    let mut g = c.benchmark_group("trace_io");
    g.sample_size(10);
    g.throughput(Throughput::Elements(selections));
    g.bench_function("write_50k_tokens_deepseek", |b| {
        b.iter(|| write_trace(&path, &recs))
    });
    write_trace(&path, &recs);
    g.bench_function("stream_read_50k_tokens_deepseek", |b| {
        b.iter(|| {
            let mut r = TraceReader::open(&path).unwrap();
            let mut sum = 0u64;
            while let Some(t) = r.next_token().unwrap() {
                sum += t.ids[0] as u64;
            }
            sum
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
