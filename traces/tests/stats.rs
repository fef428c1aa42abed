//! Trace statistics: hand-computed values on tiny traces, and agreement with a naive second
//! implementation (hash maps and sets, one metric at a time) on random traces.

use std::collections::{BTreeMap, BTreeSet};
use traces::stats::{entropy_bits, gini, trace_stats, StatsAccumulator, StatsError};
use traces::{
    Header, LayerSpec, ModelSpec, Phase, PhaseSel, Provenance, SequenceData, SequenceInfo,
    TokenBlock, Trace,
};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

/// Token records of one sequence: (prefill, decode), one `Vec<u16>` record per token.
type Records = (Vec<Vec<u16>>, Vec<Vec<u16>>);

/// A trace of `model` whose sequences hold these token records.
fn trace_of(model: ModelSpec, seqs: Vec<Records>) -> Trace {
    let header = Header {
        model,
        provenance: Provenance::default(),
        sequences: seqs
            .iter()
            .enumerate()
            .map(|(i, (p, d))| SequenceInfo {
                name: format!("s{i}"),
                prefill_tokens: p.len() as u64,
                decode_tokens: d.len() as u64,
            })
            .collect(),
        has_weights: false,
        passes: None,
    };
    let sequences = seqs
        .into_iter()
        .map(|(p, d)| SequenceData {
            prefill: TokenBlock {
                ids: p.concat(),
                weights: None,
            },
            decode: TokenBlock {
                ids: d.concat(),
                weights: None,
            },
        })
        .collect();
    let t = Trace { header, sequences };
    t.check().unwrap();
    t
}

/// Layer 0 dense, layers 1 and 2 MoE with 4 experts, top-2.
fn small_model() -> ModelSpec {
    let moe = LayerSpec {
        experts: 4,
        top_k: 2,
        shared_experts: 0,
    };
    ModelSpec {
        name: "tiny".into(),
        revision: None,
        layers: vec![
            LayerSpec {
                experts: 0,
                top_k: 0,
                shared_experts: 0,
            },
            moe.clone(),
            moe,
        ],
        hidden_size: None,
        expert_ffn: None,
        expert_matrices: traces::GATED_EXPERT_MATRICES,
        shared_expert_ffn: None,
    }
}

/// The hand-worked example: records are [layer 1 pair, layer 2 pair].
fn small_trace() -> Trace {
    let a = vec![vec![0, 1, 2, 3], vec![0, 2, 2, 0], vec![0, 1, 3, 2]];
    let b = vec![vec![0, 3, 2, 1], vec![3, 0, 1, 2]];
    // A one-token prompt on sequence 0, to check phase selection.
    trace_of(
        small_model(),
        vec![(vec![vec![1, 2, 0, 1]], a), (vec![], b)],
    )
}

#[test]
fn gini_and_entropy_of_known_vectors() {
    assert!(close(gini(&[5, 5, 5, 5]), 0.0));
    // [0,0,0,1]: 2*4/(4*1) - 5/4
    assert!(close(gini(&[1, 0, 0, 0]), 0.75));
    // [1,2,3,4]: 2*(1+4+9+16)/(4*10) - 5/4
    assert!(close(gini(&[4, 3, 2, 1]), 0.25));
    assert!(close(gini(&[0, 0]), 0.0));
    assert!(close(entropy_bits(&[3, 3, 3, 3]), 2.0));
    assert!(close(entropy_bits(&[7; 32]), 5.0));
    assert!(close(entropy_bits(&[2, 1, 1, 0]), 1.5));
    assert!(close(entropy_bits(&[9, 0, 0]), 0.0));
}

