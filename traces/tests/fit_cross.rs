//! Always-on experts in the generator and their fit (`sim trace gen --fit-to`): the generated
//! experts are in every token, a bad count is refused, and a trace fitted to the bundled
//! granite prose trace has as many always-on keys as the recording, counted by the statistics
//! on both traces.

use traces::gen::fit::{fit, FitOptions};
use traces::gen::fit_cross::{always_on_counts, fit_cross};
use traces::gen::{generate_trace, GenError, GenParams};
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

/// The recording has 5 always-on keys (layers 1 and 2); the fitted trace has 5 too, and the
/// fit reports the predictability it reached beside the recording's.
#[test]
fn a_fitted_trace_has_the_recordings_always_on_keys() {
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
    let p = GenParams {
        preset: None,
        skew: layers.iter().map(|f| f.skew).collect(),
        locality: layers.iter().map(|f| f.locality).collect(),
        cross_layer: cross.cross_layer,
        sequences: 1,
        tokens: st.tokens,
        seed: 0,
        fitted_to: None,
        always_on: cross.always_on.clone(),
    };
    let fitted = trace_stats(&generate_trace(&model, &p).unwrap(), PhaseSel::Decode).unwrap();
    let (want, got) = (
        st.always_on_keys.len() as f64,
        fitted.always_on_keys.len() as f64,
    );
    assert!(
        want == 5.0 && (got - want).abs() <= 0.1 * want,
        "{got} always-on keys, recording {want}"
    );
    assert!(cross.fitted_predictability.is_some());
}
