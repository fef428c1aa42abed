//! The cache-regime simulator, driven one group (or one access) at a time.

use super::tiers::{DramMode, DramTier};
use super::CacheError;
use policies::retention::{Admission, At, EvictionPolicy, Protect, NEVER};
use policies::UnitMap;

/// When eviction is checked, and how the budget is shared between layers; defined beside
/// the budget in `policies`.
pub use policies::regime::{Semantics, Split};

/// The `cache` block of a run report; defined beside the other report blocks.
pub use reports::run::CacheReport;

/// One pool: a policy instance, its budget and its units (local ids `0..globals.len()`).
struct Pool<P: ?Sized> {
    policy: Box<P>,
    capacity: usize,
    len: usize,
    /// Group stamp of each local unit (protection under group semantics).
    stamp: Vec<u32>,
    /// Global unit id of each local id.
    globals: Vec<u32>,
}

/// What one group did, for a caller that prices it (the discrete-event engine).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupOutcome {
    /// Units paged in, in access order.
    pub page_ins: Vec<u32>,
    /// Units evicted from VRAM, in eviction order.
    pub evicted: Vec<u32>,
    /// Of `page_ins`, the units read from SSD (with a DRAM tier; the others were DRAM hits).
    pub ssd_reads: Vec<u32>,
}

/// The cache-regime simulator. Feed it the groups of an access stream in order with
/// [`CacheSim::group`]; read the totals with [`CacheSim::report`].
pub struct CacheSim<'a, P: ?Sized + EvictionPolicy = dyn EvictionPolicy> {
    semantics: Semantics,
    pools: Vec<Pool<P>>,
    unit_pool: Vec<u32>,
    unit_local: Vec<u32>,
    resident: Vec<bool>,
    useful: Vec<u64>,
    committed: Vec<u64>,
    next_use: Option<&'a [u32]>,
    /// One group's next uses from `next_use`, widened to stream positions.
    next_buf: Vec<u64>,
    dram: Option<DramTier>,
    /// Accesses fed so far: the position of the next one.
    pos: u64,
    group_stamp: u32,
    tokens: u64,
    accesses: u64,
    page_ins: u64,
    page_in_bytes: u128,
    evictions: u64,
    resident_bytes: u64,
    peak_bytes: u64,
    outcome: GroupOutcome,
}

/// A next use of an in-memory stream ([`super::AccessStream::next_use`], u32 with
/// [`super::stream::NEVER_U32`] for never) as a stream position, [`NEVER`] for never.
#[inline]
fn widen(n: u32) -> u64 {
    if n == super::stream::NEVER_U32 {
        NEVER
    } else {
        n as u64
    }
}

/// Pool layout: `pool_of[u]` for every unit; pools are numbered `0..pools`.
pub fn pool_layout(map: &UnitMap, split: Split) -> Result<Vec<u32>, CacheError> {
    match split {
        Split::Global => Ok(vec![0; map.num_units()]),
        Split::PerLayer => map
            .units
            .iter()
            .enumerate()
            .map(|(u, info)| {
                if info.first_moe_layer != info.last_moe_layer {
                    Err(CacheError::SplitSpansLayers {
                        unit: u,
                        spec: map.spec.clone(),
                        first: info.first_moe_layer,
                        last: info.last_moe_layer,
                    })
                } else {
                    Ok(info.first_moe_layer)
                }
            })
            .collect(),
    }
}

impl<'a, P: ?Sized + EvictionPolicy> CacheSim<'a, P> {
    /// A simulator over `map`'s units. `pool_of[u]` names each unit's pool; `policies[i]` and
    /// `capacities[i]` are pool i's policy (over local ids: a pool's units numbered in
    /// ascending global id) and budget in units. `next_use` (from
    /// [`super::AccessStream::next_use`]) is required by offline policies and must belong to
    /// the stream that will be fed. `dram` adds a DRAM tier of that many units, in that mode.
    pub fn new(
        map: &UnitMap,
        pool_of: &[u32],
        policies: Vec<Box<P>>,
        capacities: &[usize],
        semantics: Semantics,
        next_use: Option<&'a [u32]>,
        dram: Option<(usize, DramMode)>,
    ) -> Self {
        let n = map.num_units();
        let mut pools: Vec<Pool<P>> = policies
            .into_iter()
            .zip(capacities)
            .map(|(policy, &capacity)| Pool {
                policy,
                capacity,
                len: 0,
                stamp: Vec::new(),
                globals: Vec::new(),
            })
            .collect();
        let mut unit_local = vec![0u32; n];
        for (u, &p) in pool_of.iter().enumerate() {
            let pool = &mut pools[p as usize];
            unit_local[u] = pool.globals.len() as u32;
            pool.globals.push(u as u32);
        }
        for pool in &mut pools {
            pool.stamp = vec![0; pool.globals.len()];
        }
        let mut sim = CacheSim {
            semantics,
            pools,
            unit_pool: pool_of.to_vec(),
            unit_local,
            resident: vec![false; n],
            useful: map.units.iter().map(|u| u.useful_bytes).collect(),
            committed: map.units.iter().map(|u| u.committed_bytes).collect(),
            next_use,
            next_buf: Vec::new(),
            dram: dram.map(|(cap, mode)| DramTier::new(n, cap, mode)),
            pos: 0,
            group_stamp: 0,
            tokens: 0,
            accesses: 0,
            page_ins: 0,
            page_in_bytes: 0,
            evictions: 0,
            resident_bytes: 0,
            peak_bytes: 0,
            outcome: GroupOutcome::default(),
        };
        for p in 0..sim.pools.len() {
            for local in sim.pools[p].policy.preloaded() {
                let u = sim.pools[p].globals[local as usize];
                sim.resident[u as usize] = true;
                sim.pools[p].len += 1;
                sim.resident_bytes += sim.committed[u as usize];
                if let Some(d) = &mut sim.dram {
                    d.preload(u);
                }
            }
        }
        sim.peak_bytes = sim.resident_bytes;
        sim
    }

