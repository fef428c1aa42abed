//! The bounded-memory timed path of `sim run --hw` (`sim::bounded::run_file` with timing,
//! which records and prices the plan window by window from the trace file) gives, bit for
//! bit, the report of the in-memory path (`sim::runner::run` on the loaded trace, pricing the
//! whole plan at once): retention policies (Belady/MIN and static pinning included), both
//! semantics, both splits, batches, a DRAM tier, every predictor, CPU expert placements, the
//! streaming regime, profile and co-activation orders, a profile trace, a timeline file, kept
//! step latencies, admission caps, queues, route-aware schedules, tokens/s targets, and traces long enough to span several windows with sequences of unequal
//! lengths and prefill tokens.

mod common;

use common::{retention, Files};
use policies::PolicyKind;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use sim::cache::{Batching, Budget, RetentionConfig, Schedule, Semantics, Split};
use sim::engine::cpu::CpuExperts;
use sim::engine::{PredictorKind, PrefetchIssue, TimingConfig};
use sim::runner::{self, RunConfig, TraceInput, Workload};
use std::path::Path;
use std::sync::Arc;
use traces::{ModelSpec, PhaseSel};

/// h200-linux with the development box's host constants (the CPU lane needs them).
fn timing() -> TimingConfig {
    let hw = profile::load("h200-linux").unwrap();
    let host = profile::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profile/profiles/dev-box-host.json"
    ))
    .unwrap();
    TimingConfig::new(
        "h200-linux",
        Arc::new(profile::with_host(&hw, &host).unwrap()),
    )
}

/// Both paths' reports of `cfg` as JSON ([`common::both_paths`]).
fn both(cfg: &RunConfig, trace: &Path, profile: Option<&Path>) -> (String, String) {
    common::both_paths(cfg, trace, profile, "\"tokens_per_s\"")
}

/// A trace of a 4-layer model of 16 experts, top-2, with a hidden size (the CPU lane needs
/// one), and a profile trace. The `long` trace's 18,115 tokens make 72,460 groups at batch 1:
/// more than one window of the bounded path (65,536 groups).
fn files(long: bool) -> Files {
    let mut rng = Pcg64::seed_from_u64(23);
    let mut model = ModelSpec::uniform("tiny", 4, 16, 2);
    model.hidden_size = Some(1024);
    model.expert_ffn = Some(512);
    let lens: Vec<(u64, u64)> = if long {
        vec![(5, 9000), (0, 4000), (3, 0), (7, 5100)]
    } else {
        vec![(5, 40), (0, 25), (3, 0), (7, 61)]
    };
    Files::write(&model, &lens, &mut rng)
}

fn cfg(policy: &str, phase: PhaseSel, retention: Option<RetentionConfig>) -> RunConfig {
    let mut c = RunConfig {
        policy: policy.into(),
        phase,
        retention,
        timing: Some(timing()),
        ..RunConfig::default()
    };
    c.sizes.dtype = Some(traces::model::DType::Int4);
    c
}

#[test]
fn every_policy_split_and_semantics_matches_the_in_memory_path() {
    let f = files(false);
    for policy in PolicyKind::ALL {
        for split in [Split::Global, Split::PerLayer] {
            for semantics in [Semantics::Group, Semantics::Access] {
                let c = cfg(
                    "e1",
                    PhaseSel::All,
                    Some(retention(policy, "25%", split, semantics)),
                );
                let (a, b) = both(&c, &f.trace, None);
                assert_eq!(a, b, "{c:?}");
            }
        }
    }
}

#[test]
fn predictors_batches_tiers_and_placements_match_the_in_memory_path() {
    let f = files(false);
    for predictor in PredictorKind::ALL {
        for (batch, dram, cpu, profile) in [
            (1, None, CpuExperts::None, None),
            (3, Some("50%"), CpuExperts::None, Some(&f.profile)),
            (2, None, CpuExperts::Layers(2), None),
            (1, None, CpuExperts::Misses, Some(&f.profile)),
        ] {
            if cpu != CpuExperts::None && predictor != PredictorKind::None {
                continue; // a CPU placement prices no prefetch
            }
            for policy in [PolicyKind::Lru, PolicyKind::Belady, PolicyKind::StaticPin] {
                let mut r = retention(policy, "30%", Split::PerLayer, Semantics::Group);
                r.batching.batch = batch;
                r.cache.dram =
                    dram.map(|d| sim::cache::DramConfig::pinned(Budget::parse(d).unwrap()));
                let mut c = cfg("e1", PhaseSel::All, Some(r));
                let t = c.timing.as_mut().unwrap();
                t.predictor = predictor;
                t.window = 2;
                t.cpu_experts = cpu;
                let (a, b) = both(&c, &f.trace, profile.map(|p| p.as_path()));
                assert_eq!(a, b, "{c:?}");
            }
        }
    }
}