#[test]
fn hand_computed_small_trace() {
    let st = trace_stats(&small_trace(), PhaseSel::Decode).unwrap();
    assert_eq!(st.num_layers, 2);
    assert_eq!(st.model_layers, 3);
    assert_eq!(st.num_experts, Some(4));
    assert_eq!(st.top_k, Some(2));
    assert_eq!(st.tokens, 5);
    assert_eq!(st.accesses, 20);
    assert_eq!(st.num_keys, 8);
    assert_eq!(st.distinct_keys, 8);
    // Model layer indices: the dense layer 0 is counted.
    assert_eq!(st.sequences[0].always_on_keys, vec![[1, 0], [2, 2]]);
    assert_eq!(
        st.sequences[1].always_on_keys,
        vec![[1, 0], [1, 3], [2, 1], [2, 2]]
    );
    assert_eq!(st.always_on_keys, vec![[1, 0], [2, 2]]);
    assert_eq!(st.sequences[0].distinct_keys, 6);
    assert_eq!(st.sequences[1].distinct_keys, 4);
    assert_eq!(st.sequences[0].tokens, 3);

    // Both layers have counts {5,2,2,1}.
    for (l, layer) in st.layers.iter().zip([1, 2]) {
        assert_eq!(l.layer, layer);
        assert_eq!(l.accesses, 10);
        assert!(close(l.top_k_share, 0.7));
        assert!(close(l.gini, 2.0 * 31.0 / 40.0 - 1.25));
        let h = -(0.5f64 * 0.5f64.log2() + 2.0 * 0.2 * 0.2f64.log2() + 0.1 * 0.1f64.log2());
        assert!(close(l.entropy_bits, h));
        assert!(close(l.hottest_token_fraction, 1.0));
        // 4 reused ids of 6 in tokens with a predecessor; nothing leaks across sequences.
        assert!(close(l.temporal_reuse.unwrap(), 4.0 / 6.0));
    }
    // Successor rows of layer 1 -> 2: [1,2,5,2], [0,0,2,2], [1,0,1,0], [0,2,2,0]; top-2 sums
    // 7 + 4 + 2 + 4 = 17 of 5 tokens x 2 x 2 pairs.
    assert!(close(
        st.layers[0].next_layer_predictability.unwrap(),
        17.0 / 20.0
    ));
    assert!(close(st.layers[0].next_layer_chance.unwrap(), 0.5));
    assert_eq!(st.layers[1].next_layer_predictability, None);
    assert!(close(st.next_layer_predictability.unwrap(), 0.85));
    assert!(close(st.temporal_reuse.unwrap(), 8.0 / 12.0));

    // All key counts descending: 5 5 2 2 2 2 1 1 (total 20), n = 8 keys.
    let want = [
        (0.1, 1, 0.25),
        (0.125, 1, 0.25),
        (0.25, 2, 0.5),
        (0.5, 4, 0.7),
        (0.75, 6, 0.9),
        (0.9, 7, 0.95),
        (1.0, 8, 1.0),
    ];
    assert_eq!(st.concentration.len(), want.len());
    for (c, (p, keys, share)) in st.concentration.iter().zip(want) {
        assert!(close(c.p, p));
        assert_eq!(c.keys, keys);
        assert!(close(c.share, share), "p {p}: {} vs {share}", c.share);
    }
    // ascending 1 1 2 2 2 2 5 5: 2*114/(8*20) - 9/8
    assert!(close(st.global_gini, 0.3));
}

#[test]
fn phase_selection() {
    let t = small_trace();
    let pre = trace_stats(&t, PhaseSel::Prefill).unwrap();
    assert_eq!(pre.tokens, 1);
    assert_eq!(pre.accesses, 4);
    assert_eq!(pre.distinct_keys, 4);
    // Sequence 1 has no prompt token: it has no always-on keys and does not empty the
    // intersection.
    assert_eq!(pre.sequences[1].tokens, 0);
    assert!(pre.sequences[1].always_on_keys.is_empty());
    assert_eq!(pre.always_on_keys, vec![[1, 1], [1, 2], [2, 0], [2, 1]]);
    assert_eq!(pre.temporal_reuse, None);

    let all = trace_stats(&t, PhaseSel::All).unwrap();
    assert_eq!(all.tokens, 6);
    // The prompt token [1,2 | 0,1] precedes decode token 0 [0,1 | 2,3]: layer 1 reuses id 1,
    // layer 2 reuses nothing; that adds 1 hit and 2 slots to layer 1's 4 of 6.
    assert!(close(all.layers[0].temporal_reuse.unwrap(), 5.0 / 8.0));
    assert!(close(all.layers[1].temporal_reuse.unwrap(), 4.0 / 8.0));
    // Layer 1 expert 0 is no longer always-on in sequence 0 (absent from the prompt).
    assert_eq!(all.sequences[0].always_on_keys, Vec::<[u32; 2]>::new());
}