    /// Count `tokens` decoded tokens (the caller's batch step).
    pub fn add_tokens(&mut self, tokens: u64) {
        self.tokens += tokens;
    }

    /// True when unit `u` is resident in VRAM.
    pub fn is_resident(&self, u: u32) -> bool {
        self.resident[u as usize]
    }

    /// Units resident in pool `p` (pins included).
    pub fn pool_len(&self, p: usize) -> usize {
        self.pools[p].len
    }

    /// Budget of pool `p`, in units.
    pub fn pool_capacity(&self, p: usize) -> usize {
        self.pools[p].capacity
    }

    /// Whether the simulator has a DRAM tier behind VRAM (`--dram`).
    pub fn has_dram(&self) -> bool {
        self.dram.is_some()
    }

    /// The DRAM tier's mode (`--dram-mode`), when there is a DRAM tier.
    pub fn dram_mode(&self) -> Option<DramMode> {
        self.dram.as_ref().map(|d| d.report.mode)
    }

    /// Access the units of one group (distinct, in selection order) and evict per the
    /// semantics. Returns what was paged in and evicted.
    pub fn group(&mut self, units: &[u32]) -> &GroupOutcome {
        let Some(all) = self.next_use else {
            return self.group_next(units, None);
        };
        let pos = self.pos as usize;
        let mut next = std::mem::take(&mut self.next_buf);
        next.clear();
        next.extend(all[pos..pos + units.len()].iter().map(|&n| widen(n)));
        self.group_next(units, Some(&next));
        self.next_buf = next;
        &self.outcome
    }

    /// [`CacheSim::group`] with the next uses of this group's accesses given by the caller
    /// (`next_use[i]` for `units[i]`, as [`super::AccessStream::next_use`] numbers them),
    /// for a caller that reads them from a file block by block instead of holding them all;
    /// `None` when the policy needs none.
    pub fn group_next(&mut self, units: &[u32], next_use: Option<&[u64]>) -> &GroupOutcome {
        self.outcome.page_ins.clear();
        self.outcome.evicted.clear();
        self.outcome.ssd_reads.clear();
        self.group_stamp += 1;
        let bypassed = if self.semantics == Semantics::Group && self.pools.len() == 1 {
            let bypassed = self.access_one_pool(units, next_use);
            self.enforce(0, true);
            self.peak_bytes = self.peak_bytes.max(self.resident_bytes);
            bypassed
        } else {
            self.access_each(units, next_use)
        };
        if bypassed > 0 {
            // Streamed units pass through VRAM and leave it after the group.
            if let Some(d) = &mut self.dram {
                for &u in &self.outcome.page_ins {
                    if !self.resident[u as usize] {
                        d.demote(u);
                    }
                }
            }
        }
        &self.outcome
    }

    /// The accesses of one group with a single pool under group semantics (the global split:
    /// local ids are the global ids, and nothing is evicted between the accesses): the hot
    /// loop of a retention run, with its counters kept in locals and added once per group.
    /// Returns the number of page-ins bypassed. Counts exactly as [`CacheSim::access_each`].
    #[inline]
    fn access_one_pool(&mut self, units: &[u32], next_use: Option<&[u64]>) -> usize {
        let (g, pos) = (self.group_stamp, self.pos);
        let CacheSim {
            pools,
            resident,
            useful,
            committed,
            dram,
            outcome,
            ..
        } = self;
        let pool = &mut pools[0];
        let (mut page_in_bytes, mut retained_bytes) = (0u128, 0u64);
        let (mut retained, mut bypassed) = (0usize, 0usize);
        for (i, &u) in units.iter().enumerate() {
            let at = At {
                pos: pos + i as u64,
                next_use: next_use.map_or(NEVER, |n| n[i]),
            };
            pool.stamp[u as usize] = g;
            if resident[u as usize] {
                pool.policy.on_hit(u, at);
                continue;
            }
            page_in_bytes += useful[u as usize] as u128;
            if let Some(d) = dram {
                if d.page_in(u) {
                    outcome.ssd_reads.push(u);
                }
            }
            outcome.page_ins.push(u);
            match pool.policy.on_miss(u, at) {
                Admission::Retain => {
                    resident[u as usize] = true;
                    retained += 1;
                    retained_bytes += committed[u as usize];
                }
                Admission::Bypass => bypassed += 1,
            }
        }
        pool.len += retained;
        self.resident_bytes += retained_bytes;
        self.page_ins += self.outcome.page_ins.len() as u64;
        self.page_in_bytes += page_in_bytes;
        self.pos += units.len() as u64;
        self.accesses += units.len() as u64;
        bypassed
    }

