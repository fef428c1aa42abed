//! Several tokens per step on tiny hand-made traces: the chunks a verify step takes, the union
//! its MoE layer reads, the page-ins it causes, prompt chunks evicting the decode working set,
//! and the expert kernel priced over slots and distinct experts. Every expected value is
//! worked out in the comments.

mod common;

use policies::PolicyKind;
use sim::cache::stream::round_robin_chunks;
use sim::cache::{Batching, Budget, CacheConfig, RetentionConfig, Semantics, Split};
use sim::engine::{replay, EngineOptions, Plans};
use sim::model_profile::ComputeModel;
use sim::runner::{self, RunConfig};
use sim::verify::{Acceptance, Stepping};
use traces::{Phase, PhaseSel, TokenBlock, Trace};

/// One layer of 6 experts, top-2: the decode tokens t0..t6 of the worked examples.
fn seven_tokens() -> Trace {
    let sel = [[0, 1], [1, 2], [2, 3], [0, 4], [4, 5], [0, 1], [3, 5]];
    let tokens: Vec<Vec<Vec<u16>>> = sel.iter().map(|s| vec![s.to_vec()]).collect();
    common::trace(1, 6, &tokens)
}

/// `decode` preceded by the prompt tokens `prompt` (one layer, 6 experts, top-2).
fn with_prompt(prompt: &[[u16; 2]], decode: &[[u16; 2]]) -> Trace {
    let tokens: Vec<Vec<Vec<u16>>> = decode.iter().map(|s| vec![s.to_vec()]).collect();
    let mut t = common::trace(1, 6, &tokens);
    t.header.sequences[0].prefill_tokens = prompt.len() as u64;
    t.sequences[0].prefill = TokenBlock {
        ids: prompt.iter().flatten().copied().collect(),
        weights: None,
    };
    t.check().unwrap();
    t
}

fn fixed(verify: u32, accepted: u32) -> Stepping {
    Stepping {
        verify,
        acceptance: Acceptance::Fixed(accepted),
        ..Stepping::default()
    }
}

/// e1 (one 2 MiB expert per unit) under LRU with a budget of `units` units.
fn lru(units: u64, stepping: Stepping, phase: PhaseSel) -> RunConfig {
    RunConfig {
        phase,
        retention: Some(RetentionConfig {
            cache: CacheConfig {
                policy: PolicyKind::Lru,
                budget: Budget::Units(units),
                split: Split::Global,
                semantics: Semantics::Group,
                dram: None,
                seed: 0,
            },
            batching: Batching::default(),
            target: None,
        }),
        stepping,
        ..common::cfg("e1", 2.0)
    }
}

#[test]
fn a_verify_step_takes_the_next_k_plus_1_tokens_and_advances_by_the_accepted_drafts() {
    let t = seven_tokens();
    // K = 2, one draft accepted per step: chunks t0..t2, t2..t4, t4..t6, then t6 alone
    let got: Vec<(u32, u32, u32)> = round_robin_chunks(&t, PhaseSel::Decode, &fixed(2, 1))
        .iter()
        .map(|r| (r.token, r.len, r.produced))
        .collect();
    assert_eq!(got, [(0, 3, 2), (2, 3, 2), (4, 3, 2), (6, 1, 1)]);
    // K = 0 is one token per step, as the requests of a run without stepping
    let one: Vec<(u32, u32, u32)> = round_robin_chunks(&t, PhaseSel::Decode, &Stepping::default())
        .iter()
        .map(|r| (r.token, r.len, r.produced))
        .collect();
    assert_eq!(one, (0..7).map(|i| (i, 1, 1)).collect::<Vec<_>>());
    // P = 1 accepts every draft: K + 1 tokens per step, the last chunk what is left
    let all = Stepping {
        verify: 2,
        acceptance: Acceptance::Probability(1.0),
        ..Stepping::default()
    };
    let got: Vec<(u32, u32, u32)> = round_robin_chunks(&t, PhaseSel::Decode, &all)
        .iter()
        .map(|r| (r.token, r.len, r.produced))
        .collect();
    assert_eq!(got, [(0, 3, 3), (3, 3, 3), (6, 1, 1)]);
    // P = 0 rejects every draft: still K + 1 tokens read, one produced
    let none = Stepping {
        acceptance: Acceptance::Probability(0.0),
        ..all
    };
    let chunks = round_robin_chunks(&t, PhaseSel::Decode, &none);
    assert_eq!(chunks.len(), 7);
    assert!(chunks.iter().all(|r| r.produced == 1));
    assert_eq!(chunks[5].len, 2);
}