#[test]
fn concentration_rounds_ties_to_even_over_all_keys() {
    // 20 keys, only 2 ever selected: n counts all keys of the model, not the touched ones.
    let t = trace_of(
        ModelSpec::uniform("one", 1, 20, 2),
        vec![(vec![], vec![vec![3, 7], vec![7, 3]])],
    );
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    assert_eq!(st.distinct_keys, 2);
    // 0.125 * 20 = 2.5 -> 2 (ties to even), 0.1 * 20 = 2.
    assert_eq!(st.concentration[0].keys, 2);
    assert_eq!(st.concentration[1].keys, 2);
    assert!(close(st.concentration[1].share, 1.0));
    // 0.25 * 20 = 5
    assert_eq!(st.concentration[2].keys, 5);
    // Two keys of twenty take everything: ascending 0 x 18, 2, 2.
    let g = 2.0 * (19.0 * 2.0 + 20.0 * 2.0) / (20.0 * 4.0) - 21.0 / 20.0;
    assert!(close(st.global_gini, g));
    assert!(close(st.layers[0].hottest_token_fraction, 1.0));
    assert!(close(st.layers[0].temporal_reuse.unwrap(), 1.0));
}

#[test]
fn non_uniform_model_reports_null_top_level_geometry() {
    let mut model = ModelSpec::uniform("mixed", 2, 4, 2);
    model.layers[1] = LayerSpec {
        experts: 6,
        top_k: 3,
        shared_experts: 1,
    };
    let t = trace_of(model, vec![(vec![], vec![vec![0, 1, 5, 4, 3]])]);
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    assert_eq!(st.num_experts, None);
    assert_eq!(st.top_k, None);
    assert_eq!(st.layers[1].num_experts, 6);
    assert_eq!(st.layers[1].top_k, 3);
    let text = st.to_text();
    assert!(
        text.contains("2 MoE of 2 (experts vary by layer, top-k varies by layer)"),
        "{text}"
    );
    assert_eq!(st.accesses, 5);
    assert_eq!(st.num_keys, 10);
    // One token: every selected key is always-on; predictability is 1 (each row's top-3 is
    // exactly the 3 successors seen).
    assert_eq!(
        st.always_on_keys,
        vec![[0, 0], [0, 1], [1, 3], [1, 4], [1, 5]]
    );
    assert!(close(st.next_layer_predictability.unwrap(), 1.0));
    assert!(close(st.layers[0].next_layer_chance.unwrap(), 0.5));
    let json = serde_json::to_value(&st).unwrap();
    assert!(json["num_experts"].is_null());
}

#[test]
fn errors_are_reported_not_panics() {
    let t = small_trace();
    let mut acc = StatsAccumulator::new(&t.header, PhaseSel::Decode);
    assert_eq!(
        acc.push_token(0, Phase::Decode, &[0, 1, 2]),
        Err(StatsError::RecordLength {
            sequence: 0,
            got: 3,
            expected: 4
        })
    );
    let mut acc = StatsAccumulator::new(&t.header, PhaseSel::Decode);
    acc.push_token(1, Phase::Decode, &[0, 1, 2, 3]).unwrap();
    assert!(matches!(
        acc.push_token(0, Phase::Decode, &[0, 1, 2, 3]),
        Err(StatsError::OutOfOrder { .. })
    ));
    let mut acc = StatsAccumulator::new(&t.header, PhaseSel::Decode);
    acc.push_token(0, Phase::Decode, &[0, 9, 2, 3]).unwrap();
    assert!(matches!(
        acc.finish(),
        Err(StatsError::ExpertOutOfRange {
            layer: 1,
            expert: 9,
            ..
        })
    ));
    let acc = StatsAccumulator::new(&t.header, PhaseSel::Decode);
    assert_eq!(acc.finish(), Err(StatsError::NoTokens { phase: "decode" }));
}