    /// The accesses of one group, unit by unit, evicting after each under access semantics
    /// and after the group (pool by pool) under group semantics. Returns the number of
    /// page-ins bypassed.
    fn access_each(&mut self, units: &[u32], next_use: Option<&[u64]>) -> usize {
        let g = self.group_stamp;
        let mut bypassed = 0usize;
        // One pool (global split): local ids are the global ids, skip the lookups.
        let single = self.pools.len() == 1;
        for (i, &u) in units.iter().enumerate() {
            let (p, l) = if single {
                (0, u)
            } else {
                (
                    self.unit_pool[u as usize] as usize,
                    self.unit_local[u as usize],
                )
            };
            let at = At {
                pos: self.pos,
                next_use: next_use.map_or(NEVER, |n| n[i]),
            };
            self.pos += 1;
            self.accesses += 1;
            let pool = &mut self.pools[p];
            pool.stamp[l as usize] = g;
            if self.resident[u as usize] {
                pool.policy.on_hit(l, at);
            } else {
                self.page_ins += 1;
                self.page_in_bytes += self.useful[u as usize] as u128;
                if let Some(d) = &mut self.dram {
                    if d.page_in(u) {
                        self.outcome.ssd_reads.push(u);
                    }
                }
                self.outcome.page_ins.push(u);
                match pool.policy.on_miss(l, at) {
                    Admission::Retain => {
                        self.resident[u as usize] = true;
                        pool.len += 1;
                        self.resident_bytes += self.committed[u as usize];
                    }
                    Admission::Bypass => bypassed += 1,
                }
            }
            if self.semantics == Semantics::Access {
                self.enforce(p, false);
                self.peak_bytes = self.peak_bytes.max(self.resident_bytes);
            }
        }
        if self.semantics == Semantics::Group {
            if self.pools.len() == 1 {
                self.enforce(0, true);
            } else {
                for &u in units {
                    self.enforce(self.unit_pool[u as usize] as usize, true);
                }
            }
            self.peak_bytes = self.peak_bytes.max(self.resident_bytes);
        }
        bypassed
    }

    /// Evict from pool `p` until its budget holds.
    #[inline]
    fn enforce(&mut self, p: usize, protect_group: bool) {
        let g = self.group_stamp;
        let pool = &mut self.pools[p];
        while pool.len > pool.capacity {
            let victim = if protect_group {
                let protect = Protect::new(&pool.stamp, g);
                pool.policy
                    .evict(protect)
                    .or_else(|| pool.policy.evict(Protect::none()))
            } else {
                pool.policy.evict(Protect::none())
            };
            let Some(l) = victim else { break };
            let u = pool.globals[l as usize];
            debug_assert!(self.resident[u as usize]);
            self.resident[u as usize] = false;
            pool.len -= 1;
            self.evictions += 1;
            self.resident_bytes -= self.committed[u as usize];
            self.outcome.evicted.push(u);
            if let Some(d) = &mut self.dram {
                d.demote(u);
            }
        }
    }

    /// Totals so far.
    pub fn report(&self) -> CacheReport {
        let per = |x: f64, d: u64| if d == 0 { 0.0 } else { x / d as f64 };
        CacheReport {
            tokens: self.tokens,
            accesses: self.accesses,
            page_ins: self.page_ins,
            page_ins_per_token: per(self.page_ins as f64, self.tokens),
            miss_rate: per(self.page_ins as f64, self.accesses),
            bytes_per_token: per(self.page_in_bytes as f64, self.tokens),
            evictions: self.evictions,
            budget_units: self.pools.iter().map(|p| p.capacity as u64).sum(),
            peak_resident_mib: self.peak_bytes as f64 / crate::MIB,
        }
    }

    /// The policies' work so far ([`EvictionPolicy::work`], summed over the pools): with
    /// [`CacheReport::accesses`], the operations per access that tests bound.
    pub fn policy_work(&self) -> u64 {
        self.pools.iter().map(|p| p.policy.work()).sum()
    }

    /// DRAM tier totals, when a DRAM tier was configured.
    pub fn tiers(&self) -> Option<super::TiersReport> {
        self.dram.as_ref().map(|d| d.report.clone())
    }
}