#[test]
fn drafts_accepted_at_random_depend_on_the_seed_only() {
    let t = seven_tokens();
    let s = |seed| Stepping {
        verify: 3,
        acceptance: Acceptance::Probability(0.6),
        prefill_chunk: None,
        seed,
    };
    let a = round_robin_chunks(&t, PhaseSel::Decode, &s(5));
    assert_eq!(a, round_robin_chunks(&t, PhaseSel::Decode, &s(5)));
    // every chunk produces 1 ..= its length and the produced tokens cover the trace once
    assert!(a.iter().all(|r| (1..=r.len).contains(&r.produced)));
    assert_eq!(a.iter().map(|r| r.produced).sum::<u32>(), 7);
    for w in a.windows(2) {
        assert_eq!(w[1].token, w[0].token + w[0].produced);
    }
    // some seed in a handful draws other acceptances
    assert!((0..8).any(|seed| round_robin_chunks(&t, PhaseSel::Decode, &s(seed)) != a));
}

#[test]
fn a_verify_step_reads_and_pages_in_the_union_of_its_chunk() {
    // K = 2, one accepted per step: the chunks {t0 t1 t2}, {t2 t3 t4}, {t4 t5 t6}, {t6} read
    // the unions {0,1,2,3}, {2,3,0,4,5}, {4,5,0,1,3}, {3,5}: 4, 5, 5, 2 experts (mean 4;
    // p50 the 2nd of 2, 4, 5, 5 = 4; p99 5) of 6, 6, 6, 2 slots (mean 5).
    let w = common::workload(seven_tokens());
    let r = runner::run(&lru(6, fixed(2, 1), PhaseSel::Decode), &w).unwrap();
    let s = r.steps.as_ref().unwrap();
    assert_eq!((s.decode_chunks, s.decode_tokens), (4, 7));
    assert_eq!(s.tokens_per_step, 1.75);
    assert_eq!(s.expected_tokens_per_step, 2.0);
    assert_eq!(s.union_mean, 4.0);
    assert_eq!((s.union_p50, s.union_p99), (4, 5));
    assert_eq!(s.slots_mean, 5.0);
    // the whole bank fits: only first touches (4 in step 1, experts 4 and 5 in step 2)
    assert_eq!(s.decode_page_ins, 6);
    assert_eq!(r.cache.as_ref().unwrap().page_ins, 6);
    assert_eq!(r.cache.as_ref().unwrap().tokens, 7);

    // a budget of 4 units, LRU, group semantics:
    // step 1 pages in 0,1,2,3 (4). Step 2 reads 2,3,0,4,5: pages in 4,5 (2); 6 resident:
    // evict 1 (the only unit outside the group), then the group's least recent, 2.
    // Step 3 reads 4,5,0,1,3 over {3,0,4,5}: pages in 1 (1); evict the least recent, 4.
    // Step 4 reads 3,5: hits. 7 page-ins.
    let r = runner::run(&lru(4, fixed(2, 1), PhaseSel::Decode), &w).unwrap();
    assert_eq!(r.steps.as_ref().unwrap().decode_page_ins, 7);
    assert_eq!(r.cache.as_ref().unwrap().page_ins, 7);
    // one token per step under the same budget: 2 + 1 + 1 + 1 + 1 + 1 + 1 = 8 page-ins
    // (t0 2; t1 pages 2; t2 pages 3; t3 pages 4, evicts 1; t4 pages 5, evicts 2; t5 pages
    // 1, evicts 3; t6 pages 3, evicts 4), and no steps block
    let r = runner::run(&lru(4, Stepping::default(), PhaseSel::Decode), &w).unwrap();
    assert_eq!(r.cache.as_ref().unwrap().page_ins, 8);
    assert!(r.steps.is_none());
}

