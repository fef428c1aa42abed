use super::*;
use crate::cost::Paging;
use crate::engine::Plans;
use validate::ReplayMeasurement;

#[test]
fn step_stats_by_hand() {
    // 1..=100 µs: nearest-rank p50 = 50, p99 = 99, mean 50.5
    let us: Vec<f64> = (1..=100).rev().map(f64::from).collect();
    let s = StepStats::of(&us);
    assert_eq!((s.p50_ms, s.p99_ms), (0.050, 0.099));
    assert!((s.mean_ms - 0.0505).abs() < 1e-12);
    // three samples: p50 = rank 2, p99 = rank 3
    let s = StepStats::of(&[3000.0, 1000.0, 2000.0]);
    assert_eq!((s.p50_ms, s.p99_ms, s.mean_ms), (2.0, 3.0, 2.0));
    assert_eq!(error_pct(1.1, 1.0).round(), 10.0);
}

#[test]
fn repetitions_rotate_the_policy_order() {
    let order = |r| rotation(r, 3).collect::<Vec<_>>();
    assert_eq!(order(0), vec![0, 1, 2]);
    assert_eq!(order(1), vec![1, 2, 0]);
    assert_eq!(order(2), vec![2, 0, 1]);
    assert_eq!(order(3), vec![0, 1, 2]);
    // every policy takes every position once over n repetitions
    for i in 0..4 {
        let mut pos: Vec<usize> = (0..4)
            .map(|r| rotation(r, 4).position(|p| p == i).unwrap())
            .collect();
        pos.sort();
        assert_eq!(pos, vec![0, 1, 2, 3]);
    }
}

#[test]
fn repetitions_combine_into_medians_by_hand() {
    let st = |p50, p99, mean| StepStats {
        p50_ms: p50,
        p99_ms: p99,
        mean_ms: mean,
    };
    // p50s 30, 10, 20 -> median 20, min 10, max 30, spread (30-10)/20 = 100%
    let (m, p50) = combine(&[
        st(30.0, 40.0, 31.0),
        st(10.0, 12.0, 11.0),
        st(20.0, 50.0, 21.0),
    ])
    .unwrap();
    assert_eq!(m, st(20.0, 40.0, 21.0));
    assert_eq!((p50.min, p50.max, p50.spread, p50.n), (10.0, 30.0, 1.0, 3));
    // an even count takes the mean of the two middle values: p50s 10, 12, 14, 100 -> 13
    let (m, _) = combine(&[
        st(100.0, 1.0, 1.0),
        st(12.0, 1.0, 1.0),
        st(10.0, 1.0, 1.0),
        st(14.0, 1.0, 1.0),
    ])
    .unwrap();
    assert_eq!(m.p50_ms, 13.0);
    // one repetition is the replay itself
    let (m, p50) = combine(&[st(5.0, 6.0, 7.0)]).unwrap();
    assert_eq!((m, p50.spread), (st(5.0, 6.0, 7.0), 0.0));
    assert!(combine(&[]).is_none());
}

#[test]
fn host_speed_probe_is_launch_time_per_group_by_hand() {
    let step = |launch_us, groups| validate::HostBreakdown {
        launch_us,
        groups,
        commit_us: 1e6, // VMM time stays out of the probe
        ..Default::default()
    };
    // (100 + 50) µs over (4 + 1) groups = 30 µs per group
    let rep = Repetition {
        host: vec![step(100.0, 4), step(50.0, 1)],
        ..Default::default()
    };
    assert_eq!(rep.launch_us_per_group(), Some(30.0));
    // a replay from before the host breakdown, or one without groups, has no probe
    assert_eq!(Repetition::default().launch_us_per_group(), None);
    let empty = Repetition {
        host: vec![step(10.0, 0)],
        ..Default::default()
    };
    assert_eq!(empty.launch_us_per_group(), None);
}