/// A deterministic pseudo-random trace (a tiny LCG keeps the test free of the generator
/// under test): `layers` MoE layers of `experts` experts, top-`k`, skewed towards low ids.
fn random_trace(seqs: &[usize], layers: usize, experts: u16, k: u16, seed: u64) -> Trace {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as u32
    };
    let data = seqs
        .iter()
        .map(|&n| {
            let toks = (0..n)
                .map(|_| {
                    let mut rec = Vec::new();
                    for _ in 0..layers {
                        let mut sel: Vec<u16> = Vec::new();
                        while sel.len() < k as usize {
                            // min of two uniforms: skewed to low ids
                            let e = (next() % experts as u32).min(next() % experts as u32) as u16;
                            if !sel.contains(&e) {
                                sel.push(e);
                            }
                        }
                        rec.extend(sel);
                    }
                    rec
                })
                .collect();
            (vec![], toks)
        })
        .collect();
    trace_of(ModelSpec::uniform("random", layers, experts, k), data)
}

/// The naive reference: each metric straight from its definition, with maps and sets.
struct Naive {
    counts: Vec<BTreeMap<u16, u64>>,
    reuse: Vec<(u64, u64)>,
    always_on: Vec<BTreeSet<[u32; 2]>>,
    pred: Vec<f64>,
}

fn naive(t: &Trace) -> Naive {
    let ks = t.keyspace();
    let m = ks.num_moe_layers();
    let mut counts = vec![BTreeMap::new(); m];
    let mut reuse = vec![(0u64, 0u64); m];
    let mut always_on = Vec::new();
    let mut succ: Vec<BTreeMap<(u16, u16), u64>> = vec![BTreeMap::new(); m];
    for s in 0..t.sequences.len() {
        let n = t.tokens(s, Phase::Decode);
        let mut on: Option<BTreeSet<[u32; 2]>> = None;
        for tok in 0..n {
            let mut here = BTreeSet::new();
            for l in 0..m {
                let sel = t.selection(&ks, s, Phase::Decode, tok, l);
                for &e in sel {
                    *counts[l].entry(e).or_insert(0) += 1;
                    here.insert([l as u32, e as u32]);
                }
                if tok > 0 {
                    let prev = t.selection(&ks, s, Phase::Decode, tok - 1, l);
                    reuse[l].0 += sel.iter().filter(|e| prev.contains(e)).count() as u64;
                    reuse[l].1 += sel.len() as u64;
                }
                if l + 1 < m {
                    let nx = t.selection(&ks, s, Phase::Decode, tok, l + 1);
                    for &a in sel {
                        for &b in nx {
                            *succ[l].entry((a, b)).or_insert(0) += 1;
                        }
                    }
                }
            }
            on = Some(match on {
                None => here,
                Some(o) => o.intersection(&here).copied().collect(),
            });
        }
        always_on.push(on.unwrap_or_default());
    }
    let pred = (0..m.saturating_sub(1))
        .map(|l| {
            let mut hits = 0;
            let mut total = 0;
            for e in 0..ks.experts[l] {
                let mut row: Vec<u64> = (0..ks.experts[l + 1])
                    .map(|f| succ[l].get(&(e, f)).copied().unwrap_or(0))
                    .collect();
                total += row.iter().sum::<u64>();
                row.sort_unstable_by(|a, b| b.cmp(a));
                hits += row.iter().take(ks.top_k[l + 1] as usize).sum::<u64>();
            }
            hits as f64 / total as f64
        })
        .collect();
    Naive {
        counts,
        reuse,
        always_on,
        pred,
    }
}

