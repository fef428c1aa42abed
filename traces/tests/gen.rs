//! Synthetic traces: determinism, the documented router model (checked by counting), fitting,
//! parameter validation and preset geometry.

use std::collections::HashMap;
use traces::gen::fit::{fit, FitOptions};
use traces::gen::{generate_trace, write_trace, write_trace_ticking, GenError, GenParams};
use traces::presets::{preset, PRESETS};
use traces::stats::trace_stats;
use traces::{LayerSpec, ModelSpec, Phase, PhaseSel};

fn params(skew: f64, locality: f64, cross: f64, seqs: u64, tokens: u64, seed: u64) -> GenParams {
    GenParams {
        preset: None,
        skew: vec![skew],
        locality: vec![locality],
        cross_layer: cross,
        sequences: seqs,
        tokens,
        seed,
        fitted_to: None,
        always_on: Vec::new(),
        archetypes: None,
    }
}

#[test]
fn a_ticking_write_counts_every_token_and_writes_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let model = ModelSpec::uniform("m", 3, 16, 4);
    let p = params(1.1, 0.4, 0.3, 3, 50, 42);
    let (a, b) = (dir.path().join("a.bin"), dir.path().join("b.bin"));
    write_trace(&a, &model, &p).unwrap();
    let (mut calls, mut ticked) = (0u64, 0u64);
    write_trace_ticking(&b, &model, &p, &mut |n| {
        calls += 1;
        ticked += n;
    })
    .unwrap();
    assert_eq!((calls, ticked), (150, 150), "3 sequences x 50 tokens");
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
}

#[test]
fn same_seed_gives_byte_identical_files() {
    let dir = tempfile::tempdir().unwrap();
    let model = ModelSpec::uniform("m", 3, 16, 4);
    let p = params(1.1, 0.4, 0.3, 2, 50, 42);
    let (a, b, c) = (
        dir.path().join("a.bin"),
        dir.path().join("b.bin"),
        dir.path().join("c.bin"),
    );
    write_trace(&a, &model, &p).unwrap();
    write_trace(&b, &model, &p).unwrap();
    write_trace(
        &c,
        &model,
        &GenParams {
            seed: 43,
            ..p.clone()
        },
    )
    .unwrap();
    let (a, b, c) = (
        std::fs::read(a).unwrap(),
        std::fs::read(b).unwrap(),
        std::fs::read(&c).unwrap(),
    );
    assert_eq!(a, b);
    assert_ne!(a, c);
    // The streamed file holds exactly the in-memory trace, with synthetic provenance.
    let t = traces::read_bytes(&a, "a.bin").unwrap();
    assert_eq!(t, generate_trace(&model, &p).unwrap());
    t.check().unwrap();
    assert!(t.header.provenance.synthetic);
    let recorded: GenParams =
        serde_json::from_str(t.header.provenance.generator.as_deref().unwrap()).unwrap();
    assert_eq!(recorded, p);
}

#[test]
fn full_locality_repeats_every_selection() {
    let model = ModelSpec::uniform("m", 2, 32, 8);
    let t = generate_trace(&model, &params(0.5, 1.0, 0.0, 3, 40, 1)).unwrap();
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    assert_eq!(st.temporal_reuse, Some(1.0));
    // Every sequence repeats its first selection, so all 16 of its keys are always-on,
    // and sequences differ from each other (fresh start).
    for s in &st.sequences {
        assert_eq!(s.always_on_keys.len(), 16);
    }
}

#[test]
fn full_cross_layer_makes_the_next_selection_a_function_of_the_previous() {
    let model = ModelSpec::uniform("m", 3, 16, 3);
    let t = generate_trace(&model, &params(0.8, 0.0, 1.0, 1, 400, 9)).unwrap();
    let ks = t.keyspace();
    for l in 0..2 {
        // Each expert of layer l always maps to the same expert of layer l+1, slot by slot.
        let mut succ: HashMap<u16, u16> = HashMap::new();
        for tok in 0..400 {
            let a = t.selection(&ks, 0, Phase::Decode, tok, l);
            let b = t.selection(&ks, 0, Phase::Decode, tok, l + 1);
            for (&x, &y) in a.iter().zip(b) {
                assert_eq!(*succ.entry(x).or_insert(y), y, "layer {l} token {tok}");
            }
        }
        // A bijection: distinct experts map to distinct successors.
        let mut img: Vec<u16> = succ.values().copied().collect();
        img.sort_unstable();
        img.dedup();
        assert_eq!(img.len(), succ.len());
    }
}

#[test]
fn fresh_draws_follow_the_zipf_law() {
    // top-1, no locality: every draw is a fresh Zipf draw; P(rank r) = (1/(r+1)) / H_8.
    let model = ModelSpec::uniform("m", 1, 8, 1);
    let n = 40_000u64;
    let t = generate_trace(&model, &params(1.0, 0.0, 0.0, 1, n, 5)).unwrap();
    let mut counts = [0u64; 8];
    for &e in &t.sequences[0].decode.ids {
        counts[e as usize] += 1;
    }
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let h: f64 = (1..=8).map(|r| 1.0 / r as f64).sum();
    for (r, &c) in counts.iter().enumerate() {
        let p = 1.0 / (r + 1) as f64 / h;
        let sd = (p * (1.0 - p) / n as f64).sqrt();
        let got = c as f64 / n as f64;
        assert!((got - p).abs() < 5.0 * sd, "rank {r}: {got} vs {p}");
    }
    // Skew 0 is uniform: entropy of a long top-4-of-16 trace is close to log2(16) = 4.
    let model = ModelSpec::uniform("m", 1, 16, 4);
    let t = generate_trace(&model, &params(0.0, 0.0, 0.0, 1, 20_000, 6)).unwrap();
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    assert!((st.layers[0].entropy_bits - 4.0).abs() < 0.001);
}