#[test]
fn a_prompt_chunk_evicts_the_decode_working_set() {
    // prompt p0..p3 = [0,1] [2,3] [4,5] [0,2], then decode [0,1] [0,1]; budget 4, LRU.
    let t = with_prompt(&[[0, 1], [2, 3], [4, 5], [0, 2]], &[[0, 1], [0, 1]]);
    let w = common::workload(t);
    let chunk = |c| Stepping {
        prefill_chunk: c,
        ..Stepping::default()
    };
    // one chunk of 4: the union 0..5 in order, 6 page-ins; the group's least recent 0 and 1
    // are evicted; decode then pages 0 and 1 back in (evicting 2 and 3): 2 decode page-ins
    let r = runner::run(&lru(4, chunk(Some(4)), PhaseSel::All), &w).unwrap();
    let s = r.steps.as_ref().unwrap();
    assert_eq!(
        (s.prefill_steps, s.prefill_page_ins, s.decode_page_ins),
        (1, 6, 2)
    );
    assert_eq!(s.prefill_union_mean, Some(6.0));
    assert_eq!((s.decode_chunks, s.decode_tokens), (2, 2));
    // chunks of 2: {0,1,2,3} (4 page-ins), then 4,5,0,2 (pages 4 and 5, evicts 1 and 3);
    // decode [0,1] pages 1 in (evicting 4, the least recent): 1 decode page-in
    let r = runner::run(&lru(4, chunk(Some(2)), PhaseSel::All), &w).unwrap();
    let s = r.steps.as_ref().unwrap();
    assert_eq!(
        (s.prefill_steps, s.prefill_page_ins, s.decode_page_ins),
        (2, 6, 1)
    );
    assert_eq!(s.prefill_union_mean, Some(4.0));
    // a chunk of 1 is the prompt token by token: the same page-ins as without the flag
    // (2 + 2 + 2 + 1 in the prompt, 1 in decode)
    let r = runner::run(&lru(4, chunk(Some(1)), PhaseSel::All), &w).unwrap();
    let s = r.steps.as_ref().unwrap();
    assert_eq!(
        (s.prefill_steps, s.prefill_page_ins, s.decode_page_ins),
        (4, 7, 1)
    );
    let plain = runner::run(&lru(4, Stepping::default(), PhaseSel::All), &w).unwrap();
    assert_eq!(plain.cache.as_ref().unwrap().page_ins, 8);
    assert_eq!(plain.cache, r.cache);
}

/// Timing on the shipped H200 profile; the hand-made traces have no geometry: no non-expert
/// weights, no KV cache.
fn h200() -> sim::engine::TimingConfig {
    let mut t = sim::engine::TimingConfig::new(
        "h200-linux",
        std::sync::Arc::new(profile::load("h200-linux").unwrap()),
    );
    t.overrides.nonexpert_mib = Some(0.0);
    t.overrides.kv_bytes_per_token = Some(0);
    t
}

#[test]
fn k_zero_gives_the_same_report_as_no_stepping() {
    let w = common::workload(seven_tokens());
    let mut timed = lru(3, Stepping::default(), PhaseSel::Decode);
    timed.timing = Some(h200());
    let off = runner::run(&timed, &w).unwrap();
    let zero = RunConfig {
        stepping: Stepping {
            seed: 9,
            ..fixed(0, 0)
        },
        ..timed.clone()
    };
    let k0 = runner::run(&zero, &w).unwrap();
    assert_eq!(
        serde_json::to_string(&off).unwrap(),
        serde_json::to_string(&k0).unwrap()
    );
}

#[test]
fn the_expert_kernel_prices_repeated_slots_at_the_repeat_rate() {
    // one group of 2 distinct experts over 6 slots (3 tokens x top-2): 20 fixed + 2 x 10 per
    // distinct expert + 4 x 3 per repeated slot = 52 µs of expert compute; nothing to page in
    let p = profile::load("h200-linux").unwrap();
    let cost = sim::cost::CostModel::new(&p, policies::Paging::Vmm, Default::default()).unwrap();
    let map = unit_map(4);
    let ks = seven_tokens().keyspace();
    let c = ComputeModel {
        expert_us: 10.0,
        expert_group_fixed_us: 20.0,
        expert_repeat_us: 3.0,
        ..ComputeModel::zero()
    };
    let mut plans = Plans::new(1);
    plans.begin_chunk_step(&[0], 3, 3, false);
    plans.push_group_slots(0, &[0, 1], 6, [&[][..], &[], &[]]);
    let host = cost.host_sync_us;
    let r = replay(&plans, &map, &ks, &cost, &c, EngineOptions::default()).unwrap();
    assert!((r.step_parts[0].expert_us - 52.0).abs() < 1e-9);
    assert!((r.step_us[0] - (host + 52.0)).abs() < 1e-9);
    // one slot per key (one token): no repeat term
    let mut one = Plans::new(1);
    one.begin_step(1, 1);
    one.push_group(0, &[0, 1], &[], &[], &[]);
    let r = replay(&one, &map, &ks, &cost, &c, EngineOptions::default()).unwrap();
    assert!((r.step_parts[0].expert_us - 40.0).abs() < 1e-9);
}