/// A replay's measurement of `step_us` with nothing else recorded.
fn measurement(step_us: Vec<f64>) -> ReplayMeasurement {
    ReplayMeasurement {
        device: validate::DeviceInfo::default(),
        step_us,
        kernel_hidden: 0,
        kernel_ffn: 0,
        kernel_expert_bytes: 0,
        map_calls: 0,
        unmap_calls: 0,
        os_evict_calls: 0,
        bytes_copied: 0,
        wall_s: 0.0,
        host: Vec::new(),
        warmup_steps: 0,
        cpu_lane: None,
    }
}

#[test]
fn a_row_reports_the_error_against_the_median_of_repetition_medians() {
    let meas = measurement;
    // repetition p50s (nearest rank of 3 steps = the middle one): 1.0, 1.2, 0.8 ms
    let rep = |position, step_us| StoredRep {
        position,
        block: None,
        measurement: meas(step_us),
    };
    let reps = vec![
        rep(0, vec![900.0, 1000.0, 1100.0]),
        rep(1, vec![1200.0, 1300.0, 1100.0]),
        rep(2, vec![800.0, 700.0, 900.0]),
    ];
    let r = ValidationRow::new("e1".into(), 3, 9, vec![1100.0; 3], Vec::new(), reps).unwrap();
    assert_eq!(r.measured.p50_ms, 1.0);
    assert!((r.error_pct_p50 - 10.0).abs() < 1e-9);
    assert_eq!((r.measured_p50_min_ms, r.measured_p50_max_ms), (0.8, 1.2));
    assert!((r.measured_p50_spread_pct - 40.0).abs() < 1e-9);
    // against the slowest (1.2 ms): -8.33%; the fastest (0.8 ms): +37.5%
    assert!((r.error_pct_p50_range[0] - (1.1 / 1.2 - 1.0) * 100.0).abs() < 1e-9);
    assert!((r.error_pct_p50_range[1] - 37.5).abs() < 1e-9);
    assert_eq!(r.repeat, 3);
    assert_eq!(r.repetitions[1].position, 1);
    assert_eq!(r.replay.step_us, vec![900.0, 1000.0, 1100.0]);
}

#[test]
fn replay_plan_keeps_the_first_steps_in_order() {
    let mut p = Plans::new(2);
    for step in 0..3u32 {
        p.begin_step(1, 1);
        for layer in 0..2 {
            let u = step * 10 + layer as u32;
            p.push_group(layer, &[u], &[u], &[u], &[u]);
        }
    }
    let rp = replay_plan(&p, 2, Paging::Vmm, 1024, 7);
    assert_eq!(rp.groups.len(), 4);
    assert_eq!(
        rp.groups.iter().map(|g| g.keys[0]).collect::<Vec<_>>(),
        vec![0, 1, 10, 11]
    );
    assert_eq!((rp.steps, rp.moe_layers, rp.hidden), (2, 2, 1024));
    assert_eq!(rp.paging, Paging::Vmm);
    assert_eq!(rp.nonexpert_bytes_per_layer, 7);
}

#[test]
fn trace_paths_match_by_their_trailing_components() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let abs = format!("{root}/traces/data/granite/prose.bin");
    let t = "traces/data/granite/prose.bin";
    assert!(same_trace(t, t));
    assert!(same_trace(t, &abs));
    assert!(same_trace(t, "./traces/data/granite/prose.bin"));
    assert!(same_trace(
        "/elsewhere/repo/traces/data/granite/prose.bin",
        t
    ));
    assert!(!same_trace(t, "traces/data/granite/code.bin"));
    assert!(!same_trace(t, "other/prose.bin"));
    assert!(!same_trace("embedded:prose", t));
}

pub(super) mod warm_up_and_composition {
    use super::super::composition::composition;
    use super::super::predict::live_granules;
    use super::*;
    use crate::cache::{Batching, Budget, CacheConfig, RetentionConfig, Semantics, Split};
    use crate::engine::TimingConfig;
    use crate::runner::{TraceInput, Workload};
    use policies::units::UnitInfo;
    use policies::{PolicyKind, UnitMap};
    use std::sync::Arc;
    use validate::warmup::{WarmUp, DEFAULT_RULE};

