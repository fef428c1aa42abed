//! Properties of the streaming regime on random tiny traces, checked against a naive
//! implementation written from docs/DESIGN.md's definitions with sets (no stamps, no fast paths).

mod common;

use common::{trace, workload};
use policies::UnitMap;
use proptest::prelude::*;
use sim::runner::{build_units, run, sweep, RunConfig};
use sim::streaming::{streaming_metrics, StreamingMetrics};
use std::collections::BTreeSet;
use traces::{PhaseSel, Trace};

const MIB: f64 = (1u64 << 20) as f64;

/// Naive streaming metrics: per step, the set of hot units and the set of keys inside them.
fn naive(t: &Trace, map: &UnitMap) -> StreamingMetrics {
    let ks = t.keyspace();
    let layers = ks.num_moe_layers() as f64;
    let n = t.tokens(0, traces::Phase::Decode);
    let (mut c, mut u, mut x, mut h) = (0u64, 0u64, 0u64, 0u64);
    let mut hot_count = vec![0usize; map.num_units()];
    for tok in 0..n {
        let mut hot = BTreeSet::new();
        for m in 0..ks.num_moe_layers() {
            for &e in t.selection(&ks, 0, traces::Phase::Decode, tok, m) {
                hot.extend(map.units_of(ks.key(m, e)));
            }
        }
        let keys = (0..ks.num_keys() as u32)
            .filter(|&k| map.units_of(k).any(|un| hot.contains(&un)))
            .count();
        for &un in &hot {
            c += map.units[un as usize].committed_bytes;
            u += map.units[un as usize].useful_bytes;
            hot_count[un as usize] += 1;
        }
        x += keys as u64;
        h += hot.len() as u64;
    }
    let ls = n as f64 * layers;
    let committed: u64 = map.units.iter().map(|un| un.committed_bytes).sum();
    let useful: u64 = map.units.iter().map(|un| un.useful_bytes).sum();
    StreamingMetrics {
        resident_mib_per_layer_step: c as f64 / ls / MIB,
        transfer_mib_per_layer_step: u as f64 / ls / MIB,
        resident_experts_per_layer_step: x as f64 / ls,
        hot_units_per_layer_step: h as f64 / ls,
        waste_factor: committed as f64 / useful as f64,
        selectivity: x as f64 / (n * ks.ids_per_token()) as f64,
        always_on_units: hot_count.iter().filter(|&&k| k == n).count() as u64,
        units_per_layer: map.num_units() as f64 / layers,
        committed_mib_total: committed as f64 / MIB,
        useful_mib_total: useful as f64 / MIB,
    }
}

/// A random trace: 1-3 layers, 2-8 experts, top-k 1..=experts, 1-6 tokens.
fn arb_trace() -> impl Strategy<Value = Trace> {
    (1usize..=3, 2u16..=8, 1usize..=6)
        .prop_flat_map(|(layers, experts, tokens)| {
            (1..=experts as usize).prop_flat_map(move |k| {
                let sel = Just((0..experts).collect::<Vec<u16>>())
                    .prop_shuffle()
                    .prop_map(move |v| v[..k].to_vec());
                proptest::collection::vec(proptest::collection::vec(sel, layers), tokens)
                    .prop_map(move |toks| trace(layers, experts, &toks))
            })
        })
        .boxed()
}

fn arb_spec() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            1u32..=5,
            prop_oneof![Just("index"), Just("hot"), Just("coact")]
        )
            .prop_map(|(n, o)| format!("e{n}:{o}")),
        (1u64..=12, prop_oneof![Just(""), Just(":hot")])
            .prop_map(|(r, o)| format!("region:{r}{o}")),
        prop_oneof![
            Just("os4k".to_string()),
            Just("os64k".into()),
            Just("os2m".into())
        ],
    ]
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn streaming_matches_naive_and_bounds(
        t in arb_trace(),
        spec in arb_spec(),
        expert_bytes in 1u64..=(4 << 20),
        granule_log2 in 16u32..=22,
    ) {
        let mut cfg = RunConfig { policy: spec.clone(), ..RunConfig::default() };
        cfg.sizes.expert_mib = Some(expert_bytes as f64 / MIB);
        cfg.sizes.granule_mib = Some((1u64 << granule_log2) as f64 / MIB);
        let k = t.header.model.layers[0].top_k as f64;
        let w = workload(t.clone());
        let (map, sizes) = match build_units(&cfg, &w) {
            Ok(b) => b,
            Err(e) => {
                // the only build errors reachable here: a region smaller than one expert, and
                // eN with N above the layers' expert count
                let msg = format!("{e:#}");
                let experts = t.header.model.layers.iter().map(|l| l.experts).max().unwrap_or(0);
                let n_above = spec
                    .strip_prefix('e')
                    .and_then(|r| r.split(':').next())
                    .and_then(|n| n.parse::<u16>().ok())
                    .is_some_and(|n| n > experts);
                if n_above {
                    prop_assert!(msg.contains("largest allowed N"), "{}", msg);
                } else {
                    prop_assert!(spec.starts_with("region:"), "{}", msg);
                    prop_assert!(msg.contains("smaller than one expert"), "{}", msg);
                }
                return Ok(());
            }
        };
        prop_assert_eq!(sizes.expert_bytes, expert_bytes);
        let m = streaming_metrics(&t, PhaseSel::Decode, &map).unwrap();
        let n = naive(&t, &map);
        for (a, b) in [
            (m.resident_mib_per_layer_step, n.resident_mib_per_layer_step),
            (m.transfer_mib_per_layer_step, n.transfer_mib_per_layer_step),
            (m.resident_experts_per_layer_step, n.resident_experts_per_layer_step),
            (m.hot_units_per_layer_step, n.hot_units_per_layer_step),
            (m.waste_factor, n.waste_factor),
            (m.selectivity, n.selectivity),
            (m.units_per_layer, n.units_per_layer),
            (m.committed_mib_total, n.committed_mib_total),
            (m.useful_mib_total, n.useful_mib_total),
        ] {
            prop_assert!(close(a, b), "{spec}: {a} != {b}\n{m:?}\n{n:?}");
        }
        prop_assert_eq!(m.always_on_units, n.always_on_units);
        prop_assert!(m.selectivity >= 1.0 - 1e-12);
        prop_assert!(m.waste_factor >= 1.0);
        prop_assert!(m.resident_mib_per_layer_step >= m.transfer_mib_per_layer_step);
        // every key is in some unit: the useful total is the whole bank
        prop_assert!(close(m.useful_mib_total * MIB, (map.key_first.len() as u64 * expert_bytes) as f64));
        if spec.starts_with("e1:") {
            prop_assert!(close(m.transfer_mib_per_layer_step, k * expert_bytes as f64 / MIB));
            prop_assert!(close(m.selectivity, 1.0));
        }
    }

    #[test]
    fn sweep_is_independent_of_thread_count(t in arb_trace()) {
        let configs: Vec<RunConfig> = ["e1", "e2:index", "e2:hot", "e3:coact", "region:5", "region:7:hot", "os64k"]
            .iter()
            .map(|p| common::cfg(p, 1.5))
            .collect();
        let w = workload(t);
        let at = |threads| {
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
                .install(|| sweep(&configs, &w))
                .into_iter()
                .map(|r| r.map_err(|e| format!("{e:#}")))
                .collect::<Vec<_>>()
        };
        let one = at(1);
        prop_assert_eq!(&one, &at(2));
        let serial: Vec<_> = configs.iter().map(|c| run(c, &w).map_err(|e| format!("{e:#}"))).collect();
        prop_assert_eq!(one, serial);
    }
}