#[test]
fn streaming_mechanisms_and_a_timeline_match_the_in_memory_path() {
    let f = files(false);
    let dir = tempfile::tempdir().unwrap();
    for mechanism in ["e1", "e2:hot", "e3:coact", "region:5", "os4k"] {
        for phase in [PhaseSel::Decode, PhaseSel::All] {
            let mut c = cfg(mechanism, phase, None);
            let (a, b) = both(&c, &f.trace, Some(&f.profile));
            assert_eq!(a, b, "{mechanism} {phase:?}");
            // the timeline file is the same too
            let path = dir.path().join("t.json");
            c.timing.as_mut().unwrap().timeline = Some(path.clone());
            c.retention = Some(retention(
                PolicyKind::Lru,
                "40%",
                Split::Global,
                Semantics::Group,
            ));
            let load = |p: &Path| TraceInput::load(Some(p)).unwrap();
            let w = Workload::new(load(&f.trace), None).unwrap();
            runner::run(&c, &w).unwrap();
            let memory = std::fs::read(&path).unwrap();
            sim::bounded::run_file(&c, &f.trace, None, &|_| {}).unwrap();
            assert_eq!(
                memory,
                std::fs::read(&path).unwrap(),
                "{mechanism} {phase:?}"
            );
        }
    }
}

#[test]
fn a_trace_of_several_windows_matches_the_in_memory_path() {
    let f = files(true);
    for (policy, predictor, batch) in [
        (PolicyKind::Lru, PredictorKind::PrevToken, 1),
        (PolicyKind::Belady, PredictorKind::Oracle, 2),
        (PolicyKind::StaticPin, PredictorKind::Eam, 1),
        (PolicyKind::Fifo, PredictorKind::NextLayer, 3),
    ] {
        let mut r = retention(policy, "20%", Split::Global, Semantics::Group);
        r.batching.batch = batch;
        r.cache.dram = Some(sim::cache::DramConfig::pinned(
            Budget::parse("60%").unwrap(),
        ));
        let mut c = cfg("e1", PhaseSel::All, Some(r));
        let t = c.timing.as_mut().unwrap();
        t.predictor = predictor;
        t.window = 4;
        let (a, b) = both(&c, &f.trace, None);
        assert_eq!(a, b, "{c:?}");
        // the other issue policy, and demand first under a cap of one 3 MiB unit in flight
        for (issue, cap) in [
            (PrefetchIssue::Legacy, None),
            (PrefetchIssue::DemandFirst, Some(3 << 20)),
        ] {
            let t = c.timing.as_mut().unwrap();
            (t.prefetch_issue, t.prefetch_cap) = (issue, cap);
            let (a, b) = both(&c, &f.trace, None);
            assert_eq!(a, b, "{c:?}");
        }
        // a confidence cut
        c.timing.as_mut().unwrap().prefetch_min_score = Some(0.5);
        let (a, b) = both(&c, &f.trace, None);
        assert_eq!(a, b, "{c:?}");
    }
}

#[test]
fn a_plan_refused_in_its_first_window_stops_the_replay_there() {
    // A KV cache of 150 MB a token passes 90% of the H200's usable VRAM, where h200-linux
    // has no oversubscription constant, once a sequence holds about 900 tokens: within the
    // first window of the long trace's 18,115 tokens. Both paths give that error, and the
    // bounded replay reads no further than the window that met it.
    let f = files(true);
    let mut c = cfg(
        "e1",
        PhaseSel::All,
        Some(retention(
            PolicyKind::Lru,
            "20%",
            Split::Global,
            Semantics::Group,
        )),
    );
    c.timing.as_mut().unwrap().overrides.kv_bytes_per_token = Some(150_000_000);
    let (a, b) = both(&c, &f.trace, None);
    assert_eq!(a, b);
    assert!(a.contains("first_touch_90_100"), "{a}");
    // what fills VRAM: experts, non-expert weights and the KV cache, in MiB, add up to the
    // fill the error names, and the KV cache is a whole number of 150 MB tokens
    let figure = |before: &str| -> f64 {
        let at = a
            .find(before)
            .unwrap_or_else(|| panic!("{before:?} in {a}"));
        let num: String = a[..at]
            .trim_end()
            .chars()
            .rev()
            .take_while(|ch| ch.is_ascii_digit() || *ch == '.')
            .collect();
        num.chars().rev().collect::<String>().parse().unwrap()
    };
    let (fill, experts) = (figure("% of usable VRAM"), figure("MiB of experts"));
    let (nonexpert, kv) = (figure("MiB of non-expert"), figure("MiB of KV cache"));
    let usable_mib = {
        // the same run with a 1-byte KV cache fits, and reports the usable VRAM
        let mut fits = c.clone();
        fits.timing.as_mut().unwrap().overrides.kv_bytes_per_token = Some(1);
        let w = Workload::new(TraceInput::load(Some(&f.trace)).unwrap(), None).unwrap();
        runner::run(&fits, &w)
            .unwrap()
            .timing_detail
            .unwrap()
            .usable_mib
    };
    let mapped = experts + nonexpert + kv;
    assert!((mapped / usable_mib * 100.0 - fill).abs() < 0.1, "{a}");
    assert!(fill >= 90.0, "{a}");
    let tokens = kv * (1u64 << 20) as f64 / 150e6;
    assert!(
        tokens > 1.0 && (tokens - tokens.round()).abs() < 0.01,
        "{tokens} in {a}"
    );
    let ticked = std::sync::atomic::AtomicU64::new(0);
    let tick = |n: u64| {
        ticked.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    };
    sim::bounded::run_file(&c, &f.trace, None, &tick).expect_err("a refused plan");
    // the streaming pass reads every token; the replay stops after its first window
    let read = ticked.into_inner();
    assert!((18_115..18_115 + 16_384 + 1).contains(&read), "{read}");
}

