//! Property tests: random geometries and selections survive write -> read (whole-file and
//! streaming) and CSV export -> import unchanged.

use proptest::prelude::*;
use traces::export::export_csv;
use traces::import_rows::parse_csv;
use traces::{
    Header, LayerSpec, ModelSpec, Provenance, RowImportOptions, SequenceData, SequenceInfo,
    TokenBlock, Trace, TraceReader,
};

/// A random trace: up to 4 layers (some dense), up to 3 sequences of up to 4+4 tokens.
fn arb_trace() -> impl Strategy<Value = Trace> {
    let layer = prop_oneof![
        1 => Just((0u16, 0u16)),
        4 => (1u16..40).prop_flat_map(|e| (Just(e), 1..=e.min(6))),
    ];
    (
        proptest::collection::vec(layer, 1..5),
        proptest::collection::vec((0u64..5, 0u64..5), 1..4),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_filter("needs a MoE layer", |(layers, ..)| {
            layers.iter().any(|l| l.0 > 0)
        })
        .prop_map(|(layers, seqs, has_weights, seed)| {
            let model = ModelSpec {
                name: "prop".into(),
                revision: None,
                layers: layers
                    .iter()
                    .map(|&(experts, top_k)| LayerSpec {
                        experts,
                        top_k,
                        shared_experts: 0,
                    })
                    .collect(),
                hidden_size: None,
                expert_ffn: None,
                expert_matrices: traces::GATED_EXPERT_MATRICES,
                shared_expert_ffn: None,
            };
            // Distinct ids per selection: a seeded rotation of 0..experts.
            let mut x = seed | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut block = |n: u64| {
                let (mut ids, mut w) = (Vec::new(), Vec::new());
                for _ in 0..n {
                    for &(e, k) in &layers {
                        let start = (next() % e.max(1) as u64) as u16;
                        for i in 0..k {
                            ids.push((start + i) % e);
                            w.push((next() % 1000) as f32 / 7.0);
                        }
                    }
                }
                TokenBlock {
                    ids,
                    weights: has_weights.then_some(w),
                }
            };
            let infos: Vec<SequenceInfo> = seqs
                .iter()
                .enumerate()
                .map(|(i, &(p, d))| SequenceInfo {
                    name: format!("s{i}"),
                    prefill_tokens: p,
                    decode_tokens: d,
                })
                .collect();
            let sequences = infos
                .iter()
                .map(|s| SequenceData {
                    prefill: block(s.prefill_tokens),
                    decode: block(s.decode_tokens),
                })
                .collect();
            Trace {
                header: Header {
                    model,
                    provenance: Provenance::default(),
                    sequences: infos,
                    has_weights,
                    passes: None,
                },
                sequences,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn write_then_read_is_identity(t in arb_trace()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.bin");
        traces::write_file(&path, &t).unwrap();
        prop_assert_eq!(traces::read_file(&path).unwrap(), t.clone());
        let bytes = std::fs::read(&path).unwrap();
        prop_assert_eq!(traces::read_bytes(&bytes, "p").unwrap(), t);
    }

    #[test]
    fn csv_export_then_import_keeps_selections(t in arb_trace()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.bin");
        traces::write_file(&path, &t).unwrap();
        let mut csv = Vec::new();
        export_csv(&mut TraceReader::open(&path).unwrap(), traces::PhaseSel::All, &mut csv).unwrap();
        let tokens = t.total_tokens(traces::PhaseSel::All);
        // The rows do not carry the model's layer count, which a model with more dense layers
        // than MoE ones needs (`--num-layers`).
        let opts = RowImportOptions {
            num_layers: Some(t.header.model.layers.len()),
            ..RowImportOptions::default()
        };
        let back = parse_csv(&csv[..], "p.csv", &opts);
        if tokens == 0 {
            prop_assert!(back.is_err(), "no rows is an error");
            return Ok(());
        }
        let back = back.unwrap();
        // Sequences with no tokens have no rows; the others keep their order and content.
        let kept: Vec<usize> = (0..t.sequences.len())
            .filter(|&s| t.header.sequences[s].prefill_tokens + t.header.sequences[s].decode_tokens > 0)
            .collect();
        prop_assert_eq!(back.sequences.len(), kept.len());
        for (b, &s) in kept.iter().enumerate() {
            prop_assert_eq!(&back.header.sequences[b], &t.header.sequences[s]);
            prop_assert_eq!(&back.sequences[b], &t.sequences[s]);
        }
    }
}
