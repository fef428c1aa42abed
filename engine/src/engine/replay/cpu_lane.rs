//! The CPU lane of a replay (`--cpu-experts`, placements in [`crate::engine::cpu`]).
//!
//! Per group, at the router: the group's keys are split between the GPU and the CPU by the
//! placement; the GPU keys page in and run as without a CPU lane (over their share of the
//! slots), while the CPU lane, one resource running one group at a time on all host
//! threads, takes the CPU keys from `max(router, lane free)`: the activations' copy to the
//! host, the expert calls, the copy back. The layer ends when both are done (the next
//! group's non-expert compute waits for the later of the two).
//!
//! A group whose keys are split prices each side over its share of the slots,
//! `slots x side keys / keys` (exact with one token per step, where slots = keys).

use super::{EngineError, State};
use crate::cost::Paging;
use crate::engine::cpu::{CpuExperts, CpuLane};
use crate::engine::plan::{GroupRec, Plans};
use crate::engine::timeline::Resource;
use serde::Serialize;

/// The CPU lane's totals over a replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CpuCounts {
    /// Expert calls computed on the CPU (one per distinct key of a group placed there).
    pub experts: u64,
    /// Groups with at least one expert on the CPU.
    pub groups: u64,
    /// µs of CPU expert calls.
    pub calls_us: f64,
    /// µs of the activations' PCIe copies, both ways.
    pub activation_us: f64,
    /// µs the GPU's stream waited past its own expert compute for the CPU lane.
    pub wait_us: f64,
    /// Units a `misses` placement paged in off the critical path.
    pub background_page_ins: u64,
    /// Missed units a `cheaper` placement paged in (the others ran on the CPU).
    pub cheaper_paged: u64,
}

/// How a group's keys were placed: the GPU side's readiness, keys and slots, and when the
/// CPU side ends (`None`: nothing on the CPU).
pub(super) struct Placed {
    pub ready: f64,
    pub keys: usize,
    pub slots: u32,
    pub cpu_done: Option<f64>,
}

impl Placed {
    /// Every key of `g` on the GPU, resident at `ready`.
    pub fn gpu(ready: f64, g: &GroupRec, plans: &Plans) -> Placed {
        Placed {
            ready,
            keys: plans.keys(g).len(),
            slots: g.slots,
            cpu_done: None,
        }
    }
}

/// Per-unit marks reused across groups (all false between groups).
pub(super) struct Scratch {
    /// Units the group evicts (a unit paged in and evicted by one group is streamed).
    evicted: Vec<bool>,
    /// Units whose keys run on the CPU in this group.
    on_cpu: Vec<bool>,
}

impl Scratch {
    pub fn new(units: usize) -> Scratch {
        Scratch {
            evicted: vec![false; units],
            on_cpu: vec![false; units],
        }
    }
}

