//! Always-on experts and token archetypes in the generator and their fit (`sim trace gen
//! --fit-to`): the generated always-on experts are in every token, archetypes tie the layers
//! of a token together, bad counts and shares are refused, and a trace fitted to the bundled
//! granite prose trace has the recording's always-on keys and next-layer predictability
//! (within 10%), counted by the statistics on both traces.

use traces::gen::fit::{fit, FitOptions};
use traces::gen::fit_cross::{always_on_counts, fit_cross};
use traces::gen::{generate_trace, Archetypes, GenError, GenParams};
use traces::stats::trace_stats;
use traces::{ModelSpec, PhaseSel};

fn params(always_on: Vec<u16>, cross: f64) -> GenParams {
    GenParams {
        preset: None,
        skew: vec![0.5],
        locality: vec![0.3],
        cross_layer: cross,
        sequences: 3,
        tokens: 40,
        seed: 11,
        fitted_to: None,
        always_on,
        archetypes: None,
    }
}

/// Layer 0 has 2 always-on experts and layer 1 none: layer 0's two most selected experts are
/// in all 120 tokens, and with a cross-layer probability of 1 they pass no successor on, so
/// layer 1 (mild skew, 16 experts) has no expert in every token.
#[test]
fn always_on_experts_are_in_every_token_and_stay_in_their_layer() {
    let model = ModelSpec::uniform("m", 2, 16, 4);
    let t = generate_trace(&model, &params(vec![2, 0], 1.0)).unwrap();
    let ks = t.keyspace();
    let mut counts = vec![vec![0u32; 16]; 2];
    let mut tokens = 0;
    for s in &t.sequences {
        for rec in s.decode.ids.chunks(ks.ids_per_token()) {
            tokens += 1;
            for m in 0..2 {
                for &e in &rec[ks.sel_offsets[m]..ks.sel_offsets[m + 1]] {
                    counts[m][e as usize] += 1;
                }
            }
        }
    }
    assert_eq!(tokens, 120);
    assert_eq!(counts[0].iter().filter(|&&c| c == 120).count(), 2);
    assert_eq!(counts[1].iter().filter(|&&c| c == 120).count(), 0);
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    assert_eq!(always_on_counts(&model, &st), vec![2, 0]);
}

#[test]
fn always_on_counts_are_checked_against_the_geometry() {
    let model = ModelSpec::uniform("m", 2, 16, 4);
    for bad in [vec![5, 0], vec![1]] {
        match generate_trace(&model, &params(bad.clone(), 0.0)) {
            Err(GenError::Param(m)) => assert!(m.contains("always-on"), "{bad:?}: {m}"),
            other => panic!("{bad:?}: {:?}", other.map(|_| ())),
        }
    }
}

/// 4 archetypes over 16 experts of top-4 partition each layer's experts, so with a share of
/// 1, no locality and no cross-layer successor every token's selection in a layer is one of 4
/// disjoint sets, and its layer-1 set is a function of its layer-0 set (the archetype is the
/// token's, shared by its layers). Each layer-0 expert then always meets the same 4 layer-1
/// experts, its 4 predicted successors, so the next-layer predictability is exactly 1; all
/// 16 experts of a layer are used (a missing archetype in 120 uniform picks has probability
/// 4 (3/4)^120 ~ 1e-15).
#[test]
fn archetypes_tie_a_tokens_layers_together() {
    let model = ModelSpec::uniform("m", 2, 16, 4);
    let mut p = params(Vec::new(), 0.0);
    p.locality = vec![0.0];
    p.archetypes = Some(Archetypes {
        count: 4,
        share: 1.0,
    });
    let t = generate_trace(&model, &p).unwrap();
    let ks = t.keyspace();
    let sorted = |v: &[u16]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    let mut pairs: Vec<(Vec<u16>, Vec<u16>)> = Vec::new();
    for s in &t.sequences {
        for rec in s.decode.ids.chunks(ks.ids_per_token()) {
            let pair = (sorted(&rec[..4]), sorted(&rec[4..8]));
            if !pairs.contains(&pair) {
                pairs.push(pair);
            }
        }
    }
    assert_eq!(pairs.len(), 4, "{pairs:?}");
    for layer in 0..2 {
        let mut all: Vec<u16> = pairs
            .iter()
            .flat_map(|p| if layer == 0 { &p.0 } else { &p.1 })
            .copied()
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..16).collect::<Vec<u16>>(), "layer {layer}");
    }
    let st = trace_stats(&t, PhaseSel::Decode).unwrap();
    assert_eq!(st.next_layer_predictability, Some(1.0));
    // without archetypes the same parameters leave the layers independent: an expert's
    // successors spread over more than 4 experts
    p.archetypes = None;
    let st = trace_stats(&generate_trace(&model, &p).unwrap(), PhaseSel::Decode).unwrap();
    assert!(st.next_layer_predictability.unwrap() < 0.9);
}

