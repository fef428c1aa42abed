//! The bounded-memory path of stepping runs (`sim::bounded::run_file` with `--verify K` and
//! `--acceptance P` or `--accepted N`, or `--prefill-chunk C`: each sequence's chunks drawn
//! lazily from the trace file, the `steps` block tallied as the plan is recorded) gives, bit
//! for bit, the report of the in-memory path (`sim::runner::run` on the loaded trace):
//! untimed and timed (`--hw`, with the `steps` block's baseline and break-even search),
//! streaming and every kind of retention policy (LRU, Belady/MIN, static pinning, a profile
//! order), batches, route-aware queues, a tokens/s target, an admission cap, and a trace long
//! enough to span several windows of the bounded path.

mod common;

use common::{retention, Files, MIXED_LENS};
use policies::PolicyKind;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use sim::cache::{RetentionConfig, Schedule, Semantics, Split};
use sim::engine::TimingConfig;
use sim::runner::RunConfig;
use sim::verify::{Acceptance, Stepping};
use std::path::Path;
use std::sync::Arc;
use traces::PhaseSel;

/// Both paths' reports of `cfg` as JSON ([`common::both_paths`]).
fn both(cfg: &RunConfig, trace: &Path, profile: Option<&Path>) -> (String, String) {
    common::both_paths(cfg, trace, profile, "\"steps\":{")
}

/// The steppings compared: verified drafts by probability and by count, prompt chunks, both.
fn steppings() -> Vec<(PhaseSel, Stepping)> {
    let st = |verify, acceptance, prefill_chunk| Stepping {
        verify,
        acceptance,
        prefill_chunk,
        seed: 5,
    };
    vec![
        (PhaseSel::Decode, st(2, Acceptance::Probability(0.7), None)),
        (PhaseSel::All, st(3, Acceptance::Fixed(1), None)),
        (PhaseSel::All, st(0, Acceptance::Fixed(0), Some(4))),
        (PhaseSel::Prefill, st(0, Acceptance::Fixed(0), Some(3))),
        (PhaseSel::All, st(2, Acceptance::Probability(0.5), Some(3))),
    ]
}

fn cfg(
    policy: &str,
    (phase, stepping): (PhaseSel, Stepping),
    retention: Option<RetentionConfig>,
) -> RunConfig {
    RunConfig {
        policy: policy.into(),
        phase,
        retention,
        stepping,
        ..RunConfig::default()
    }
}

/// Retention configs of every kind the stepping meets: none (streaming), LRU, Belady and
/// static pinning at a budget, a batch of 3, a route-aware queue, a tokens/s target.
fn retentions() -> Vec<Option<RetentionConfig>> {
    let r = |p| retention(p, "25%", Split::PerLayer, Semantics::Group);
    let mut batched = retention(PolicyKind::Lru, "40%", Split::Global, Semantics::Access);
    batched.batching.batch = 3;
    let mut routed = r(PolicyKind::Belady);
    routed.batching.batch = 2;
    routed.batching.queue = Some(5);
    routed.batching.schedule = Schedule::RouteAware;
    vec![
        None,
        Some(r(PolicyKind::Lru)),
        Some(r(PolicyKind::Belady)),
        Some(r(PolicyKind::StaticPin)),
        Some(batched),
        Some(routed),
    ]
}

#[test]
fn untimed_stepping_matches_the_in_memory_path() {
    let mut rng = Pcg64::seed_from_u64(41);
    let f = Files::write(&common::timed_model(), &MIXED_LENS, &mut rng);
    for s in steppings() {
        for r in retentions() {
            for (mechanism, profile) in [("e1", None), ("e2:hot", Some(f.profile.as_path()))] {
                let c = cfg(mechanism, s, r.clone());
                let (a, b) = both(&c, &f.trace, profile);
                assert_eq!(a, b, "{c:?}");
            }
        }
    }
}

/// h200-linux, the profile the timed tests price with.
fn timing() -> TimingConfig {
    TimingConfig::new("h200-linux", Arc::new(profile::load("h200-linux").unwrap()))
}

#[test]
fn timed_stepping_with_its_baseline_matches_the_in_memory_path() {
    let mut rng = Pcg64::seed_from_u64(43);
    let f = Files::write(&common::timed_model(), &MIXED_LENS, &mut rng);
    let lru = retention(PolicyKind::Lru, "30%", Split::PerLayer, Semantics::Group);
    let mut belady = retention(PolicyKind::Belady, "30%", Split::Global, Semantics::Group);
    belady.batching.batch = 2;
    for s in steppings() {
        for r in [None, Some(lru.clone()), Some(belady.clone())] {
            let mut c = cfg("e1", s, r);
            c.timing = Some(timing());
            let (a, b) = both(&c, &f.trace, None);
            assert_eq!(a, b, "{c:?}");
            if s.1.verify > 0 && s.0 == PhaseSel::Decode {
                // the baseline and the break-even search ran
                assert!(a.contains("\"speedup\":"), "{a}");
                assert!(!a.contains("\"speedup\":null"), "{a}");
            }
        }
    }
}

#[test]
fn a_target_and_an_admission_cap_match_the_in_memory_path() {
    let mut rng = Pcg64::seed_from_u64(47);
    let f = Files::write(&common::timed_model(), &MIXED_LENS, &mut rng);
    let s = steppings()[0];
    let mut target = retention(PolicyKind::Lru, "100%", Split::PerLayer, Semantics::Group);
    target.target = Some((100.0, 1.0));
    let c = cfg("e1", s, Some(target));
    let (a, b) = both(&c, &f.trace, None);
    assert_eq!(a, b, "{c:?}");
    let mut capped = retention(PolicyKind::Lru, "30%", Split::PerLayer, Semantics::Group);
    capped.batching.batch = 3;
    let mut c = cfg("e1", s, Some(capped));
    let mut t = timing();
    t.admission_cap = Some(0.9);
    c.timing = Some(t);
    let (a, b) = both(&c, &f.trace, None);
    assert_eq!(a, b, "{c:?}");
}

#[test]
fn a_trace_spanning_several_windows_matches_the_in_memory_path() {
    // 18,115 tokens make about 72 k groups at one token per step, 33 k at 2.19 tokens per
    // step and batch 1 over 4 layers: with prompt chunks and batch 1, more than one window
    // (65,536 groups) in the untimed and the timed run alike
    let mut rng = Pcg64::seed_from_u64(53);
    let lens = [(5, 9000), (0, 4000), (3, 0), (7, 5100)];
    let f = Files::write(&common::timed_model(), &lens, &mut rng);
    let s = (
        PhaseSel::All,
        Stepping {
            verify: 1,
            acceptance: Acceptance::Fixed(0),
            prefill_chunk: Some(2),
            seed: 9,
        },
    );
    for r in [
        None,
        Some(retention(
            PolicyKind::Belady,
            "25%",
            Split::PerLayer,
            Semantics::Group,
        )),
    ] {
        let c = cfg("e1", s, r.clone());
        let (a, b) = both(&c, &f.trace, None);
        assert_eq!(a, b, "{c:?}");
        let mut c = cfg("e1", s, r);
        c.timing = Some(timing());
        let (a, b) = both(&c, &f.trace, None);
        assert_eq!(a, b, "{c:?}");
    }
}