#[test]
fn agrees_with_naive_implementation_on_random_traces() {
    let runs = [
        (1u64, 1usize, false),
        (2, 7, false),
        (3, 1000, true),
        (4, 1 << 20, true),
    ];
    for (seed, batch, sparse) in runs {
        let t = random_trace(&[300, 1, 0, 700], 5, 16, 3, seed);
        let mut acc = StatsAccumulator::new(&t.header, PhaseSel::Decode).with_batch_tokens(batch);
        if sparse {
            acc = acc.with_sparse_successors();
        }
        let ks = t.keyspace();
        for s in 0..t.sequences.len() {
            for tok in 0..t.tokens(s, Phase::Decode) {
                acc.push_token(s, Phase::Decode, t.token(&ks, s, Phase::Decode, tok))
                    .unwrap();
            }
        }
        let st = acc.finish().unwrap();
        let nv = naive(&t);
        assert_eq!(st.tokens, 1001);
        for l in 0..5 {
            let c: Vec<u64> = (0..16)
                .map(|e| nv.counts[l].get(&e).copied().unwrap_or(0))
                .collect();
            let ls = &st.layers[l];
            assert!(close(ls.gini, gini(&c)));
            assert!(close(ls.entropy_bits, entropy_bits(&c)));
            assert_eq!(ls.distinct_experts, nv.counts[l].len() as u64);
            let (h, n) = nv.reuse[l];
            assert!(close(ls.temporal_reuse.unwrap(), h as f64 / n as f64));
            if l < 4 {
                assert!(close(ls.next_layer_predictability.unwrap(), nv.pred[l]));
            }
        }
        for (s, want) in nv.always_on.iter().enumerate() {
            let got: BTreeSet<[u32; 2]> = st.sequences[s].always_on_keys.iter().copied().collect();
            assert_eq!(&got, want, "sequence {s}, batch {batch}");
        }
    }
}

/// The granite facts from traces/data/granite/source/README.md, decode phase.
#[test]
fn granite_decode_facts() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/granite");
    let common = vec![[1, 8], [1, 13], [1, 19], [2, 24], [2, 26]];
    let with = |extra: [u32; 2]| {
        let mut v = common.clone();
        v.push(extra);
        v.sort_unstable();
        v
    };
    let cases = [
        ("english_prose.bin", 743, common.clone()),
        ("prose.bin", 743, common.clone()),
        ("code.bin", 684, with([22, 3])),
        ("math.bin", 723, with([20, 21])),
    ];
    for (file, distinct, always_on) in cases {
        let t = traces::read_file(dir.join(file)).unwrap();
        let st = trace_stats(&t, PhaseSel::Decode).unwrap();
        assert_eq!(st.num_layers, 24, "{file}");
        assert_eq!(st.num_experts, Some(32));
        assert_eq!(st.top_k, Some(8));
        assert_eq!(st.tokens, 64, "{file}");
        assert_eq!(st.accesses, 12_288, "{file}");
        assert_eq!(st.distinct_keys, distinct, "{file}");
        assert_eq!(st.always_on_keys, always_on, "{file}");
        assert_eq!(st.sequences[0].always_on_keys, always_on, "{file}");
    }
    let t = traces::read_file(dir.join("all.bin")).unwrap();
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    assert_eq!(st.tokens, 192);
    assert_eq!(st.accesses, 3 * 12_288);
    let per_seq: Vec<u64> = st.sequences.iter().map(|s| s.distinct_keys).collect();
    assert_eq!(per_seq, vec![743, 684, 723]);
    assert_eq!(st.always_on_keys, common);
    assert_eq!(st.sequences[1].always_on_keys, with([22, 3]));
    assert_eq!(st.sequences[2].always_on_keys, with([20, 21]));
}