#[test]
fn extreme_skew_still_samples_without_replacement() {
    // Skew 40: the rejection loop nearly always misses after the top expert; the exact
    // fallback must still give k distinct ids (checked by Trace::check).
    let model = ModelSpec::uniform("m", 1, 12, 6);
    let t = generate_trace(&model, &params(40.0, 0.0, 0.0, 1, 50, 2)).unwrap();
    t.check().unwrap();
}

#[test]
fn top_k_equal_to_the_expert_count_selects_every_expert() {
    // Every token's selection is then a permutation of the 300 experts: the rejection loop
    // misses ever more often as the selection fills, and the exact fallback draws the rest.
    let model = ModelSpec::uniform("m", 2, 300, 300);
    let t = generate_trace(&model, &params(1.0, 0.0, 0.5, 2, 5, 4)).unwrap();
    t.check().unwrap();
    let ids = &t.sequences[0].decode.ids;
    let mut first: Vec<u16> = ids[..300].to_vec();
    first.sort_unstable();
    assert_eq!(first, (0..300).collect::<Vec<u16>>());
}

#[test]
fn fit_recovers_skew_and_locality() {
    let model = ModelSpec::uniform("m", 3, 32, 4);
    let truth = GenParams {
        skew: vec![0.6, 1.0, 1.5],
        locality: vec![0.2, 0.5, 0.0],
        ..params(0.0, 0.0, 0.0, 2, 2_000, 11)
    };
    let t = generate_trace(&model, &truth).unwrap();
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    let opts = FitOptions {
        sim_tokens: 4_000,
        ..FitOptions::default()
    };
    let fits = fit(&st, &opts);
    assert_eq!(fits.len(), 3);
    for (i, f) in fits.iter().enumerate() {
        assert!(
            (f.skew - truth.skew[i]).abs() < 0.1,
            "layer {i}: skew {} vs {}",
            f.skew,
            truth.skew[i]
        );
        assert!(
            (f.locality - truth.locality[i]).abs() < 0.05,
            "layer {i}: locality {} vs {}",
            f.locality,
            truth.locality[i]
        );
    }
    // Deterministic: the same fit twice is identical.
    assert_eq!(fits, fit(&st, &opts));
}

#[test]
fn bad_parameters_are_named() {
    let model = ModelSpec::uniform("m", 2, 8, 2);
    let err = |p: GenParams| match generate_trace(&model, &p) {
        Err(GenError::Param(m)) => m,
        other => panic!("expected a parameter error, got {other:?}"),
    };
    assert!(err(params(-0.5, 0.1, 0.0, 1, 1, 0)).contains("--skew"));
    assert!(err(params(f64::NAN, 0.1, 0.0, 1, 1, 0)).contains("--skew"));
    assert!(err(params(1.0, 1.5, 0.0, 1, 1, 0)).contains("--locality"));
    assert!(err(params(1.0, 0.1, -0.1, 1, 1, 0)).contains("--cross-layer"));
    assert!(err(params(1.0, 0.1, 0.0, 0, 1, 0)).contains("--sequences"));
    // 64 MiB of header at 11 bytes or more per `synthetic-{i}` entry: 67108864 / 11 = 6100805
    let e = err(params(1.0, 0.1, 0.0, u64::MAX, 1, 0));
    assert!(e.contains("give at most 6100805"), "{e}");
    assert!(!err(params(1.0, 0.1, 0.0, 6_100_806, 1, 0)).is_empty());
    let three = GenParams {
        skew: vec![1.0, 1.0, 1.0],
        ..params(1.0, 0.1, 0.0, 1, 1, 0)
    };
    assert!(err(three).contains("one per MoE layer (2)"));
    let mut bad = model.clone();
    bad.layers[1] = LayerSpec {
        experts: 2,
        top_k: 3,
        shared_experts: 0,
    };
    assert!(matches!(
        generate_trace(&bad, &params(1.0, 0.1, 0.0, 1, 1, 0)),
        Err(GenError::Param(m)) if m.contains("top-k 3 exceeds")
    ));
}

#[test]
fn presets_have_the_public_geometry() {
    assert_eq!(PRESETS.len(), 7);
    let ds = preset("DeepSeek-V3").unwrap().model_spec();
    let ks = traces::KeySpace::new(&ds);
    assert_eq!(ds.layers.len(), 61);
    assert_eq!(ks.num_moe_layers(), 58);
    assert_eq!(ks.moe_layers[0], 3);
    assert_eq!(ks.ids_per_token(), 58 * 8);
    assert_eq!(ks.num_keys(), 58 * 256);
    let kimi = traces::KeySpace::new(&preset("kimi-k2").unwrap().model_spec());
    assert_eq!(kimi.num_moe_layers(), 60);
    assert_eq!(kimi.num_keys(), 60 * 384);
    // The granite preset matches the geometry recorded in the bundled real trace.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/granite/all.bin");
    let real = traces::read_header(dir).unwrap();
    let g = preset("granite-3.0-1b-a400m").unwrap().model_spec();
    assert_eq!(g.layers, real.model.layers);
    // Expert size of Mixtral-8x7B: 3 x 4096 x 14336 parameters (~176 M).
    assert_eq!(
        preset("mixtral-8x7b").unwrap().model_spec().expert_params(),
        Some(3 * 4096 * 14336)
    );
    assert!(preset("no-such-model").is_none());
}