/// The header's parameters name the archetypes only when there are some.
#[test]
fn archetypes_are_in_the_header_only_when_given() {
    let model = ModelSpec::uniform("m", 2, 16, 4);
    let mut p = params(Vec::new(), 0.0);
    let json = |p: &GenParams| p.header(&model).provenance.generator.unwrap();
    assert!(!json(&p).contains("archetypes"));
    p.archetypes = Some(Archetypes {
        count: 3,
        share: 0.5,
    });
    assert!(json(&p).contains(r#""archetypes":{"count":3,"share":0.5}"#));
}

#[test]
fn archetype_counts_and_shares_are_checked() {
    let model = ModelSpec::uniform("m", 2, 16, 4);
    for (count, share, flag) in [
        (0, 0.5, "--archetypes"),
        (4097, 0.5, "--archetypes"),
        (2, 1.5, "--archetype-share"),
        (2, -0.1, "--archetype-share"),
    ] {
        let mut p = params(Vec::new(), 0.0);
        p.archetypes = Some(Archetypes { count, share });
        match generate_trace(&model, &p) {
            Err(GenError::Param(m)) => assert!(m.contains(flag), "{count}, {share}: {m}"),
            other => panic!("{count}, {share}: {:?}", other.map(|_| ())),
        }
    }
}

/// The recording has 5 always-on keys (layers 1 and 2) and a next-layer predictability of
/// 0.630; traces fitted to it (one 64-token sequence, as the recording, mean over 4 seeds)
/// have 5 always-on keys and a predictability within 10% of the recording's, as the fit's
/// own simulated estimate does.
#[test]
fn a_fitted_trace_has_the_recordings_always_on_keys_and_predictability() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/granite/prose.bin");
    let real = traces::read_file(std::path::Path::new(path)).unwrap();
    let model = real.header.model.clone();
    let st = trace_stats(&real, PhaseSel::Decode).unwrap();
    let opts = FitOptions::default();
    let layers = fit(&st, &opts);
    let cross = fit_cross(&model, &st, &layers, &opts);
    assert_eq!(
        cross.always_on.iter().map(|&n| n as usize).sum::<usize>(),
        st.always_on_keys.len()
    );
    assert_eq!(cross.target_predictability, st.next_layer_predictability);
    assert!((0.0..=1.0).contains(&cross.cross_layer));
    let want = st.next_layer_predictability.unwrap();
    let within = |got: f64| (got - want).abs() <= 0.1 * want;
    let fitted = cross.fitted_predictability.unwrap();
    assert!(within(fitted), "fit's estimate {fitted}, recording {want}");
    let seeds = 4;
    let (mut pred, mut always_on) = (0.0, 0.0);
    for seed in 0..seeds {
        let p = GenParams {
            preset: None,
            skew: layers.iter().map(|f| f.skew).collect(),
            locality: layers.iter().map(|f| f.locality).collect(),
            cross_layer: cross.cross_layer,
            sequences: 1,
            tokens: st.tokens,
            seed,
            fitted_to: None,
            always_on: cross.always_on.clone(),
            archetypes: cross.archetypes.clone(),
        };
        let s = trace_stats(&generate_trace(&model, &p).unwrap(), PhaseSel::Decode).unwrap();
        pred += s.next_layer_predictability.unwrap() / seeds as f64;
        always_on += s.always_on_keys.len() as f64 / seeds as f64;
    }
    let keys = st.always_on_keys.len() as f64;
    assert!(
        keys == 5.0 && (always_on - keys).abs() <= 0.1 * keys,
        "{always_on} always-on keys, recording {keys}"
    );
    assert!(within(pred), "fitted traces' {pred}, recording {want}");
}