    /// LRU at `pct`% of the bank, global, group semantics, one sequence per step.
    pub(crate) fn lru(pct: u128) -> RetentionConfig {
        RetentionConfig {
            cache: CacheConfig {
                policy: PolicyKind::Lru,
                budget: Budget::Fraction { num: pct, den: 100 },
                split: Split::Global,
                semantics: Semantics::Group,
                dram: None,
                seed: 0,
            },
            batching: Batching::default(),
            target: None,
        }
    }

    /// `spec` on the embedded granite prose trace (16 MiB experts), priced by h200-linux.
    fn predicted(
        spec: &str,
        retention: Option<&RetentionConfig>,
        steps: Option<usize>,
        w: WarmUpChoice,
    ) -> Prediction {
        let w0 = Workload::new(TraceInput::load(None).unwrap(), None).unwrap();
        let tc = TimingConfig::new("h200-linux", Arc::new(profile::load("h200-linux").unwrap()));
        let setup = PredictionSetup {
            workload: &w0,
            phase: traces::PhaseSel::Decode,
            sizes: policies::mechanisms::SizeOptions {
                expert_mib: Some(16.0),
                ..Default::default()
            },
            retention,
            timing: &tc,
            steps,
            seed: 0,
            hidden: 1024,
            cpu: None,
        };
        predict(spec, &setup, w).unwrap()
    }

    fn churn_of(plan: &validate::ReplayPlan, step: usize) -> validate::warmup::StepChurn {
        let gs = plan.groups.iter().filter(|g| g.step as usize == step);
        validate::warmup::StepChurn {
            page_ins: gs.clone().map(|g| g.page_ins.len() as u64).sum(),
            evictions: gs.map(|g| g.evicted.len() as u64).sum(),
        }
    }

    #[test]
    fn a_retention_row_warms_up_until_its_plan_is_steady() {
        let r = lru(25);
        let p = predicted("e1", Some(&r), Some(4), WarmUpChoice::Auto);
        let w = p.warm_up.steps;
        assert!(p.warm_up.steady && w >= 3, "{:?}", p.warm_up);
        assert_eq!((p.plan.warmup_steps, p.plan.steps, p.steps), (w, w + 4, 4));
        // the last three warm-up steps are steady in the plan itself, and the step before them
        // is not (else the warm-up would have ended a step earlier)
        for s in w - 3..w {
            assert!(DEFAULT_RULE.is_steady(churn_of(&p.plan, s)), "step {s}");
        }
        assert!(w == 3 || !DEFAULT_RULE.is_steady(churn_of(&p.plan, w - 4)));
        // measured = the same steps of one run without warm-up: times, parts and page-ins
        let all = predicted("e1", Some(&r), Some(w + 4), WarmUpChoice::Fixed(0));
        assert_eq!(
            all.warm_up,
            WarmUp {
                steps: 0,
                steady: false
            }
        );
        assert_eq!(p.step_us, all.step_us[w..].to_vec());
        assert_eq!(p.parts, all.parts[w..].to_vec());
        let tail: u64 = (w..w + 4).map(|s| churn_of(&all.plan, s).page_ins).sum();
        assert_eq!(p.page_ins, tail);
        // a fixed warm-up of the same length is judged steady too
        let fixed = predicted("e1", Some(&r), Some(4), WarmUpChoice::Fixed(w));
        assert_eq!(fixed.warm_up, p.warm_up);
        assert_eq!(fixed.step_us, p.step_us);
    }

    #[test]
    fn streaming_rows_have_no_automatic_warm_up() {
        let p = predicted("e1", None, Some(4), WarmUpChoice::Auto);
        assert_eq!(
            p.warm_up,
            WarmUp {
                steps: 0,
                steady: false
            }
        );
        assert_eq!(p.plan.warmup_steps, 0);
    }

