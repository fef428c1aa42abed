//! The composed plan builder ([`super::predict`] with a CPU placement, [`super::compose`]):
//! exactly the engine's CPU keys in each group, checked against plans worked out by hand on
//! a tiny trace.

use super::tests::warm_up_and_composition::lru;
use super::*;
use crate::engine::cpu::CpuExperts;
use crate::engine::TimingConfig;
use crate::runner::{TraceInput, Workload};
use std::sync::Arc;
use traces::{DType, Header, ModelSpec, Provenance, SequenceData, SequenceInfo, TokenBlock, Trace};
use validate::host::expert_kernel::Format;
use validate::replay_cpu::{run_cpu_half, CpuLaneSpec};

/// 2 MoE layers of 4 experts, top-2, hidden 256, expert FFN 256 (int4: 101,376 B an
/// expert, one 2 MiB granule; the GPU replay's kernel fits FFN 128 in it); 3 decode tokens
/// selecting
/// (layer 0, layer 1): ({0,1}, {2,3}), ({1,2}, {0,3}), ({3,0}, {1,2}).
fn tiny() -> Workload {
    let mut model = ModelSpec::uniform("tiny", 2, 4, 2);
    model.hidden_size = Some(256);
    model.expert_ffn = Some(256);
    let trace = Trace {
        header: Header {
            model,
            provenance: Provenance::default(),
            sequences: vec![SequenceInfo {
                name: "s".into(),
                prefill_tokens: 0,
                decode_tokens: 3,
            }],
            has_weights: false,
            passes: None,
        },
        sequences: vec![SequenceData {
            prefill: TokenBlock::default(),
            decode: TokenBlock {
                ids: vec![0, 1, 2, 3, 1, 2, 0, 3, 3, 0, 1, 2],
                weights: None,
            },
        }],
    };
    let input = TraceInput {
        label: "tiny".into(),
        trace,
    };
    Workload::new(input, None).unwrap()
}

/// e1 under LRU 50% with placement `mode`, int4, on h200-linux with the h200-host CPU; the
/// non-expert compute set to 10 ms a layer, so a page-in issued at one group's router is
/// ready (a 2 MiB commit and a 25 KB copy: well under 1 ms) by the next group's.
fn composed(mode: CpuExperts) -> Prediction {
    composed_steps(mode, None)
}

/// [`composed`] measuring the first `steps` steps (`None`: all).
fn composed_steps(mode: CpuExperts, steps: Option<usize>) -> Prediction {
    let w = tiny();
    let gpu = profile::load("h200-linux").unwrap();
    let host = profile::load("h200-host").unwrap();
    let hw = profile::with_host(&gpu, &host).unwrap();
    let mut tc = TimingConfig::new("h200-linux", Arc::new(hw));
    tc.overrides.nonexpert_us = Some(10_000.0);
    let r = lru(50);
    let setup = PredictionSetup {
        workload: &w,
        phase: traces::PhaseSel::Decode,
        sizes: policies::mechanisms::SizeOptions {
            dtype: Some(DType::Int4),
            ..Default::default()
        },
        retention: Some(&r),
        timing: &tc,
        steps,
        seed: 0,
        hidden: 256,
        cpu: Some((mode, DType::Int4)),
    };
    predict("e1", &setup, WarmUpChoice::Fixed(0)).unwrap()
}

/// Per group: (GPU keys, CPU call experts, demand page-ins, background page-ins, evicted),
/// each sorted.
type Shape = (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>);

fn shape(p: &Prediction) -> Vec<Shape> {
    let sorted = |v: &[u32]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    p.plan
        .groups
        .iter()
        .map(|g| {
            let calls: Vec<u32> = g.cpu_calls.iter().map(|c| c.expert).collect();
            assert!(g.cpu_calls.iter().all(|c| c.tokens == 1));
            (
                sorted(&g.keys),
                sorted(&calls),
                sorted(&g.page_ins),
                sorted(&g.background),
                sorted(&g.evicted),
            )
        })
        .collect()
}

