//! Property tests of the cache regime on random traces, with a naive second implementation
//! of LRU, FIFO, LFU and MIN (linear scans over the resident set) as the independent method.

#[path = "cache_props/curves.rs"]
mod curves;

use policies::retention::PolicyKind;
use policies::{UnitInfo, UnitMap};
use proptest::prelude::*;
use sim::cache::{
    run_grid, AccessStream, Batching, Budget, CacheConfig, Schedule, Semantics, Split, Workload,
};
use traces::{ModelSpec, PhaseSel, Provenance, Trace};

/// A decode-only trace: `seqs[s][t][m]` is the selection of sequence s, token t, layer m.
fn trace(layers: usize, experts: u16, k: u16, seqs: &[Vec<Vec<Vec<u16>>>]) -> Trace {
    let model = ModelSpec::uniform("random", layers, experts, k);
    Trace::decode_only(model, Provenance::default(), seqs).expect("generated trace is valid")
}

/// One unit per expert (e1), 1 MiB useful in a 2 MiB commit.
fn e1(layers: usize, experts: usize) -> UnitMap {
    let n = layers * experts;
    UnitMap {
        spec: "e1".into(),
        paging: policies::Paging::Vmm,
        expert_bytes: 1 << 20,
        granule_bytes: 2 << 20,
        key_first: (0..n as u32).collect(),
        key_count: vec![1; n],
        units: (0..n)
            .map(|u| UnitInfo {
                useful_bytes: 1 << 20,
                committed_bytes: 2 << 20,
                experts: 1,
                first_moe_layer: (u / experts) as u32,
                last_moe_layer: (u / experts) as u32,
            })
            .collect(),
    }
}

/// Random traces: 1-3 layers, 3-8 experts, top-k 1-3, 1-3 sequences of 1-10 tokens.
fn arb_trace() -> impl Strategy<Value = (Trace, usize, usize)> {
    (1usize..=3, 3u16..=8, 1u16..=3, 1usize..=3).prop_flat_map(|(layers, experts, k, nseq)| {
        let sel = Just((0..experts).collect::<Vec<u16>>())
            .prop_shuffle()
            .prop_map(move |v| v[..k as usize].to_vec());
        let token = proptest::collection::vec(sel, layers);
        let seq = proptest::collection::vec(token, 1..=10);
        proptest::collection::vec(seq, nseq)
            .prop_map(move |seqs| (trace(layers, experts, k, &seqs), layers, experts as usize))
    })
}

fn cfg(policy: PolicyKind, units: u64, split: Split, semantics: Semantics) -> CacheConfig {
    CacheConfig {
        policy,
        budget: Budget::Units(units),
        split,
        semantics,
        dram: None,
        seed: 3,
    }
}

