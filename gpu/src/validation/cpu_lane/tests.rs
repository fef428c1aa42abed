//! Hand-computed cases of the CPU-lane steps, prediction and summary.

use super::*;
use crate::host_cost::HostCostModel;
use profile::{Constant, ConstantName as C, Device, Profile};
use traces::{
    DType, Header, ModelSpec, PhaseSel, Provenance, SequenceData, SequenceInfo, TokenBlock, Trace,
};

/// 2 MoE layers of 4 experts, top-2; two sequences of 2 decode tokens each. A token's
/// record is layer 0's two picks, then layer 1's.
fn trace() -> Trace {
    let seq = |name: &str, ids: Vec<u16>| {
        (
            SequenceInfo {
                name: name.into(),
                prefill_tokens: 0,
                decode_tokens: 2,
            },
            SequenceData {
                prefill: TokenBlock::default(),
                decode: TokenBlock { ids, weights: None },
            },
        )
    };
    let (ia, da) = seq("a", vec![0, 1, 2, 3, /* token 1 */ 0, 2, 2, 3]);
    let (ib, db) = seq("b", vec![1, 0, 3, 0, /* token 1 */ 3, 2, 1, 0]);
    Trace {
        header: Header {
            model: ModelSpec::uniform("t", 2, 4, 2),
            provenance: Provenance::default(),
            sequences: vec![ia, ib],
            has_weights: false,
            passes: None,
        },
        sequences: vec![da, db],
    }
}

fn call(layer: u32, expert: u16, tokens: u32) -> CpuCall {
    CpuCall {
        layer,
        expert,
        tokens,
    }
}

#[test]
fn one_request_a_step_calls_each_pick_of_the_cpu_layers_once() {
    // requests round-robin: a0, b0, a1, b1; layers:1 keeps layer 0's picks only
    let s = cpu_steps(&trace(), PhaseSel::Decode, 1, 1, None);
    let want = [[0, 1], [1, 0], [0, 2], [3, 2]];
    assert_eq!(s.len(), 4);
    for (step, w) in s.iter().zip(want) {
        assert_eq!(step.calls, vec![call(0, w[0], 1), call(0, w[1], 1)]);
    }
    // all layers, at most 1 step: a0's layer 0 then layer 1
    let s = cpu_steps(&trace(), PhaseSel::Decode, 2, 1, Some(1));
    let want = vec![call(0, 0, 1), call(0, 1, 1), call(1, 2, 1), call(1, 3, 1)];
    assert_eq!(s, vec![CpuStep { calls: want }]);
}

#[test]
fn a_batch_calls_each_distinct_expert_once_on_the_tokens_that_picked_it() {
    // batch 2: step 0 = a0 + b0. Layer 0: a0 {0,1}, b0 {1,0} -> 0 x2, 1 x2.
    // Layer 1: a0 {2,3}, b0 {3,0} -> 2 x1, 3 x2, 0 x1.
    let s = cpu_steps(&trace(), PhaseSel::Decode, 2, 2, None);
    assert_eq!(s.len(), 2);
    assert_eq!(
        s[0].calls,
        vec![
            call(0, 0, 2),
            call(0, 1, 2),
            call(1, 2, 1),
            call(1, 3, 2),
            call(1, 0, 1)
        ]
    );
}

fn host() -> HostCostModel {
    let mut p = Profile::new("host-test", "test", Device::default());
    let mut set = |n: C, v: f64, unit: &str| {
        p.set(n, Constant::assumed(v, unit, "a hand-computed test value"));
    };
    set(C::HostExpertInt4Bandwidth, 1000.0, "MB/s");
    set(C::HostExpertInt4CallOverhead, 10.0, "us");
    set(C::HostExpertInt4Tokens16Bandwidth, 250.0, "MB/s");
    HostCostModel::new(&p)
}