#[test]
fn learning_from_a_profile_file_matches_the_loaded_profile() {
    // the profile is the long trace: several sequences of unequal lengths with prefill
    // tokens, read round-robin from the file each time a predictor learns
    let (f, long) = (files(false), files(true));
    for predictor in PredictorKind::ALL.into_iter().filter(|k| k.learns()) {
        for phase in [PhaseSel::Decode, PhaseSel::All] {
            let r = retention(PolicyKind::Lru, "25%", Split::Global, Semantics::Group);
            let mut c = cfg("e1", phase, Some(r));
            let t = c.timing.as_mut().unwrap();
            t.predictor = predictor;
            t.window = 2;
            let (a, b) = both(&c, &f.trace, Some(&long.trace));
            assert!(a.contains("\"learns_from\":\"profile\""), "{a}");
            assert_eq!(a, b, "{predictor:?} {phase:?}");
        }
    }
}

#[test]
fn a_damaged_profile_file_is_an_error_that_names_it() {
    let f = files(false);
    let mut bytes = std::fs::read(&f.profile).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x5a;
    let damaged = f.trace.with_file_name("damaged.bin");
    std::fs::write(&damaged, bytes).unwrap();
    let mut c = cfg("e1", PhaseSel::All, None);
    c.timing.as_mut().unwrap().predictor = PredictorKind::Eam;
    let e = sim::bounded::run_file(&c, &f.trace, Some(&damaged), &|_| {}).unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.starts_with("--profile-trace"), "{msg}");
    assert!(msg.contains("damaged.bin"), "{msg}");
}

#[test]
fn kept_step_latencies_match_the_in_memory_path_in_both_forms() {
    // the long trace at batch 1 is 18,115 steps (every step kept); a 21,000-token trace
    // is more steps than MAX_EVERY_STEP (20,000), kept as quantiles
    let mut rng = Pcg64::seed_from_u64(5);
    let mut model = ModelSpec::uniform("tiny", 2, 8, 2);
    model.hidden_size = Some(1024);
    model.expert_ffn = Some(512);
    let longer = Files::write(&model, &[(0, 21_000)], &mut rng);
    for (f, form) in [(files(true), "every-step"), (longer, "quantiles")] {
        for policy in [None, Some(PolicyKind::Belady)] {
            let r = policy.map(|p| retention(p, "30%", Split::Global, Semantics::Group));
            let mut c = cfg("e1", PhaseSel::All, r);
            let t = c.timing.as_mut().unwrap();
            t.step_latencies = true;
            t.predictor = PredictorKind::PrevToken;
            let (a, b) = both(&c, &f.trace, None);
            assert!(a.contains(&format!("\"step_latency\":{{\"form\":\"{form}\"")));
            assert_eq!(a, b, "{c:?}");
        }
    }
}

/// The peak mapped MiB and the usable VRAM MiB of `cfg`'s in-memory run.
fn peak_and_usable(cfg: &RunConfig, trace: &Path) -> (f64, f64) {
    let w = Workload::new(TraceInput::load(Some(trace)).unwrap(), None).unwrap();
    let r = runner::run(cfg, &w).unwrap();
    let t = (r.timing.unwrap(), r.timing_detail.unwrap());
    (t.0.peak_mapped_mib, t.1.usable_mib)
}

