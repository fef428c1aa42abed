//! Record a replay's decisions as [`Plans`]: the cache regime's driver (`crate::cache`, the
//! retention policies) steps group by group and its page-ins and evictions are kept; the
//! streaming regime pages every accessed unit in and drops it after the group.

use super::plan::Plans;
use crate::cache::{self, schedule, Batching, CacheConfig};
use anyhow::Result;
use policies::UnitMap;
use traces::{Phase, PhaseSel, Trace};

/// Plans for `trace` (tokens of `phases`) under `map`, batched per `batching`; with `cache`
/// the retention driver decides residency, without it the streaming regime applies.
/// `profile` is the profile trace of the pinning policies (None: the trace itself).
pub fn plans(
    trace: &Trace,
    phases: PhaseSel,
    map: &UnitMap,
    batching: Batching,
    profile: Option<&Trace>,
    cache_cfg: Option<&CacheConfig>,
) -> Result<Plans> {
    let ks = trace.keyspace();
    let (batches, _) = schedule::batches_of(trace, &ks, map, phases, batching)?;
    let m = ks.num_moe_layers();
    let mut plans = Plans::new(m);
    let workload;
    let mut sim = match cache_cfg {
        Some(cfg) => {
            workload = cache::Workload::build(trace, map, phases, batching, profile)?;
            let (sim, _) = workload.simulator(map, cfg)?;
            plans.preloaded = (0..map.num_units() as u32)
                .filter(|&u| sim.is_resident(u))
                .collect();
            Some(sim)
        }
        None => None,
    };
    let mut seen_key = vec![false; ks.num_keys()];
    let mut seen_unit = vec![false; map.num_units()];
    // per-group buffers, reused so the loop allocates nothing once they have grown
    let (mut keys, mut units) = (Vec::new(), Vec::new());
    let (mut page_ins, mut evicted) = (Vec::new(), Vec::new());
    for batch in &batches {
        let kv: u64 = batch
            .iter()
            .map(|r| {
                let prompt = match r.phase {
                    Phase::Decode => trace.header.sequences[r.sequence as usize].prefill_tokens,
                    Phase::Prefill => 0,
                };
                prompt + r.token as u64 + 1
            })
            .sum();
        plans.begin_step(batch.len() as u32, kv);
        for layer in 0..m {
            keys.clear();
            units.clear();
            for r in batch {
                let sel =
                    trace.selection(&ks, r.sequence as usize, r.phase, r.token as usize, layer);
                for &e in sel {
                    let k = ks.key(layer, e);
                    if !seen_key[k as usize] {
                        seen_key[k as usize] = true;
                        keys.push(k);
                    }
                    for u in map.units_of(k) {
                        if !seen_unit[u as usize] {
                            seen_unit[u as usize] = true;
                            units.push(u);
                        }
                    }
                }
            }
            for &k in &keys {
                seen_key[k as usize] = false;
            }
            for &u in &units {
                seen_unit[u as usize] = false;
            }
            match &mut sim {
                Some(sim) => {
                    let out = sim.group(&units);
                    evicted.clear();
                    evicted.extend_from_slice(&out.evicted);
                    page_ins.clear();
                    page_ins.extend_from_slice(&out.page_ins);
                    // streamed (bypassed) page-ins leave VRAM after the group; units the
                    // policy already evicted (a budget below one group) are not listed twice
                    let policy_evicted = evicted.len();
                    for &u in &evicted {
                        seen_unit[u as usize] = true;
                    }
                    for &u in &page_ins {
                        if !sim.is_resident(u) && !seen_unit[u as usize] {
                            evicted.push(u);
                        }
                    }
                    for &u in &evicted[..policy_evicted] {
                        seen_unit[u as usize] = false;
                    }
                    plans.push_group(layer, &keys, &units, &page_ins, &evicted);
                }
                None => plans.push_group(layer, &keys, &units, &units, &units),
            }
        }
    }
    Ok(plans)
}
