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

#[test]
fn a_row_reports_the_error_against_the_median_of_repetition_medians() {
    let meas = |steps: Vec<f64>| ReplayMeasurement {
        device: validate::DeviceInfo::default(),
        step_us: steps,
        kernel_hidden: 0,
        kernel_ffn: 0,
        kernel_expert_bytes: 0,
        map_calls: 0,
        unmap_calls: 0,
        os_evict_calls: 0,
        bytes_copied: 0,
        wall_s: 0.0,
        host: Vec::new(),
    };
    // repetition p50s (nearest rank of 3 steps = the middle one): 1.0, 1.2, 0.8 ms
    let reps = vec![
        (0, meas(vec![900.0, 1000.0, 1100.0])),
        (1, meas(vec![1200.0, 1300.0, 1100.0])),
        (2, meas(vec![800.0, 700.0, 900.0])),
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
