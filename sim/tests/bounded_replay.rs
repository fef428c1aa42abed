//! The bounded-memory path of `sim run` (`sim::bounded::run_file`, which streams the trace
//! file) gives, bit for bit, the report of the in-memory path (`sim::runner::run` on the
//! loaded trace): every retention policy, both semantics, both splits, batches, a DRAM tier,
//! mechanisms with one unit per key, packed chunks ordered by a profile or by co-activation
//! (dense and sparse pair counts), regions spanning
//! layers and OS pages, a profile trace, and traces of several sequences of unequal lengths
//! with prefill and decode tokens, and a trace's recorded forward passes.

mod common;

use common::{retention, Files};
use policies::PolicyKind;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use sim::cache::{Batching, Budget, RetentionConfig, Schedule, Semantics, Split, StepSource};
use sim::runner::{self, RunConfig, TraceInput, Workload};
use std::path::Path;
use traces::{ModelSpec, PhaseSel};

/// Both paths' reports of `cfg` as JSON ([`common::both_paths`]).
fn both(cfg: &RunConfig, trace: &Path, profile: Option<&Path>) -> (String, String) {
    common::both_paths(cfg, trace, profile, "")
}

fn files() -> Files {
    let mut rng = Pcg64::seed_from_u64(17);
    let model = ModelSpec::uniform("tiny", 3, 16, 2);
    let lens = [(5, 40), (0, 25), (3, 0), (7, 61)];
    Files::write(&model, &lens, &mut rng)
}

fn cfg(policy: &str, phase: PhaseSel, retention: Option<RetentionConfig>) -> RunConfig {
    let mut c = RunConfig {
        policy: policy.into(),
        phase,
        retention,
        ..RunConfig::default()
    };
    c.sizes.expert_mib = Some(1.5);
    c
}