/// Naive page-ins of LRU / FIFO / LFU / MIN over a stream, one global pool: the definitions
/// of docs/DESIGN.md written as scans. MIN ties: the higher unit id goes first.
fn naive(kind: PolicyKind, cap: usize, s: &AccessStream, sem: Semantics) -> u64 {
    let n = s.num_units;
    let (mut last, mut inserted, mut count) = (vec![0usize; n], vec![0usize; n], vec![0u64; n]);
    let mut resident: Vec<u32> = Vec::new();
    let mut page_ins = 0;
    let next_after = |u: u32, pos: usize| -> usize {
        (pos + 1..s.units.len())
            .find(|&p| s.units[p] == u)
            .unwrap_or(usize::MAX)
    };
    let pick = |resident: &[u32],
                cands: &[u32],
                pos: usize,
                last: &[usize],
                ins: &[usize],
                cnt: &[u64]|
     -> u32 {
        let _ = resident;
        *match kind {
            PolicyKind::Lru => cands.iter().min_by_key(|&&u| last[u as usize]),
            PolicyKind::Fifo => cands.iter().min_by_key(|&&u| ins[u as usize]),
            PolicyKind::Lfu => cands
                .iter()
                .min_by_key(|&&u| (cnt[u as usize], last[u as usize])),
            PolicyKind::Belady => cands.iter().max_by_key(|&&u| (next_after(u, pos), u)),
            _ => unreachable!("naive covers lru, fifo, lfu, belady"),
        }
        .unwrap()
    };
    let mut pos = 0usize;
    for g in 0..s.num_groups() {
        let group = s.group(g);
        for &u in group {
            count[u as usize] += 1;
            last[u as usize] = pos;
            if !resident.contains(&u) {
                page_ins += 1;
                inserted[u as usize] = pos;
                resident.push(u);
            }
            if sem == Semantics::Access {
                while resident.len() > cap {
                    let v = pick(&resident, &resident.clone(), pos, &last, &inserted, &count);
                    resident.retain(|&x| x != v);
                }
            }
            pos += 1;
        }
        if sem == Semantics::Group {
            while resident.len() > cap {
                let open: Vec<u32> = resident
                    .iter()
                    .copied()
                    .filter(|u| !group.contains(u))
                    .collect();
                let cands = if open.is_empty() {
                    resident.clone()
                } else {
                    open
                };
                let v = pick(&resident, &cands, pos - 1, &last, &inserted, &count);
                resident.retain(|&x| x != v);
            }
        }
    }
    page_ins
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn matches_naive_definitions((t, layers, experts) in arb_trace(), frac in 1u64..=100, access in any::<bool>()) {
        let map = e1(layers, experts);
        let n = (layers * experts) as u64;
        let units = (frac * n).div_ceil(100).max(1);
        let sem = if access { Semantics::Access } else { Semantics::Group };
        let w = Workload::build(&t, &map, PhaseSel::Decode, Batching::default(), None).unwrap();
        for kind in [PolicyKind::Lru, PolicyKind::Fifo, PolicyKind::Lfu, PolicyKind::Belady] {
            let ours = w.run(&map, &cfg(kind, units, Split::Global, sem)).unwrap().cache.page_ins;
            prop_assert_eq!(ours, naive(kind, units as usize, &w.stream, sem), "{} budget {}", kind, units);
        }
    }

    #[test]
    fn belady_is_a_lower_bound_and_budgets_hold((t, layers, experts) in arb_trace(), frac in 1u64..=100, access in any::<bool>(), per_layer in any::<bool>(), batch in 1usize..=3) {
        let map = e1(layers, experts);
        let n = (layers * experts) as u64;
        let units = (frac * n).div_ceil(100).max(1);
        let sem = if access { Semantics::Access } else { Semantics::Group };
        let split = if per_layer { Split::PerLayer } else { Split::Global };
        let batching = Batching { batch, queue: None, schedule: Schedule::Fifo, ..Batching::default() };
        let w = Workload::build(&t, &map, PhaseSel::Decode, batching, None).unwrap();
        let bound = w.run(&map, &cfg(PolicyKind::Belady, units, split, sem)).unwrap().cache.page_ins;
        // Every registered policy, from the registry.
        for kind in PolicyKind::ALL {
            let c = cfg(kind, units, split, sem);
            // Step through the stream and check the budget after every group (group
            // semantics) or every access (access semantics: one access per call, which is
            // the same run since nothing is protected).
            let (mut sim, pool_of) = w.simulator(&map, &c).unwrap();
            let pools = *pool_of.iter().max().unwrap() as usize + 1;
            for g in 0..w.stream.num_groups() {
                let group = w.stream.group(g);
                let calls: Vec<&[u32]> = if access {
                    group.chunks(1).collect()
                } else {
                    vec![group]
                };
                for call in calls {
                    sim.group(call);
                    for p in 0..pools {
                        prop_assert!(sim.pool_len(p) <= sim.pool_capacity(p), "{} over budget", kind);
                    }
                }
            }
            sim.add_tokens(w.stream.tokens);
            let stepped = sim.report();
            let whole = w.run(&map, &c).unwrap().cache;
            prop_assert_eq!(&stepped, &whole);
            prop_assert!(whole.page_ins <= whole.accesses);
            // Pins are resident for free (not page-ins), so the bound is over the policies
            // that start empty: those that need no profile.
            if !kind.needs_profile() {
                prop_assert!(bound <= whole.page_ins, "belady {} > {} {}", bound, kind, whole.page_ins);
            }
        }
    }

    #[test]
    fn static_pin_whole_bank_has_no_page_ins((t, layers, experts) in arb_trace(), access in any::<bool>()) {
        let map = e1(layers, experts);
        let sem = if access { Semantics::Access } else { Semantics::Group };
        let w = Workload::build(&t, &map, PhaseSel::Decode, Batching::default(), None).unwrap();
        let mut c = cfg(PolicyKind::StaticPin, 0, Split::Global, sem);
        c.budget = Budget::Fraction { num: 100, den: 100 };
        let r = w.run(&map, &c).unwrap().cache;
        prop_assert_eq!(r.page_ins, 0);
        prop_assert_eq!(r.evictions, 0);
    }

    #[test]
    fn stack_policies_are_monotone_in_the_budget((t, layers, experts) in arb_trace(), access in any::<bool>()) {
        // The claim behind the binary search of --target-tokens-per-s.
        let map = e1(layers, experts);
        let sem = if access { Semantics::Access } else { Semantics::Group };
        let w = Workload::build(&t, &map, PhaseSel::Decode, Batching::default(), None).unwrap();
        for kind in PolicyKind::ALL.into_iter().filter(|k| k.monotone_in_budget()) {
            let mut prev = u64::MAX;
            for units in 1..=(layers * experts) as u64 {
                let p = w.run(&map, &cfg(kind, units, Split::Global, sem)).unwrap().cache.page_ins;
                prop_assert!(p <= prev, "{} budget {}: {} > {}", kind, units, p, prev);
                prev = p;
            }
        }
    }

    #[test]
    fn grid_is_identical_across_thread_counts((t, layers, experts) in arb_trace(), queue in 3usize..=5) {
        let map = e1(layers, experts);
        let batching = Batching { batch: 2, queue: Some(queue), schedule: Schedule::RouteAware, ..Batching::default() };
        let w = Workload::build(&t, &map, PhaseSel::Decode, batching, None).unwrap();
        let mut cfgs = Vec::new();
        for kind in PolicyKind::ALL {
            for split in [Split::Global, Split::PerLayer] {
                for units in [1, (layers * experts / 2).max(1) as u64] {
                    let mut c = cfg(kind, units, split, Semantics::Group);
                    c.dram = Some(sim::cache::DramConfig::pinned(Budget::Units(2)));
                    cfgs.push(c);
                }
            }
        }
        let on = |threads| {
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
                .install(|| run_grid(&w, &map, &cfgs))
                .into_iter().map(|r| r.unwrap()).collect::<Vec<_>>()
        };
        let one = on(1);
        prop_assert_eq!(&one, &on(3));
        // Tiers classify every page-in exactly once.
        for r in &one {
            let t = r.tiers.as_ref().unwrap();
            prop_assert_eq!(t.dram_hits + t.ssd_compulsory + t.ssd_capacity, r.cache.page_ins);
        }
    }
}