    #[test]
    fn the_live_set_is_counted_at_each_group_by_hand() {
        let unit = |granules: u64| UnitInfo {
            useful_bytes: granules << 21,
            committed_bytes: granules << 21,
            experts: 1,
            first_moe_layer: 0,
            last_moe_layer: 0,
        };
        let map = UnitMap {
            spec: "e1".into(),
            paging: Paging::Vmm,
            expert_bytes: 2 << 21,
            granule_bytes: 2 << 20,
            key_first: vec![0, 1, 2, 3],
            key_count: vec![1; 4],
            units: vec![unit(2), unit(2), unit(2), unit(3)],
        };
        let g = |step, page_ins: Vec<u32>, evicted: Vec<u32>| validate::ReplayGroup {
            step,
            moe_layer: 0,
            keys: Vec::new(),
            page_ins,
            evicted,
            ..Default::default()
        };
        // unit 0 preloaded (2 granules). step 0 (warm-up): +1 -> 4. step 1: group A evicts 0
        // early (live 2 at its router), pages in 2 (-> 4); group B pages in 3 and evicts it
        // itself (live 4 at its router, 4 after). step 2: evicts 1 early (live 2), pages in 0.
        let plan = validate::ReplayPlan {
            paging: Paging::Vmm,
            groups: vec![
                g(0, vec![1], vec![]),
                g(1, vec![2], vec![0]),
                g(1, vec![3], vec![3]),
                g(2, vec![0], vec![1]),
            ],
            preloaded: vec![0],
            steps: 3,
            warmup_steps: 1,
            moe_layers: 2,
            hidden: 1024,
            nonexpert_bytes_per_layer: 0,
        };
        assert_eq!(live_granules(&plan, &map), vec![(2.0 + 4.0) / 2.0, 2.0]);
    }

    #[test]
    fn composition_with_the_models_own_vmm_time_is_the_plain_prediction() {
        let r = lru(25);
        let p = predicted("e1", Some(&r), Some(6), WarmUpChoice::Auto);
        let rep = |scale: f64| {
            let host: Vec<validate::HostBreakdown> = p
                .parts
                .iter()
                .map(|x| validate::HostBreakdown {
                    commit_us: x.commit_us * scale,
                    evict_us: x.decommit_us * scale,
                    groups: x.groups,
                    ..Default::default()
                })
                .collect();
            // measured 5% slower than the plain prediction, step by step
            let step_us: Vec<f64> = p.step_us.iter().map(|t| t * 1.05).collect();
            StoredRep {
                position: 0,
                block: None,
                measurement: ReplayMeasurement {
                    host,
                    warmup_steps: p.warm_up.steps,
                    ..measurement(step_us)
                },
            }
        };
        let row = |scale| {
            ValidationRow::new(
                p.spec.clone(),
                p.steps,
                p.page_ins,
                p.step_us.clone(),
                p.parts.clone(),
                vec![rep(scale)],
            )
            .unwrap()
        };
        let same = composition(&row(1.0), &p).unwrap().unwrap();
        let x = &same.repetitions[0];
        assert!((x.commit_scale - 1.0).abs() < 1e-12 && (x.decommit_scale - 1.0).abs() < 1e-12);
        // the plain prediction against a measurement 5% slower: 1/1.05 - 1 = -4.76%
        assert!(
            (same.error_pct_mean - 100.0 * (1.0 / 1.05 - 1.0)).abs() < 1e-9,
            "{same:?}"
        );
        // twice the model's VMM time: both factors 2 (no oversubscription on an H200 here),
        // the substituted VMM time matches, and the steps get slower
        let double = composition(&row(2.0), &p).unwrap().unwrap();
        let y = &double.repetitions[0];
        assert!(
            (y.commit_scale - 2.0).abs() < 1e-9 && (y.decommit_scale - 2.0).abs() < 1e-9,
            "{y:?}"
        );
        assert!(y.vmm_residual_pct.abs() < 1e-9);
        assert!(y.predicted.mean_ms > x.predicted.mean_ms);
        // an OS-paged row has nothing to substitute
        let os = predicted("os4k", Some(&r), Some(2), WarmUpChoice::Auto);
        let os_row = ValidationRow::new(
            os.spec.clone(),
            os.steps,
            os.page_ins,
            os.step_us.clone(),
            os.parts.clone(),
            vec![rep(1.0)],
        )
        .unwrap();
        assert!(composition(&os_row, &os).unwrap().is_none());
    }
}
