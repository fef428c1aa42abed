//! Record a replay's decisions as [`Plans`]: the cache regime's driver (`crate::cache`, the
//! retention policies) steps group by group and its page-ins and evictions are kept; the
//! streaming regime pages every accessed unit in and drops it after the group.

use super::plan::Plans;
use crate::cache::{self, schedule, Batching, CacheConfig, CacheOutcome, CacheSim};
use anyhow::Result;
use policies::retention::EvictionPolicy;
use policies::UnitMap;
use traces::{KeySpace, Phase, PhaseSel, Trace};

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
    let workload = cache_cfg
        .map(|_| cache::Workload::build(trace, map, phases, batching, profile))
        .transpose()?;
    let retention = workload.as_ref().zip(cache_cfg);
    Ok(record(trace, phases, map, batching, retention)?.0)
}

/// [`plans`] on a prepared cache workload (built with the same `batching`), also returning
/// the cache regime's outcome of the run: one retention simulation gives both the cache
/// report and the plans the engine prices. Without `retention`: streaming, and no outcome.
pub fn record(
    trace: &Trace,
    phases: PhaseSel,
    map: &UnitMap,
    batching: Batching,
    retention: Option<(&cache::Workload, &CacheConfig)>,
) -> Result<(Plans, Option<CacheOutcome>)> {
    let ks = trace.keyspace();
    let (batches, _) = schedule::batches_of(trace, &ks, map, phases, batching)?;
    let mut sim = match retention {
        Some((w, cfg)) => Some(w.simulator(map, cfg)?.0),
        None => None,
    };
    let mut plans = empty_plans(ks.num_moe_layers(), map, sim.as_ref());
    let mut group = GroupBuf::new(ks.num_keys(), map.num_units());
    let mut seqs = Vec::new();
    for batch in &batches {
        seqs.clear();
        seqs.extend(batch.iter().map(|r| r.sequence));
        let produced = batch.iter().map(|r| r.produced).sum();
        let prefill = batch.iter().any(|r| r.phase == Phase::Prefill);
        plans.begin_chunk_step(&seqs, kv_tokens(trace, batch), produced, prefill);
        for layer in 0..ks.num_moe_layers() {
            group.gather(trace, &ks, map, batch, layer);
            match &mut sim {
                Some(sim) => group.decide(sim, &mut plans, layer, None),
                None => group.push_streaming(&mut plans, layer),
            }
        }
    }
    let outcome = sim.zip(retention).map(|(mut sim, (w, _))| {
        sim.add_tokens(w.stream.tokens);
        CacheOutcome {
            cache: sim.report(),
            tiers: sim.tiers(),
        }
    });
    Ok((plans, outcome))
}

/// Plans with nothing recorded yet for a model of `moe_layers` MoE layers: with a retention
/// driver `sim`, the units it holds before the first step (static pins) and its tiers.
pub(crate) fn empty_plans<P: ?Sized + EvictionPolicy>(
    moe_layers: usize,
    map: &UnitMap,
    sim: Option<&CacheSim<'_, P>>,
) -> Plans {
    let mut plans = Plans::new(moe_layers);
    if let Some(sim) = sim {
        plans.preloaded = (0..map.num_units() as u32)
            .filter(|&u| sim.is_resident(u))
            .collect();
        plans.tiered = sim.has_dram();
        plans.page_cache = sim.dram_mode() == Some(cache::DramMode::PageCache);
    }
    plans
}

/// Tokens of KV cache the batch's sequences hold together at this step: prompt tokens (for a
/// decode request) plus the tokens processed so far, this step's chunk included (a verify
/// step writes the KV of all its drafts).
fn kv_tokens(trace: &Trace, batch: &[cache::Request]) -> u64 {
    batch
        .iter()
        .map(|r| {
            let prompt = match r.phase {
                Phase::Decode => trace.header.sequences[r.sequence as usize].prefill_tokens,
                Phase::Prefill => 0,
            };
            prompt + r.token as u64 + r.len as u64
        })
        .sum()
}

/// One group's buffers, reused so the loop allocates nothing once they have grown.
pub(crate) struct GroupBuf {
    keys: Vec<u32>,
    /// Routed (token, expert) slots of the group (selections summed over the chunks' tokens).
    slots: u32,
    units: Vec<u32>,
    page_ins: Vec<u32>,
    evicted: Vec<u32>,
    /// Of `page_ins`, the units read from SSD (with a DRAM tier).
    ssd: Vec<u32>,
    /// Marks for deduplication; all false between groups.
    seen_key: Vec<bool>,
    seen_unit: Vec<bool>,
}