#[test]
fn every_policy_split_and_semantics_matches_the_in_memory_path() {
    let f = files();
    for policy in PolicyKind::ALL {
        for split in [Split::Global, Split::PerLayer] {
            for semantics in [Semantics::Group, Semantics::Access] {
                for budget in ["25%", "3"] {
                    for phase in [PhaseSel::Decode, PhaseSel::All] {
                        let c = cfg(
                            "e1",
                            phase,
                            Some(retention(policy, budget, split, semantics)),
                        );
                        let (a, b) = both(&c, &f.trace, None);
                        assert_eq!(a, b, "{c:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn batches_tiers_profiles_and_mechanisms_match_the_in_memory_path() {
    let f = files();
    for mechanism in ["e1", "e2:hot", "e4:index", "region:5", "os4k"] {
        for policy in [
            PolicyKind::Lru,
            PolicyKind::Belady,
            PolicyKind::StaticPin,
            PolicyKind::Arc,
        ] {
            for batch in [1, 3] {
                for (dram, profile) in [(None, None), (Some("50%"), Some(&f.profile))] {
                    let split = if mechanism.starts_with("region") {
                        Split::Global
                    } else {
                        Split::PerLayer
                    };
                    let mut r = retention(policy, "30%", split, Semantics::Group);
                    r.batching.batch = batch;
                    r.cache.dram =
                        dram.map(|d| sim::cache::DramConfig::pinned(Budget::parse(d).unwrap()));
                    let c = cfg(mechanism, PhaseSel::All, Some(r));
                    let (a, b) = both(&c, &f.trace, profile.map(|p| p.as_path()));
                    assert_eq!(a, b, "{c:?}");
                }
            }
        }
    }
}

#[test]
fn streaming_runs_and_errors_match_the_in_memory_path() {
    let f = files();
    for mechanism in ["e1", "e2:hot", "region:5", "os4k"] {
        for phase in [PhaseSel::Decode, PhaseSel::Prefill, PhaseSel::All] {
            let (a, b) = both(&cfg(mechanism, phase, None), &f.trace, Some(&f.profile));
            assert_eq!(a, b, "{mechanism} {phase:?}");
        }
    }
    // a budget above the bank is refused by both, in the same words
    let c = cfg(
        "e1",
        PhaseSel::Decode,
        Some(retention(
            PolicyKind::Lru,
            "1000",
            Split::Global,
            Semantics::Group,
        )),
    );
    let (a, b) = both(&c, &f.trace, None);
    assert_eq!(a, b);
    assert!(!a.starts_with('{'), "{a}");
}

#[test]
fn a_corrupt_record_gives_the_streaming_passs_error_while_the_replay_runs_beside_it() {
    // The replay (retention, timed, several tokens per step) reads records the streaming
    // pass has not yet validated; an id out of range in the last record must still give the
    // reader's error, not the replay's.
    let f = files();
    let mut bytes = std::fs::read(&f.trace).unwrap();
    let end = bytes.len() - 4; // the payload's CRC-32 follows it
    bytes[end - 2..end].copy_from_slice(&[0xff, 0xff]);
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.bin");
    std::fs::write(&bad, &bytes).unwrap();
    let error = |c: &RunConfig| {
        let e = sim::bounded::run_file(c, &bad, None, &|_| {}).expect_err("a corrupt trace");
        format!("{e:#}")
    };
    let streaming = error(&cfg("e1", PhaseSel::All, None));
    for policy in [PolicyKind::Lru, PolicyKind::Belady] {
        let r = retention(policy, "25%", Split::Global, Semantics::Group);
        assert_eq!(error(&cfg("e1", PhaseSel::All, Some(r))), streaming);
    }
    let hw = std::sync::Arc::new(profile::load("h200-linux").unwrap());
    let timed = RunConfig {
        timing: Some(sim::engine::TimingConfig::new("h200-linux", hw)),
        ..cfg("e1", PhaseSel::All, None)
    };
    let r = retention(PolicyKind::Lru, "25%", Split::Global, Semantics::Group);
    let timed_lru = RunConfig {
        retention: Some(r),
        ..timed.clone()
    };
    let mut stepped = cfg("e1", PhaseSel::Decode, None);
    stepped.stepping.verify = 2;
    for c in [timed, timed_lru, stepped] {
        assert_eq!(error(&c), streaming, "{c:?}");
    }
    assert!(
        !streaming.contains("changed while it was read"),
        "{streaming}"
    );
}

#[test]
fn coactivation_orders_match_the_in_memory_path() {
    let f = files();
    for mechanism in ["e2:coact", "e3:coact", "e5:coact"] {
        for phase in [PhaseSel::Decode, PhaseSel::All] {
            for profile in [None, Some(f.profile.as_path())] {
                let (a, b) = both(&cfg(mechanism, phase, None), &f.trace, profile);
                assert_eq!(a, b, "{mechanism} {phase:?}");
                let r = retention(PolicyKind::Lru, "30%", Split::PerLayer, Semantics::Group);
                let (a, b) = both(&cfg(mechanism, phase, Some(r)), &f.trace, profile);
                assert_eq!(a, b, "{mechanism} {phase:?}");
            }
        }
    }
    // above 2,048 experts a layer's pairs are counted sparsely, on both paths
    let mut rng = Pcg64::seed_from_u64(3);
    let wide = Files::write(
        &ModelSpec::uniform("wide", 1, 2100, 4),
        &[(0, 300), (2, 50)],
        &mut rng,
    );
    for mechanism in ["e2:coact", "e3:coact"] {
        let (a, b) = both(&cfg(mechanism, PhaseSel::All, None), &wide.trace, None);
        assert_eq!(a, b, "{mechanism}");
    }
}

#[test]
fn queues_and_route_aware_schedules_match_the_in_memory_path() {
    let f = files();
    for policy in [PolicyKind::Lru, PolicyKind::Belady, PolicyKind::StaticPin] {
        for (batch, queue, schedule) in [
            (2, Some(2), Schedule::Fifo),
            (3, Some(7), Schedule::Fifo),
            (3, None, Schedule::RouteAware),
            (2, Some(5), Schedule::RouteAware),
            (4, Some(4), Schedule::RouteAware),
            (3, Some(2), Schedule::RouteAware),
        ] {
            for semantics in [Semantics::Group, Semantics::Access] {
                let mut r = retention(policy, "30%", Split::PerLayer, semantics);
                r.batching = Batching {
                    batch,
                    queue,
                    schedule,
                    ..Batching::default()
                };
                let c = cfg("e1", PhaseSel::All, Some(r));
                let (a, b) = both(&c, &f.trace, None);
                assert_eq!(a, b, "{c:?}");
                // a queue below the batch is refused by both, in the same words
                let refused = queue.is_some_and(|q| q < batch);
                assert_eq!(!a.starts_with('{'), refused, "{a}");
                assert_eq!(a.contains("\"schedule\":{"), queue.is_some() && !refused);
            }
        }
    }
}

#[test]
fn tokens_per_s_targets_match_the_in_memory_path() {
    let f = files();
    let mut found = 0;
    // LRU and Belady are searched by bisection, ARC (not monotone in the budget) by a scan
    for policy in [PolicyKind::Lru, PolicyKind::Belady, PolicyKind::Arc] {
        for target in [20.0, 200.0, 2000.0, 1e9] {
            for (batch, schedule) in [(1, Schedule::Fifo), (3, Schedule::RouteAware)] {
                let mut r = retention(policy, "1", Split::Global, Semantics::Group);
                r.target = Some((target, 1.0));
                r.batching.batch = batch;
                r.batching.schedule = schedule;
                let c = cfg("e1", PhaseSel::All, Some(r));
                let (a, b) = both(&c, &f.trace, None);
                assert_eq!(a, b, "{c:?}");
                found += !a.contains("\"budget_units\":null") as u32;
            }
        }
    }
    assert!(found > 0 && found < 24, "{found}");
}

#[test]
fn a_grid_shares_its_passes_only_with_untimed_one_token_fifo_runs() {
    let mut c = cfg("e4:coact", PhaseSel::Decode, None);
    assert!(sim::bounded::supports(&c));
    let mut r = retention(PolicyKind::Lru, "25%", Split::Global, Semantics::Group);
    c.retention = Some(r.clone());
    assert!(sim::bounded::supports(&c));
    // a queue, or several tokens per step, get passes of their own
    r.batching.queue = Some(4);
    c.retention = Some(r);
    assert!(!sim::bounded::supports(&c));
    c.retention = None;
    c.stepping.verify = 2;
    assert!(!sim::bounded::supports(&c));
}

#[test]
fn a_grid_sharing_its_passes_matches_separate_in_memory_runs() {
    let f = files();
    let mut cfgs = Vec::new();
    for mechanism in ["e1", "e2:hot", "region:5"] {
        cfgs.push(cfg(mechanism, PhaseSel::All, None));
        for policy in [
            PolicyKind::Lru,
            PolicyKind::Belady,
            PolicyKind::StaticPin,
            PolicyKind::S3Fifo,
        ] {
            for budget in ["20%", "50%"] {
                for split in [Split::Global, Split::PerLayer] {
                    for batch in [1, 2] {
                        let mut r = retention(policy, budget, split, Semantics::Group);
                        r.batching.batch = batch;
                        cfgs.push(cfg(mechanism, PhaseSel::All, Some(r)));
                    }
                }
            }
        }
    }
    let text = |r: anyhow::Result<sim::runner::RunReport>| match r {
        Ok(r) => serde_json::to_string(&r).unwrap(),
        Err(e) => format!("{e:#}"),
    };
    for profile in [None, Some(f.profile.as_path())] {
        let load = |p: &Path| TraceInput::load(Some(p)).unwrap();
        let w = Workload::new(load(&f.trace), profile.map(load)).unwrap();
        let memory: Vec<String> = runner::sweep(&cfgs, &w).into_iter().map(text).collect();
        let shared = sim::bounded::grid::sweep_file(&cfgs, &f.trace, profile, &|_| {}).unwrap();
        let shared: Vec<String> = shared.into_iter().map(text).collect();
        assert_eq!(memory, shared);
        // the per-layer split of regions spanning layers is refused, run by run
        assert!(memory
            .iter()
            .any(|m| m.contains("per-layer split needs units inside one layer")));
    }
}

/// The trace of [`files`] with forward passes: sequences join one after another (each pass
/// admits the next waiting one while fewer than 3 run), a prompt taken in chunks of at most
/// 4 rows and each running sequence's next token after, and a sequence leaves when done.
fn with_passes(f: &Files) -> tempfile::TempDir {
    let mut t = traces::read_file(&f.trace).unwrap();
    let left: Vec<(u32, u64)> = t
        .header
        .sequences
        .iter()
        .map(|s| (s.prefill_tokens as u32, s.decode_tokens))
        .collect();
    let (mut prompt, mut decode): (Vec<u32>, Vec<u64>) = left.into_iter().unzip();
    let (mut running, mut waiting): (Vec<usize>, Vec<usize>) =
        (vec![], (0..prompt.len()).collect());
    let mut passes = Vec::new();
    while !running.is_empty() || !waiting.is_empty() {
        if running.len() < 3 && !waiting.is_empty() {
            running.push(waiting.remove(0));
        }
        let mut runs = Vec::new();
        for &s in &running {
            let tokens = if prompt[s] > 0 {
                let c = prompt[s].min(4);
                prompt[s] -= c;
                c
            } else {
                decode[s] -= 1;
                1
            };
            runs.push(traces::PassRun {
                sequence: s as u32,
                tokens,
            });
        }
        passes.push(traces::Pass { runs });
        running.retain(|&s| prompt[s] > 0 || decode[s] > 0);
    }
    t.header.passes = Some(passes);
    let dir = tempfile::tempdir().unwrap();
    traces::write_file(dir.path().join("passes.bin"), &t).unwrap();
    dir
}

#[test]
fn recorded_and_scheduled_forward_passes_match_the_in_memory_path() {
    let f = files();
    let dir = with_passes(&f);
    let trace = dir.path().join("passes.bin");
    let continuous = |max_seqs, max_batched_tokens| {
        StepSource::Continuous(sim::cache::continuous::Continuous {
            max_seqs,
            max_batched_tokens,
        })
    };
    for source in [StepSource::Recorded, continuous(2, 5), continuous(3, 64)] {
        for policy in [
            PolicyKind::Lru,
            PolicyKind::Belady,
            PolicyKind::StaticPin,
            PolicyKind::S3Fifo,
        ] {
            for phase in [PhaseSel::Decode, PhaseSel::Prefill, PhaseSel::All] {
                for (mechanism, split) in [("e1", Split::Global), ("e2:hot", Split::PerLayer)] {
                    let mut r = retention(policy, "30%", split, Semantics::Group);
                    r.batching.source = source;
                    let c = cfg(mechanism, phase, Some(r));
                    let expect = format!("\"batching\":\"{}\"", source.name());
                    let (a, b) = common::both_paths(&c, &trace, None, &expect);
                    assert_eq!(a, b, "{c:?}");
                }
            }
        }
    }
    // the trace without passes: continuous passes alike, recorded ones refused alike
    let mut r = retention(PolicyKind::Belady, "30%", Split::Global, Semantics::Group);
    r.batching.source = continuous(2, 7);
    let c = cfg("e1", PhaseSel::All, Some(r));
    let (a, b) = common::both_paths(&c, &f.trace, None, "\"max_batched_tokens\":7");
    assert_eq!(a, b);
    let mut r = retention(PolicyKind::Lru, "30%", Split::Global, Semantics::Group);
    r.batching.source = StepSource::Recorded;
    let (a, b) = both(&cfg("e1", PhaseSel::All, Some(r)), &f.trace, None);
    assert!(
        a.contains("this trace has none") && b.contains("this trace has none"),
        "{a}\n{b}"
    );
}
