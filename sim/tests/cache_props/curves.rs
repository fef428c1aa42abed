//! The exact curves of `sim::curve` against the cache-regime simulator run once per budget,
//! at EVERY budget from one unit to the bank: LRU and Belady/MIN, global and per-layer
//! splits, group and access semantics, on the bundled granite traces and generated traces
//! (batched too, so that groups are larger than the smallest budgets).

use policies::retention::PolicyKind;
use policies::UnitMap;
use sim::cache::budget::split_per_layer;
use sim::cache::{run_grid, Batching, Budget, CacheConfig, Semantics, Split, Workload};
use sim::curve::{of_workload, PolicyCurve};
use std::collections::BTreeMap;
use traces::{PhaseSel, Trace};

const KINDS: [PolicyKind; 2] = [PolicyKind::Lru, PolicyKind::Belady];

fn cfg(policy: PolicyKind, units: usize, split: Split, semantics: Semantics) -> CacheConfig {
    CacheConfig {
        policy,
        budget: Budget::Units(units as u64),
        split,
        semantics,
        dram: None,
        seed: 0,
    }
}

/// Page-ins of one run per budget `1..=units` (the per-layer split: one run per distinct
/// vector of layer shares, the budgets sharing it given its page-ins).
fn per_budget(
    w: &Workload,
    map: &UnitMap,
    kind: PolicyKind,
    split: Split,
    semantics: Semantics,
) -> Vec<u64> {
    let n = map.num_units();
    let layers = sim::cache::driver::pool_layout(map, split).unwrap();
    let mut sizes = vec![0usize; *layers.iter().max().unwrap() as usize + 1];
    for &p in &layers {
        sizes[p as usize] += 1;
    }
    let shares = |b: usize| match split {
        Split::Global => vec![b],
        Split::PerLayer => split_per_layer(&Budget::Units(b as u64), b, n, &sizes),
    };
    let mut first: BTreeMap<Vec<usize>, usize> = BTreeMap::new();
    for b in 1..=n {
        first.entry(shares(b)).or_insert(b);
    }
    let budgets: Vec<usize> = first.values().copied().collect();
    let cfgs: Vec<CacheConfig> = budgets
        .iter()
        .map(|&b| cfg(kind, b, split, semantics))
        .collect();
    let runs = run_grid(w, map, &cfgs);
    let by_shares: BTreeMap<Vec<usize>, u64> = budgets
        .iter()
        .zip(runs)
        .map(|(&b, r)| (shares(b), r.unwrap().cache.page_ins))
        .collect();
    (1..=n).map(|b| by_shares[&shares(b)]).collect()
}

/// Curves equal per-budget runs at every budget, every policy, split and semantics.
fn check(label: &str, trace: &Trace, map: &UnitMap, batch: usize) {
    let batching = Batching {
        batch,
        ..Batching::default()
    };
    let w = Workload::build(trace, map, PhaseSel::Decode, batching, None).unwrap();
    for semantics in [Semantics::Group, Semantics::Access] {
        for split in [Split::Global, Split::PerLayer] {
            let curves: Vec<PolicyCurve> = of_workload(&w, map, &KINDS, split, semantics).unwrap();
            for (kind, curve) in KINDS.iter().zip(&curves) {
                let runs = per_budget(&w, map, *kind, split, semantics);
                assert_eq!(
                    curve.page_ins, runs,
                    "{label}: {kind} {split:?} {semantics:?} batch {batch}"
                );
            }
        }
    }
}

fn map_of(mechanism: &str, trace: Trace) -> (Trace, UnitMap) {
    let input = sim::runner::TraceInput {
        label: "t".into(),
        trace,
    };
    let w = sim::runner::Workload::new(input, None).unwrap();
    let cfg = sim::runner::RunConfig {
        policy: mechanism.into(),
        ..Default::default()
    };
    let (map, _) = sim::runner::build_units(&cfg, &w).unwrap();
    (w.trace.trace, map)
}

#[test]
fn curves_equal_per_budget_runs_on_granite() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/data/granite");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the bundled granite traces: {files:?}");
    // One unit per expert (768 units) on the prose trace, 2 and 4 experts a unit (by
    // popularity: 384 and 192 units) on the others, to bound the per-budget runs' time.
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let mechanism = match name.as_str() {
            "prose.bin" => "e1",
            "all.bin" => "e2",
            _ => "e4",
        };
        let (trace, map) = map_of(mechanism, traces::read_file(f).unwrap());
        check(&format!("{name} {mechanism}"), &trace, &map, 1);
    }
    // A batch of 3: groups of up to 24 units of 4 experts, above the smallest budgets.
    let (trace, map) = map_of("e4", traces::read_file(&files[0]).unwrap());
    check("batch 3", &trace, &map, 3);
}

#[test]
fn curves_equal_per_budget_runs_on_generated_traces() {
    use traces::gen::{generate_trace, GenParams};
    for (seed, skew, locality, batch) in
        [(1u64, 1.0, 0.3, 1usize), (2, 0.4, 0.7, 4), (3, 1.5, 0.0, 2)]
    {
        let mut model = traces::ModelSpec::uniform("gen", 3, 24, 4);
        model.hidden_size = Some(1024);
        model.expert_ffn = Some(512);
        let params = GenParams {
            preset: None,
            skew: vec![skew],
            locality: vec![locality],
            cross_layer: 0.2,
            sequences: 2,
            tokens: 150,
            seed,
            fitted_to: None,
            always_on: Vec::new(),
            archetypes: None,
        };
        let (trace, map) = map_of("e1", generate_trace(&model, &params).unwrap());
        check(&format!("seed {seed}"), &trace, &map, batch);
    }
}