#[test]
fn layers_n_puts_the_first_layers_keys_on_the_cpu_and_pages_the_rest() {
    let p = composed(CpuExperts::Layers(1));
    // the GPU's map holds layer 1's 4 experts (keys 4..8 as units 0..4); 50% = 2 units.
    // Layer 0 runs on the CPU: no GPU key, no page-in. Layer 1, LRU over units:
    // step 0 {6,7}: page in 2,3; step 1 {4,7}: page in 0, evict 2 (3 is the group's);
    // step 2 {5,6}: page in 1,2, evict 0,3.
    let v = |x: &[u32]| x.to_vec();
    assert_eq!(
        shape(&p),
        vec![
            (v(&[]), v(&[0, 1]), v(&[]), v(&[]), v(&[])),
            (v(&[6, 7]), v(&[]), v(&[2, 3]), v(&[]), v(&[])),
            (v(&[]), v(&[1, 2]), v(&[]), v(&[]), v(&[])),
            (v(&[4, 7]), v(&[]), v(&[0]), v(&[]), v(&[2])),
            (v(&[]), v(&[0, 3]), v(&[]), v(&[]), v(&[])),
            (v(&[5, 6]), v(&[]), v(&[1, 2]), v(&[]), v(&[0, 3])),
        ]
    );
    // activations of the CPU groups: one token x hidden 256 x 2 bytes (bf16)
    let act: Vec<u64> = p.plan.groups.iter().map(|g| g.activation_bytes).collect();
    assert_eq!(act, vec![512, 0, 512, 0, 512, 0]);
    assert_eq!(p.cpu, Some(CpuExperts::Layers(1)));
}

#[test]
fn misses_puts_exactly_the_keys_not_resident_on_the_cpu_and_pages_them_in_the_background() {
    let p = composed(CpuExperts::Misses);
    // all 8 units on the GPU, 50% = 4. Every page-in is off the critical path, ready by the
    // next group; a key is on the CPU exactly when its unit was not resident at the router.
    // step 0: L0 {0,1}, L1 {6,7} all miss -> 4 resident, no eviction.
    // step 1: L0 {1,2}: 1 hit (GPU), 2 miss; evict LRU 0. L1 {4,7}: 7 hit, 4 miss; evict 6.
    // step 2: L0 {0,3} both miss; evict 1,2. L1 {5,6} both miss; evict 4,7.
    let v = |x: &[u32]| x.to_vec();
    assert_eq!(
        shape(&p),
        vec![
            (v(&[]), v(&[0, 1]), v(&[]), v(&[0, 1]), v(&[])),
            (v(&[]), v(&[6, 7]), v(&[]), v(&[6, 7]), v(&[])),
            (v(&[1]), v(&[2]), v(&[]), v(&[2]), v(&[0])),
            (v(&[7]), v(&[4]), v(&[]), v(&[4]), v(&[6])),
            (v(&[]), v(&[0, 3]), v(&[]), v(&[0, 3]), v(&[1, 2])),
            (v(&[]), v(&[5, 6]), v(&[]), v(&[5, 6]), v(&[4, 7])),
        ]
    );
    // 2 + 2 + 1 + 1 + 2 + 2 calls
    let calls: usize = p.plan.groups.iter().map(|g| g.cpu_calls.len()).sum();
    assert_eq!(calls, 10);
}