impl State<'_> {
    /// Place group `g`'s keys (router at `router`) per `lane`'s placement; page in what the
    /// GPU side needs.
    pub(super) fn place_group(
        &mut self,
        lane: &CpuLane,
        plans: &Plans,
        g: &GroupRec,
        router: f64,
        scratch: &mut Scratch,
    ) -> Result<Placed, EngineError> {
        if (g.moe_layer as usize) < lane.cpu_layers {
            let keys = plans.keys(g).len();
            self.log_cpu_keys(|| plans.keys(g).to_vec());
            let done = self.cpu_run(lane, g, keys, f64::from(g.slots), router)?;
            return Ok(Placed {
                ready: router,
                keys: 0,
                slots: 0,
                cpu_done: done,
            });
        }
        match lane.mode {
            CpuExperts::Misses => self.place_misses(lane, plans, g, router, scratch),
            CpuExperts::Cheaper => self.place_cheaper(lane, plans, g, router, scratch),
            _ => {
                self.log_cpu_keys(Vec::new);
                Ok(Placed::gpu(
                    self.demand_page_ins(plans.page_ins(g), router)?,
                    g,
                    plans,
                ))
            }
        }
    }

    /// Log the keys the CPU lane runs in the current group, when they are recorded.
    fn log_cpu_keys(&mut self, keys: impl FnOnce() -> Vec<u32>) {
        if let Some(log) = &mut self.cpu_keys {
            let mut k = keys();
            k.sort_unstable();
            log.push(k);
        }
    }

    /// `misses`: units not resident run their keys on the CPU; the plan's page-ins that it
    /// keeps (not evicted by this group) are paged in off the critical path; a key runs on
    /// the GPU when every unit of it is resident and ready at the router.
    fn place_misses(
        &mut self,
        lane: &CpuLane,
        plans: &Plans,
        g: &GroupRec,
        router: f64,
        scratch: &mut Scratch,
    ) -> Result<Placed, EngineError> {
        let evicted = plans.evicted(g);
        for &u in evicted {
            scratch.evicted[u as usize] = true;
        }
        for &u in plans.accessed(g) {
            let ui = u as usize;
            if self.resident[ui] && self.ready_at[ui] <= router {
                continue;
            }
            scratch.on_cpu[ui] = true;
            if !self.resident[ui] && !scratch.evicted[ui] {
                self.resident[ui] = true;
                self.ready_at[ui] = self.vmm_page_in(u, router, "h2d (background)")?;
                self.cpu.background_page_ins += 1;
            }
        }
        for &u in evicted {
            scratch.evicted[u as usize] = false;
        }
        self.split(lane, plans, g, router, router, scratch)
    }

    /// `cheaper`: each accessed unit not resident (in access order) is paged in when that
    /// ends no later than running its keys on the CPU would: ready time plus the GPU kernel
    /// time of its keys (`keys x expert_us`) against the CPU lane's end with its keys added;
    /// else its keys run on the CPU and it stays off the GPU.
    fn place_cheaper(
        &mut self,
        lane: &CpuLane,
        plans: &Plans,
        g: &GroupRec,
        router: f64,
        scratch: &mut Scratch,
    ) -> Result<Placed, EngineError> {
        let keys = plans.keys(g);
        let per_key = f64::from(g.slots) / keys.len().max(1) as f64;
        let mut ready = router;
        let mut cpu_keys = 0usize;
        for &u in plans.accessed(g) {
            let ui = u as usize;
            if self.resident[ui] {
                continue;
            }
            let n = keys
                .iter()
                .filter(|&&k| self.units.units_of(k).contains(&u))
                .count();
            let gpu_end = self.page_in_estimate(u, router)? + n as f64 * self.compute.expert_us;
            let k = cpu_keys + n;
            let cpu_end = self.cpu_free.max(router)
                + self.activation_us(lane, g)
                + lane.calls_us(k, k as f64 * per_key)?;
            if gpu_end <= cpu_end {
                self.resident[ui] = true;
                ready = ready.max(self.vmm_page_in(u, router, "h2d")?);
                self.cpu.cheaper_paged += 1;
            } else {
                scratch.on_cpu[ui] = true;
                cpu_keys = k;
            }
        }
        self.split(lane, plans, g, router, ready, scratch)
    }

    /// Run on the CPU the keys of `g` with a unit marked in `scratch.on_cpu` (clearing the
    /// marks), the others on the GPU once resident at `ready`.
    fn split(
        &mut self,
        lane: &CpuLane,
        plans: &Plans,
        g: &GroupRec,
        router: f64,
        ready: f64,
        scratch: &mut Scratch,
    ) -> Result<Placed, EngineError> {
        let keys = plans.keys(g);
        let on_cpu = |k: u32| self.units.units_of(k).any(|u| scratch.on_cpu[u as usize]);
        let cpu_keys = keys.iter().filter(|&&k| on_cpu(k)).count();
        if self.cpu_keys.is_some() {
            let ks: Vec<u32> = keys.iter().copied().filter(|&k| on_cpu(k)).collect();
            self.log_cpu_keys(|| ks);
        }
        for &u in plans.accessed(g) {
            scratch.on_cpu[u as usize] = false;
        }
        let per_key = f64::from(g.slots) / keys.len().max(1) as f64;
        let cpu_slots = cpu_keys as f64 * per_key;
        let cpu_done = self.cpu_run(lane, g, cpu_keys, cpu_slots, router)?;
        Ok(Placed {
            ready,
            keys: keys.len() - cpu_keys,
            slots: (f64::from(g.slots) - cpu_slots).round() as u32,
            cpu_done,
        })
    }

    /// Group `g`'s activations over PCIe both ways, µs: 2 x (H2D latency + bytes / bandwidth).
    fn activation_us(&self, lane: &CpuLane, g: &GroupRec) -> f64 {
        2.0 * self
            .cost
            .copy_us(lane.activation_bytes(g.moe_layer as usize, g.slots))
    }

    /// Run `keys` experts of `g` over `slots` slots on the CPU lane from `router`: the
    /// activations to the host, the calls, the activations back. Returns when it ends
    /// (`None` when `keys` is 0).
    fn cpu_run(
        &mut self,
        lane: &CpuLane,
        g: &GroupRec,
        keys: usize,
        slots: f64,
        router: f64,
    ) -> Result<Option<f64>, EngineError> {
        if keys == 0 {
            return Ok(None);
        }
        let start = self.cpu_free.max(router);
        let act = self.activation_us(lane, g);
        let calls = lane.calls_us(keys, slots)?;
        self.cpu_free = start + act + calls;
        self.cpu.experts += keys as u64;
        self.cpu.groups += 1;
        self.cpu.calls_us += calls;
        self.cpu.activation_us += act;
        self.span(Resource::Cpu, "cpu experts", start, act + calls);
        Ok(Some(self.cpu_free))
    }

    /// The layer's end: the GPU's expert compute (ends at `gpu_done`) and the CPU lane (ends
    /// at `cpu_done`) both done; the compute stream waits for the CPU lane.
    #[inline]
    pub(super) fn join_cpu(&mut self, gpu_done: f64, cpu_done: Option<f64>) -> f64 {
        let Some(c) = cpu_done else {
            return gpu_done;
        };
        if c > gpu_done {
            self.cpu.wait_us += c - gpu_done;
            self.compute_free = c;
            return c;
        }
        gpu_done
    }

    /// When VMM unit `u` would be resident if paged in from `t` now, without paging it: the
    /// driver's and copy engine's queues as they stand (deferred decommits not yet run are
    /// left out), at the fill level the unit brings, without the oversubscription jitter.
    fn page_in_estimate(&self, u: u32, t: f64) -> Result<f64, EngineError> {
        debug_assert_eq!(self.cost.paging, Paging::Vmm);
        let committed = self.units.units[u as usize].committed_bytes as f64;
        let mapped = self.mapped_base + self.mapped_units + committed;
        let f =
            match self.cost.band_at(mapped) {
                None => 1.0,
                Some(Ok(b)) => b.factor,
                Some(Err(constant)) => return Err(profile::ProfileError::Missing {
                    profile: self.cost.profile.clone(),
                    constant,
                    needed_for:
                        "pricing a page-in against the CPU (--cpu-experts cheaper) near full VRAM"
                            .into(),
                }
                .into()),
            };
        let (c, x) = self.page_in_prices(u, self.live_granules(), f);
        let d_end = self.driver_free.max(t) + c;
        Ok(self.copy_free.max(d_end) + x)
    }
}
