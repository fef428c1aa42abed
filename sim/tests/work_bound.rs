//! The work of every retention policy stays a small constant per access, whatever the size of
//! a group: every mechanism form x every registered policy x both semantics (and both
//! splits), on small generated traces whose OS-page groups hold thousands of units, with
//! budgets below one group, near one group and fractions of the bank.
//!
//! It counts operations ([`policies::retention::EvictionPolicy::work`]: list entries walked,
//! heap entries popped, hand moves, random draws), not time, so it cannot flake on a loaded
//! machine. A policy that walks the protected group at every eviction does O(group) per
//! eviction, thousands per access here; the bound below is far under that.

use policies::regime::{Budget, Semantics, Split};
use policies::retention::PolicyKind;
use policies::units::UnitMap;
use sim::cache::{Batching, CacheConfig};
use sim::runner::{build_units, RunConfig, TraceInput, Workload};
use traces::gen::{generate_trace, GenParams};
use traces::{ModelSpec, PhaseSel};

/// Operations per access every configuration must stay below: a constant, where the
/// quadratic cases this guards against reach the group size (6,144 OS pages here).
const BOUND: f64 = 24.0;

/// 4 MoE layers of 32 experts, top-8, 3 MiB experts at bf16 (hidden 1024, FFN 512, as
/// granite-3.0-1b-a400m): a group is 8 experts, 6,144 pages of 4 KiB.
fn trace(seed: u64) -> traces::Trace {
    let mut model = ModelSpec::uniform("work-bound", 4, 32, 8);
    model.hidden_size = Some(1024);
    model.expert_ffn = Some(512);
    let params = GenParams {
        preset: None,
        skew: vec![1.0],
        locality: vec![0.4],
        cross_layer: 0.2,
        sequences: 2,
        tokens: 6,
        seed,
        fitted_to: None,
        always_on: Vec::new(),
        archetypes: None,
    };
    generate_trace(&model, &params).unwrap()
}

/// Operations per access of one configuration on a prepared stream.
fn per_access(cw: &sim::cache::Workload, map: &UnitMap, cfg: &CacheConfig) -> f64 {
    let (mut s, _) = cw.simulator(map, cfg).unwrap();
    for g in 0..cw.stream.num_groups() {
        s.group(cw.stream.group(g));
    }
    s.policy_work() as f64 / s.report().accesses as f64
}

#[test]
fn every_policy_stays_within_a_constant_work_per_access() {
    let w = Workload::new(
        TraceInput {
            label: "gen".into(),
            trace: trace(3),
        },
        None,
    )
    .unwrap();
    // One spec per mechanism form of the registry.
    let specs = [
        "e1",
        "e4:index",
        "e4:hot",
        "e4:coact",
        "region:64",
        "region:64:hot",
        "os4k",
        "os64k",
        "os2m",
    ];
    let mut worst = (0.0, String::new());
    let mut over = Vec::new();
    let mut largest_group = 0;
    for spec in specs {
        let run = RunConfig {
            policy: spec.into(),
            ..RunConfig::default()
        };
        let (map, _) = build_units(&run, &w).unwrap();
        let cw = sim::cache::Workload::build(
            &w.trace.trace,
            &map,
            PhaseSel::Decode,
            Batching::default(),
            None,
        )
        .unwrap();
        let n = map.num_units();
        let group = (0..cw.stream.num_groups())
            .map(|g| cw.stream.group(g).len())
            .max()
            .unwrap();
        largest_group = largest_group.max(group);
        // Below one group, just above one group (the protected group nearly fills the
        // budget), and fractions of the bank.
        let below = 10.min(n).to_string();
        let near_group = (group + group / 8).min(n).to_string();
        let budgets = [below.as_str(), near_group.as_str(), "2%", "25%", "75%"];
        // Regions span layers, so they have no per-layer split.
        let per_layer = (!spec.starts_with("region")).then_some(("25%", Split::PerLayer));
        let configs = budgets.iter().map(|b| (*b, Split::Global)).chain(per_layer);
        for (b, split) in configs {
            for policy in PolicyKind::ALL {
                for semantics in [Semantics::Group, Semantics::Access] {
                    let cfg = CacheConfig {
                        policy,
                        budget: Budget::parse(b).unwrap(),
                        split,
                        semantics,
                        dram: None,
                        seed: 1,
                    };
                    let ops = per_access(&cw, &map, &cfg);
                    let what = format!(
                        "{spec} {policy} {} budget {b} {} (groups of up to {group} units)",
                        semantics.name(),
                        split.name()
                    );
                    if ops >= BOUND {
                        over.push(format!("{what}: {ops:.1} operations per access"));
                    }
                    if ops > worst.0 {
                        worst = (ops, what);
                    }
                }
            }
        }
    }
    assert!(
        over.is_empty(),
        "over {BOUND} operations per access:\n{}",
        over.join("\n")
    );
    // The groups really hold thousands of units: 8 experts x 768 pages for os4k.
    assert_eq!(largest_group, 6_144);
    eprintln!("worst: {:.2} operations per access, {}", worst.0, worst.1);
}