/// The host kernel of the tiny trace's experts: its header geometry, int4, on `threads`.
fn tiny_lane(threads: usize) -> CpuLaneSpec {
    CpuLaneSpec {
        geom: kernels::ExpertGeometry::new(256, 256, 128).unwrap(),
        format: Format::Int4,
        experts: 8,
        threads,
        poll: false,
        seed: 1,
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_two_step_composed_replay_runs_every_planned_call_beside_the_gpu() {
    for mode in [CpuExperts::Layers(1), CpuExperts::Misses] {
        let p = composed_steps(mode, Some(2));
        assert_eq!((p.plan.steps, p.plan.warmup_steps), (2, 0));
        let spec = tiny_lane(validate::host::all_threads());
        let mut bank = validate::replay_cpu::lane_bank(&spec, 1);
        let opts = validate::ReplayOptions { device: 0 };
        let m = validate::replay_composed(
            &p.plan,
            &p.map,
            p.peak_bytes,
            opts,
            Some((&spec, &mut bank)),
        )
        .unwrap();
        assert_eq!(m.step_us.len(), 2, "{mode}");
        assert!(
            m.step_us.iter().all(|&us| us > 0.0),
            "{mode}: {:?}",
            m.step_us
        );
        let lane = m.cpu_lane.expect("a composed replay measures its CPU lane");
        let planned = validate::replay_cpu::calls_per_step(&p.plan);
        assert_eq!(lane.calls_per_step, planned, "{mode}");
        assert_eq!(lane.calls, planned.iter().sum::<u64>());
        assert!(lane.calls_us.iter().all(|&us| us > 0.0), "{mode}");
        // the GPU replayed the GPU keys' page-ins: demand (layers:1) or background (misses)
        let units: usize = p
            .plan
            .groups
            .iter()
            .map(|g| g.page_ins.len() + g.background.len())
            .sum();
        assert!(
            m.map_calls >= units as u64,
            "{mode}: {} map calls",
            m.map_calls
        );
    }
}

#[test]
fn the_cpu_half_of_a_composed_plan_runs_every_planned_call() {
    let p = composed(CpuExperts::Misses);
    let m = run_cpu_half(&p.plan, &tiny_lane(1)).unwrap();
    assert_eq!(m.calls_per_step, vec![4, 2, 4]);
    assert_eq!((m.calls, m.groups), (10, 6));
    assert!(m.calls_us.iter().all(|&us| us > 0.0));
}

/// A composed repetition measured `f` times the prediction at every step, its CPU lane
/// having run every planned call.
fn synthetic(p: &Prediction, position: u32, f: f64) -> StoredRep {
    let mut lane = validate::replay_cpu::CpuLaneMeasured::new(p.steps, 4, false);
    lane.calls_per_step = validate::replay_cpu::calls_per_step(&p.plan);
    lane.calls = lane.calls_per_step.iter().sum();
    lane.calls_us = p.step_us.iter().map(|t| t / 2.0).collect();
    StoredRep {
        position,
        block: None,
        measurement: validate::ReplayMeasurement {
            device: validate::DeviceInfo::default(),
            step_us: p.step_us.iter().map(|t| t * f).collect(),
            kernel_hidden: 128,
            kernel_ffn: 128,
            kernel_expert_bytes: 0,
            map_calls: 0,
            unmap_calls: 0,
            os_evict_calls: 0,
            bytes_copied: 0,
            wall_s: 0.0,
            host: Vec::new(),
            warmup_steps: 0,
            cpu_lane: Some(lane),
        },
    }
}

#[test]
fn a_composed_validation_round_trips_and_its_rows_analyse() {
    let preds = [
        composed(CpuExperts::Layers(1)),
        composed(CpuExperts::Misses),
    ];
    // three repetitions (each a block, no probe): measured 1.02, 1.00 and 0.98 times the
    // prediction; the bias is the mean of ln(measured p50 / predicted p50)
    let factors = [1.02, 1.0, 0.98];
    let rows: Vec<ValidationRow> = preds
        .iter()
        .map(|p| {
            let reps = (0..3).map(|r| synthetic(p, r as u32, factors[r])).collect();
            let label = format!("e1 cpu={}", p.cpu.unwrap());
            ValidationRow::new(
                label,
                p.steps,
                p.page_ins,
                p.step_us.clone(),
                p.parts.clone(),
                reps,
            )
            .unwrap()
        })
        .collect();
    let mut v = Validation {
        trace: "tiny".into(),
        model: "tiny".into(),
        hw: "h200-linux".into(),
        expert_bytes: preds[0].map.expert_bytes,
        vmm_granule_bytes: Some(preds[0].map.granule_bytes),
        retention: String::new(),
        retention_text: "lru, budget 50%".into(),
        retention_settings: None,
        rows,
        host_context: None,
        blocks: Vec::new(),
        analysis: None,
        composed: Some(Composed {
            host_profile: "h200-host".into(),
            placements: vec!["layers:1".into(), "misses".into()],
            dtype: "int4".into(),
            cpu_kernel_expert_bytes: 26_112,
            differences: "d".into(),
        }),
    };
    v.analysis = Some(analysis::analyse(&v, &preds, None));
    let json = serde_json::to_value(&v).unwrap();
    let back: Validation = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), json);
    assert_eq!(back.composed, v.composed);
    let lane = back.rows[1].replay.cpu_lane.as_ref().unwrap();
    assert_eq!(
        (lane.calls, lane.calls_per_step.clone()),
        (10, vec![4, 2, 4])
    );
    let a = back.analysis.unwrap();
    let bias = (1.02f64.ln() + 0.0 + 0.98f64.ln()) / 3.0;
    for (r, label) in a.rows.iter().zip(["e1 cpu=layers:1", "e1 cpu=misses"]) {
        assert_eq!(r.policy, label);
        assert!((r.bias - bias).abs() < 1e-12, "{}", r.bias);
        assert!(r.bias_lo >= 0.98f64.ln() - 1e-12 && r.bias_hi <= 1.02f64.ln() + 1e-12);
        assert_eq!(r.verdict, analysis::Verdict::Pass);
    }
    // the GPU-only JSON has no composed block
    let mut gpu_only = v.clone();
    gpu_only.composed = None;
    assert!(serde_json::to_value(&gpu_only)
        .unwrap()
        .get("composed")
        .is_none());
}