impl GroupBuf {
    pub(crate) fn new(keys: usize, units: usize) -> Self {
        GroupBuf {
            keys: Vec::new(),
            slots: 0,
            units: Vec::new(),
            page_ins: Vec::new(),
            evicted: Vec::new(),
            ssd: Vec::new(),
            seen_key: vec![false; keys],
            seen_unit: vec![false; units],
        }
    }

    /// The distinct keys the batch selected in MoE layer `layer`, and the distinct units
    /// holding them, in selection order (request, then its chunk's tokens, then router order,
    /// then a key's units); and the slots (every selection of every token).
    fn gather(
        &mut self,
        trace: &Trace,
        ks: &KeySpace,
        map: &UnitMap,
        batch: &[cache::Request],
        layer: usize,
    ) {
        self.keys.clear();
        self.units.clear();
        self.slots = 0;
        for r in batch {
            for t in r.tokens() {
                let sel = trace.selection(ks, r.sequence as usize, r.phase, t, layer);
                self.slots += sel.len() as u32;
                for &e in sel {
                    self.select(map, ks.key(layer, e));
                }
            }
        }
        self.clear_marks();
    }

    /// [`GroupBuf::gather`] from the batch's token records (`records`: one record of
    /// `ks.ids_per_token()` ids per request, in batch order), one token per request.
    pub(crate) fn gather_records(
        &mut self,
        ks: &KeySpace,
        map: &UnitMap,
        records: &[u16],
        layer: usize,
    ) {
        self.keys.clear();
        self.units.clear();
        self.slots = 0;
        let sel = ks.sel_offsets[layer]..ks.sel_offsets[layer + 1];
        for rec in records.chunks_exact(ks.ids_per_token()) {
            let sel = &rec[sel.clone()];
            self.slots += sel.len() as u32;
            for &e in sel {
                self.select(map, ks.key(layer, e));
            }
        }
        self.clear_marks();
    }

    /// Add key `k` and its units unless already in the group.
    #[inline]
    fn select(&mut self, map: &UnitMap, k: u32) {
        if !self.seen_key[k as usize] {
            self.seen_key[k as usize] = true;
            self.keys.push(k);
        }
        for u in map.units_of(k) {
            if !self.seen_unit[u as usize] {
                self.seen_unit[u as usize] = true;
                self.units.push(u);
            }
        }
    }

    /// Clear the deduplication marks of the gathered keys and units.
    fn clear_marks(&mut self) {
        for &k in &self.keys {
            self.seen_key[k as usize] = false;
        }
        for &u in &self.units {
            self.seen_unit[u as usize] = false;
        }
    }

    /// The units the group accessed (after a gather).
    pub(crate) fn units(&self) -> &[u32] {
        &self.units
    }

    /// Record the gathered group in the streaming regime: every accessed unit is paged in
    /// and dropped after the group.
    pub(crate) fn push_streaming(&self, plans: &mut Plans, layer: usize) {
        let units = &self.units[..];
        plans.push_group_slots(layer, &self.keys, self.slots, [units; 3]);
    }

    /// Step the retention driver over the gathered group and record its decisions. Streamed
    /// (bypassed) page-ins leave VRAM after the group; units the policy already evicted (a
    /// budget below one group) are not listed twice. `next`: the accesses' next uses when
    /// the caller reads them (else the driver's own, if any).
    pub(crate) fn decide<P: ?Sized + EvictionPolicy>(
        &mut self,
        sim: &mut CacheSim<'_, P>,
        plans: &mut Plans,
        layer: usize,
        next: Option<&[u64]>,
    ) {
        let out = match next {
            Some(n) => sim.group_next(&self.units, Some(n)),
            None => sim.group(&self.units),
        };
        self.evicted.clear();
        self.evicted.extend_from_slice(&out.evicted);
        self.page_ins.clear();
        self.page_ins.extend_from_slice(&out.page_ins);
        self.ssd.clear();
        self.ssd.extend_from_slice(&out.ssd_reads);
        let policy_evicted = self.evicted.len();
        for &u in &self.evicted {
            self.seen_unit[u as usize] = true;
        }
        for &u in &self.page_ins {
            if !sim.is_resident(u) && !self.seen_unit[u as usize] {
                self.evicted.push(u);
            }
        }
        for &u in &self.evicted[..policy_evicted] {
            self.seen_unit[u as usize] = false;
        }
        plans.push_group_slots(
            layer,
            &self.keys,
            self.slots,
            [&self.units, &self.page_ins, &self.evicted],
        );
        let gi = (plans.end_group() - 1) as u32;
        plans.ssd_reads.extend(self.ssd.iter().map(|&u| (gi, u)));
    }
}