#[test]
fn admission_caps_match_the_in_memory_path() {
    let (short, long) = (files(false), files(true));
    let (mut fewer, mut refused) = (0, 0);
    for (f, policy, predictor, batch) in [
        (&short, Some(PolicyKind::Lru), PredictorKind::None, 4),
        (
            &short,
            Some(PolicyKind::Belady),
            PredictorKind::PrevToken,
            3,
        ),
        (&short, None, PredictorKind::NextLayer, 1),
        (&long, Some(PolicyKind::Fifo), PredictorKind::Oracle, 3),
    ] {
        let r = policy.map(|p| {
            let mut r = retention(p, "30%", Split::Global, Semantics::Group);
            r.batching.batch = batch;
            r
        });
        let mut c = cfg("e1", PhaseSel::All, r);
        let t = c.timing.as_mut().unwrap();
        t.predictor = predictor;
        t.window = 2;
        t.step_latencies = true;
        // caps around the uncapped run's peak: admitting all, fewer, or no sequence
        let (peak, usable) = peak_and_usable(&c, &f.trace);
        for factor in [1.01, 0.9999, 0.99, 0.9, 0.5] {
            c.timing.as_mut().unwrap().admission_cap = Some(peak / usable * factor);
            let (a, b) = both(&c, &f.trace, None);
            assert_eq!(a, b, "{c:?}");
            if !a.starts_with('{') {
                refused += 1;
                assert!(a.contains("admits no sequence"), "{a}");
            } else if !a.contains(&format!("\"admitted\":{batch}")) {
                fewer += 1;
            }
        }
    }
    // the cases cover admitting fewer sequences and refusing all
    assert!(fewer > 0 && refused > 0, "{fewer} {refused}");
}

#[test]
fn queues_schedules_and_targets_match_the_in_memory_path() {
    let (short, long) = (files(false), files(true));
    for (f, policy, predictor, batch, queue, schedule, target) in [
        (
            &short,
            PolicyKind::Lru,
            PredictorKind::None,
            2,
            Some(3),
            Schedule::Fifo,
            None,
        ),
        (
            &short,
            PolicyKind::Belady,
            PredictorKind::PrevToken,
            3,
            None,
            Schedule::RouteAware,
            None,
        ),
        (
            &short,
            PolicyKind::StaticPin,
            PredictorKind::Oracle,
            2,
            Some(6),
            Schedule::RouteAware,
            Some(300.0),
        ),
        (
            &short,
            PolicyKind::Belady,
            PredictorKind::None,
            1,
            None,
            Schedule::Fifo,
            Some(3000.0),
        ),
        (
            &short,
            PolicyKind::Arc,
            PredictorKind::NextLayer,
            3,
            None,
            Schedule::Fifo,
            Some(30.0),
        ),
        (
            &long,
            PolicyKind::Lru,
            PredictorKind::PrevToken,
            3,
            Some(5),
            Schedule::RouteAware,
            Some(300.0),
        ),
    ] {
        let mut r = retention(policy, "30%", Split::Global, Semantics::Group);
        r.batching = Batching {
            batch,
            queue,
            schedule,
            ..Batching::default()
        };
        r.target = target.map(|t| (t, 1.0));
        let mut c = cfg("e1", PhaseSel::All, Some(r));
        let t = c.timing.as_mut().unwrap();
        t.predictor = predictor;
        t.window = 2;
        let (a, b) = both(&c, &f.trace, None);
        assert_eq!(a, b, "{c:?}");
        assert_eq!(a.contains("\"schedule\":{"), queue.is_some());
        assert_eq!(a.contains("\"target\":{"), target.is_some());
        if std::ptr::eq(f, &long) {
            continue; // the long trace's capped runs take too long for a test
        }
        // with an admission cap too (every batch size tried is its own route-aware pass)
        let (peak, usable) = peak_and_usable(&c, &f.trace);
        c.timing.as_mut().unwrap().admission_cap = Some(peak / usable * 0.99);
        let (a, b) = both(&c, &f.trace, None);
        assert_eq!(a, b, "{c:?}");
    }
}

#[test]
fn a_capped_routed_targeted_run_in_prompt_chunks_matches_the_in_memory_path() {
    let mut c = cfg("e1", PhaseSel::All, None);
    c.timing.as_mut().unwrap().admission_cap = Some(0.9);
    let mut r = retention(PolicyKind::Lru, "25%", Split::Global, Semantics::Group);
    r.batching.queue = Some(4);
    r.batching.schedule = Schedule::RouteAware;
    r.target = Some((100.0, 1.0));
    c.retention = Some(r);
    c.stepping.prefill_chunk = Some(4);
    let f = files(false);
    let (a, b) = both(&c, &f.trace, None);
    assert_eq!(a, b, "{c:?}");
}