#[test]
fn the_h200_compute_model_reads_the_repeat_rate_from_the_profile() {
    // the profile file, read as JSON apart from the profile crate (MB/s = bytes per µs)
    let text = include_str!("../../profile/profiles/h200-linux.json");
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let rate = |n: &str| v["constants"][n]["value"].as_f64().unwrap();
    let p = profile::load("h200-linux").unwrap();
    let bytes = 2_611_200u64;
    let model = traces::ModelSpec::uniform("m", 2, 64, 8);
    let overrides = sim::model_profile::ComputeOverrides {
        nonexpert_us: Some(0.0),
        nonexpert_mib: Some(0.0),
        kv_bytes_per_token: Some(0),
        ..Default::default()
    };
    let c = ComputeModel::new(Default::default(), &model, bytes, &p, &overrides).unwrap();
    let want = bytes as f64 / rate("expert_kernel_repeat_bandwidth");
    assert!((c.expert_repeat_us - want).abs() < 1e-12);
    assert!((c.expert_us - bytes as f64 / rate("expert_kernel_bandwidth")).abs() < 1e-12);
    // --expert-us overrides the whole surface: no repeat term
    let o = sim::model_profile::ComputeOverrides {
        expert_us: Some(5.0),
        ..overrides
    };
    let c = ComputeModel::new(Default::default(), &model, bytes, &p, &o).unwrap();
    assert_eq!((c.expert_us, c.expert_repeat_us), (5.0, 0.0));
}

/// One 2 MiB unit per key of one layer.
fn unit_map(n: usize) -> policies::UnitMap {
    let mib = 1u64 << 20;
    policies::UnitMap {
        spec: "e1".into(),
        paging: policies::Paging::Vmm,
        expert_bytes: 2 * mib,
        granule_bytes: 2 * mib,
        key_first: (0..n as u32).collect(),
        key_count: vec![1; n],
        units: vec![
            policies::UnitInfo {
                useful_bytes: 2 * mib,
                committed_bytes: 2 * mib,
                experts: 1,
                first_moe_layer: 0,
                last_moe_layer: 0,
            };
            n
        ],
    }
}

#[test]
fn the_phase_of_each_chunk_follows_the_trace() {
    let t = with_prompt(&[[0, 1], [2, 3], [4, 5]], &[[0, 1], [1, 2]]);
    let s = Stepping {
        verify: 1,
        acceptance: Acceptance::Fixed(1),
        prefill_chunk: Some(2),
        seed: 0,
    };
    let got: Vec<(Phase, u32, u32, u32)> = round_robin_chunks(&t, PhaseSel::All, &s)
        .iter()
        .map(|r| (r.phase, r.token, r.len, r.produced))
        .collect();
    // the prompt in chunks of 2 (the last of 1), then one verify step of both decode tokens
    assert_eq!(
        got,
        [
            (Phase::Prefill, 0, 2, 2),
            (Phase::Prefill, 2, 1, 1),
            (Phase::Decode, 0, 2, 2)
        ]
    );
}

#[test]
fn the_break_even_acceptance_comes_from_the_k0_run_of_the_same_setting() {
    let w = common::workload(seven_tokens());
    let cfg = |stepping| RunConfig {
        timing: Some(h200()),
        ..lru(3, stepping, PhaseSel::Decode)
    };
    let k2 = runner::run(&cfg(fixed(2, 1)), &w).unwrap();
    let k0 = runner::run(&cfg(Stepping::default()), &w).unwrap();
    let s = k2.steps.as_ref().unwrap();
    let (t2, t0) = (k2.timing.as_ref().unwrap(), k0.timing.as_ref().unwrap());
    assert_eq!(s.baseline_tokens_per_s, Some(t0.tokens_per_s));
    assert!((s.speedup.unwrap() - t2.tokens_per_s / t0.tokens_per_s).abs() < 1e-12);
    // decode only: the mean step times of the two runs' timing blocks
    let ratio = t2.step_ms_mean / t0.step_ms_mean;
    assert!((s.step_cost_ratio.unwrap() - ratio).abs() < 1e-9);
    assert_eq!(s.repeat_slots_priced, Some(true));
    // the break-even, checked by running the setting at it and 1/128 below it
    let at = |p: f64| {
        let c = cfg(Stepping {
            verify: 2,
            acceptance: Acceptance::Probability(p),
            ..Stepping::default()
        });
        runner::run(&c, &w).unwrap().timing.unwrap().tokens_per_s
    };
    let base = t0.tokens_per_s;
    match s.break_even_acceptance {
        Some(p) if p > 0.0 => {
            assert!(at(p) >= base && at(p - 1.0 / 128.0) < base, "{p}");
        }
        Some(_) => assert!(at(0.0) >= base),
        None => assert!(at(1.0) < base),
    }
}