#[test]
fn sequences_without_tokens_get_empty_entries_in_header_order() {
    // 1 MoE layer x 4 experts, top-2; only s1 and s3 have decode tokens, so s0 (before the
    // first), s2 (between) and s4 (after the last) must appear with no tokens.
    let d = |recs: &[[u16; 2]]| (Vec::new(), recs.iter().map(|r| r.to_vec()).collect());
    let t = trace_of(
        ModelSpec::uniform("m", 1, 4, 2),
        vec![d(&[]), d(&[[0, 1], [0, 2]]), d(&[]), d(&[[3, 2]]), d(&[])],
    );
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    let names: Vec<&str> = st.sequences.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["s0", "s1", "s2", "s3", "s4"]);
    let tokens: Vec<u64> = st.sequences.iter().map(|s| s.tokens).collect();
    assert_eq!(tokens, [0, 2, 0, 1, 0]);
    let distinct: Vec<u64> = st.sequences.iter().map(|s| s.distinct_keys).collect();
    assert_eq!(distinct, [0, 3, 0, 2, 0]);
    assert_eq!(st.sequences[1].always_on_keys, vec![[0, 0]]);
    assert!(st.sequences[2].always_on_keys.is_empty());
}

/// A header declaring 65,535 experts per layer: the successor counts follow the selections
/// (a dense matrix would be 65,535^2 counters, 17 GB, per layer pair). Next-layer
/// predictability by hand: 3 MoE layers, top-2, three tokens.
#[test]
fn wide_declared_geometry_counts_successors_sparsely() {
    let model = ModelSpec::uniform("wide", 3, 65_535, 2);
    // token records: layer 0, layer 1, layer 2 selections
    let tokens: Vec<Vec<u16>> = vec![
        vec![7, 65_534, 1, 2, 9, 9 + 1],
        vec![7, 3, 1, 5, 9, 10],
        vec![7, 65_534, 2, 5, 9, 11],
    ];
    let t = trace_of(model, vec![(vec![], tokens)]);
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    // layer 0 -> 1: successors of 7: 1 x2, 2, 5 x2 ... counted per token:
    //   t0: 7->{1,2}, 65534->{1,2};  t1: 7->{1,5}, 3->{1,5};  t2: 7->{2,5}, 65534->{2,5}
    //   rows: 7: 1:2 2:2 5:2 -> top-2 = 4; 65534: 1:1 2:2 5:1 -> 3; 3: 1:1 5:1 -> 2
    //   hits 9 of 3 tokens x 2 x 2 = 12 pairs
    assert!(close(
        st.layers[0].next_layer_predictability.unwrap(),
        9.0 / 12.0
    ));
    // layer 1 -> 2: t0: 1->{9,10}, 2->{9,10}; t1: 1->{9,10}, 5->{9,10}; t2: 2->{9,11}, 5->{9,11}
    //   rows: 1: 9:2 10:2 -> 4; 2: 9:2 10:1 11:1 -> 3; 5: 9:2 10:1 11:1 -> 3; hits 10 of 12
    assert!(close(
        st.layers[1].next_layer_predictability.unwrap(),
        10.0 / 12.0
    ));
    assert!(close(st.next_layer_predictability.unwrap(), 19.0 / 24.0));
}

/// The successor table a predictor learns: rows summed by hand, the same whether the pair is
/// counted densely (a small pair) or sparsely (a pair above the dense limit).
#[test]
fn successor_table_rows_count_each_pair_once_dense_or_sparse() {
    use traces::stats::SuccessorTable;
    // 3000 x 3000 counters are above the 4 Mi dense limit of one pair: sparse
    let mut t = SuccessorTable::for_pairs([(4, 3), (3000, 3000)]);
    for tab in &mut t {
        tab.add_pairs(&[0, 2], &[1, 2]);
        tab.add_pairs(&[2], &[1]);
        tab.add_pairs(&[9], &[0]); // a source id out of range of the small pair: not counted
    }
    for tab in &t {
        let mut row = [0u64; 3];
        tab.add_row(2, &mut row);
        assert_eq!(row, [0, 2, 1]);
        tab.add_row(0, &mut row);
        assert_eq!(row, [0, 3, 2]);
        let mut none = [0u64; 3];
        tab.add_row(1, &mut none);
        tab.add_row(3999, &mut none);
        assert_eq!(none, [0, 0, 0]);
    }
    let mut big = [0u64; 1];
    t[1].add_row(9, &mut big);
    assert_eq!(big, [1], "the wide pair counts id 9");
}