#[test]
fn a_step_is_priced_as_the_sum_of_its_calls() {
    // A 99,000 B int4 expert is priced on its 99,000 x 68 / 66 = 102,000 B in the kernel's
    // layout: at 1000 B/us 102 us + 10 us per one-token call. Two tokens: compute term
    // 2 x 102,000 / (16 x 250) = 51 us < 102 us memory, so 112 us too. 16 tokens:
    // 16 x 102,000 / 4000 = 408 us + 10 us.
    let steps = vec![
        CpuStep {
            calls: vec![call(0, 0, 1), call(0, 1, 1), call(1, 0, 2)],
        },
        CpuStep {
            calls: vec![call(0, 3, 16)],
        },
        CpuStep::default(),
    ];
    let p = predict_steps(&host(), DType::Int4, 99_000, &steps).unwrap();
    assert_eq!(p.len(), 3);
    assert!((p[0] - 336.0).abs() < 1e-9, "{}", p[0]);
    assert!((p[1] - 418.0).abs() < 1e-9, "{}", p[1]);
    assert_eq!(p[2], 0.0);
    let e = predict_steps(&host(), DType::Bf16, 99_000, &steps).unwrap_err();
    assert!(e.to_string().contains("host_expert_bf16_bandwidth"), "{e}");
}

#[test]
fn quantiles_interpolate_between_ranks() {
    let v = [4.0, 1.0, 3.0, 2.0, 5.0];
    assert_eq!(quantile(&v, 0.5), 3.0);
    assert_eq!(quantile(&v, 0.0), 1.0);
    assert_eq!(quantile(&v, 1.0), 5.0);
    // rank 0.1 x 4 = 0.4: 1 + 0.4 x (2 - 1)
    assert!((quantile(&v, 0.1) - 1.4).abs() < 1e-12);
    assert!((quantile(&[1.0, 2.0], 0.5) - 1.5).abs() < 1e-12);
    assert!(quantile(&[], 0.5).is_nan());
}

#[test]
fn a_row_takes_errors_against_each_steps_median_repetition() {
    // predicted 100, 200, 300; repetitions (110, 180, 300) (90, 220, 330) (100, 200, 270):
    // per-step medians 100, 200, 300 -> errors 0, 0, 0; repetition 0's errors
    // -9.09, 11.1, 0 (median 0); totals 590, 640, 570 -> spread 70 / 590.
    let row = CpuLaneRow::new(
        "all",
        2,
        3.0,
        (true, 1000),
        vec![100.0, 200.0, 300.0],
        vec![
            vec![110.0, 180.0, 300.0],
            vec![90.0, 220.0, 330.0],
            vec![100.0, 200.0, 270.0],
        ],
        vec![0, 1, 0],
    );
    assert_eq!(row.median_error_pct, 0.0);
    assert_eq!(row.median_measured_us, 200.0);
    assert!((row.repetition_spread - 70.0 / 590.0).abs() < 1e-12);
    assert_eq!(row.repetition_error_pct[0], 0.0);
    // repetition 1: errors 100/90-1 = 11.1%, -9.09%, -9.09% -> median -9.09%
    assert!((row.repetition_error_pct[1] - 100.0 * (300.0 - 330.0) / 330.0).abs() < 1e-9);
}

#[test]
fn the_probe_ratio_takes_the_machine_state_out_of_the_error() {
    // predicted 100, 200; repetition 0 measured 2x slow, repetition 1 2.2x; the probe
    // predicted 50 us, measured 100 and 110: ratios 2.0 and 2.2 (median 2.1). Raw: per-step
    // medians 210, 420 -> -52.4%. Adjusted: each repetition divided by its own ratio gives
    // 100, 200 in both -> 0%.
    let row = CpuLaneRow::new(
        "all",
        1,
        1.0,
        (true, 10),
        vec![100.0, 200.0],
        vec![vec![200.0, 400.0], vec![220.0, 440.0]],
        vec![0, 0],
    )
    .with_probe(1000, 50.0, vec![100.0, 110.0]);
    assert!((row.median_error_pct - 100.0 * (100.0 - 210.0) / 210.0).abs() < 1e-9);
    let p = row.probe.unwrap();
    assert!((p.ratio - 2.1).abs() < 1e-12);
    assert!(
        p.adjusted_median_error_pct.abs() < 1e-9,
        "{}",
        p.adjusted_median_error_pct
    );
}
