//! The CPU lane: routed experts computed on the host CPU instead of the GPU (`--cpu-experts`).
//!
//! Placements ([`CpuExperts`]), as llama.cpp, ktransformers and Fiddler place experts:
//! - `none`: every expert runs on the GPU (no CPU lane; the engine as without the flag);
//! - `all`: every routed expert runs on the CPU, nothing is paged (llama.cpp `--cpu-moe`);
//! - `layers:N`: the experts of the first N MoE layers live and run on the CPU (llama.cpp
//!   `--n-cpu-moe N`); the other layers are paged on the GPU, and the retention budget counts
//!   only their units ([`gpu_unit_map`]);
//! - `misses`: a key whose unit is not resident and ready on the GPU at the router runs on the
//!   CPU (ktransformers); the unit is paged in off the critical path unless the plan streams
//!   it (pages it in and evicts it in the same group, as static-pin does outside its set);
//! - `cheaper`: per missed unit, the faster of paging it in now and running its keys on the
//!   CPU, by the engine's own prices at that moment (Fiddler); a unit left to the CPU is not
//!   copied and is missed again at its next access.
//!
//! The lane's prices ([`CpuLane`]): expert calls from the host profile
//! ([`crate::host_cost::HostCostModel`]), and the activations crossing PCIe both ways per
//! group, `2 x (h2d_latency + tokens x hidden x 2 bytes / h2d_bandwidth)`: bf16 activations
//! (2 bytes per element, the dtype llama.cpp and ktransformers hand to their CPU experts),
//! both directions priced with the GPU profile's H2D latency and bandwidth (the profiles
//! have no D2H arm; the copies are small, so latency-bound).

use crate::host_cost::HostCostModel;
use policies::UnitMap;
use profile::{Profile, ProfileError};

use serde::Serialize;
use traces::model::DType;
use traces::{KeySpace, Trace};

/// Where routed experts run (`--cpu-experts`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub enum CpuExperts {
    /// Every expert on the GPU: no CPU lane.
    #[default]
    None,
    /// Every routed expert on the CPU; nothing paged.
    All,
    /// The experts of the first N MoE layers on the CPU.
    Layers(u32),
    /// Keys not resident on the GPU at the router run on the CPU.
    Misses,
    /// Per missed unit, the faster of paging in and the CPU.
    Cheaper,
}

impl From<CpuExperts> for String {
    fn from(c: CpuExperts) -> String {
        c.to_string()
    }
}

impl std::fmt::Display for CpuExperts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CpuExperts::None => f.write_str("none"),
            CpuExperts::All => f.write_str("all"),
            CpuExperts::Layers(n) => write!(f, "layers:{n}"),
            CpuExperts::Misses => f.write_str("misses"),
            CpuExperts::Cheaper => f.write_str("cheaper"),
        }
    }
}

impl CpuExperts {
    /// `--cpu-experts` help: the placements.
    pub const HELP: &'static str = "Where routed experts run: none (all on the GPU, the \
        default), all (every expert on the CPU, nothing paged: llama.cpp --cpu-moe), layers:N \
        (the first N MoE layers' experts on the CPU, the budget counts only the other layers' \
        units: llama.cpp --n-cpu-moe N), misses (a key not resident on the GPU runs on the \
        CPU, its unit paged in off the critical path: ktransformers), cheaper (per missed \
        unit, the faster of paging in and the CPU: Fiddler). Needs --hw and a host profile \
        (--hw-host). The comparison grids take a comma-separated list (an axis); `sim run` takes one";

    /// Parse one placement; the error says what is accepted.
    pub fn parse(s: &str) -> Result<CpuExperts, String> {
        let s = s.trim();
        let bad = || {
            format!(
                "`{s}` is not a placement: give none, all, layers:N (N >= 1), misses or cheaper"
            )
        };
        match s {
            "none" => Ok(CpuExperts::None),
            "all" => Ok(CpuExperts::All),
            "misses" => Ok(CpuExperts::Misses),
            "cheaper" => Ok(CpuExperts::Cheaper),
            _ => {
                let n = s.strip_prefix("layers:").ok_or_else(bad)?;
                match n.parse::<u32>() {
                    Ok(n) if n >= 1 => Ok(CpuExperts::Layers(n)),
                    _ => Err(bad()),
                }
            }
        }
    }

    /// MoE layers whose experts all live on the CPU, of `moe_layers`: all of them for `all`,
    /// min(N, layers) for `layers:N`, none otherwise.
    pub fn cpu_layers(self, moe_layers: usize) -> usize {
        match self {
            CpuExperts::All => moe_layers,
            CpuExperts::Layers(n) => (n as usize).min(moe_layers),
            _ => 0,
        }
    }
}

/// The CPU lane's prices for one run.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuLane {
    pub mode: CpuExperts,
    pub host: HostCostModel,
    /// Weight dtype of the experts (prices the host call).
    pub dtype: DType,
    /// Weight bytes of one expert.
    pub expert_bytes: u64,
    /// Bytes of one token's activation crossing PCIe one way: hidden x 2 (bf16).
    pub activation_bytes_per_token: u64,
    /// Top-k of each MoE layer (a group's slots / top-k = its tokens).
    pub top_k: Vec<u16>,
    /// MoE layers `0 .. cpu_layers` run on the CPU ([`CpuExperts::cpu_layers`]).
    pub cpu_layers: usize,
}

impl CpuLane {
    /// The lane of placement `mode` on `trace` for experts of `expert_bytes` bytes in
    /// `dtype`, priced by `hw`'s host constants. Errors name what is missing: the dtype (an
    /// expert size given in MiB has none), the trace's hidden size, or a host constant
    /// (checked here with one call, so a run that needs it fails before it starts).
    pub fn new(
        mode: CpuExperts,
        hw: &Profile,
        trace: &Trace,
        dtype: Option<DType>,
        expert_bytes: u64,
    ) -> anyhow::Result<CpuLane> {
        let Some(dtype) = dtype else {
            anyhow::bail!("--cpu-experts {mode}: a CPU expert call's price depends on the weight dtype, which --expert-mib does not give; give --dtype int4 or bf16 instead");
        };
        let Some(hidden) = trace.header.model.hidden_size else {
            anyhow::bail!("--cpu-experts {mode}: the activations crossing PCIe are hidden-size vectors, and the trace header of `{}` has no hidden size; use a trace whose header has it (every `sim trace gen --preset` trace does)", trace.header.model.name);
        };
        let host = HostCostModel::new(hw);
        host.expert_call_us(dtype, expert_bytes, 1)?;
        let ks = KeySpace::new(&trace.header.model);
        Ok(CpuLane {
            mode,
            host,
            dtype,
            expert_bytes,
            activation_bytes_per_token: u64::from(hidden) * 2,
            cpu_layers: mode.cpu_layers(ks.num_moe_layers()),
            top_k: ks.top_k,
        })
    }

    /// µs of the CPU calls of `keys` distinct experts of one group over `slots` routed slots:
    /// `keys x call(slots / keys tokens)` (exact with one token per step, where every call is
    /// one token; with a batch each key is priced at the group's mean tokens per key).
    pub fn calls_us(&self, keys: usize, slots: f64) -> Result<f64, ProfileError> {
        if keys == 0 {
            return Ok(0.0);
        }
        let tokens = slots / keys as f64;
        Ok(keys as f64
            * self
                .host
                .expert_call_mean_us(self.dtype, self.expert_bytes, tokens)?)
    }

    /// Bytes of the activations of MoE layer `layer`'s group of `slots` slots, one way.
    pub fn activation_bytes(&self, layer: usize, slots: u32) -> u64 {
        let k = u64::from(self.top_k[layer].max(1));
        u64::from(slots).div_ceil(k) * self.activation_bytes_per_token
    }
}

/// `map` with the experts of MoE layers `0 .. cpu_layers` taken off the GPU: their keys hold
/// no unit (`key_count` 0), and the units only they occupied are gone (the others renumbered
/// in order), so a retention budget of units, bytes or a fraction counts the GPU layers'
/// units only. A unit shared with a GPU layer (a region spanning the boundary) stays.
pub fn gpu_unit_map(map: &UnitMap, ks: &KeySpace, cpu_layers: usize) -> UnitMap {
    if cpu_layers == 0 {
        return map.clone();
    }
    let first_gpu_key = ks.offsets[cpu_layers.min(ks.num_moe_layers())];
    let mut keep = vec![false; map.num_units()];
    for k in first_gpu_key..map.key_first.len() as u32 {
        for u in map.units_of(k) {
            keep[u as usize] = true;
        }
    }
    let mut new_id = vec![u32::MAX; map.num_units()];
    let mut units = Vec::new();
    for (u, info) in map.units.iter().enumerate() {
        if keep[u] {
            new_id[u] = units.len() as u32;
            units.push(info.clone());
        }
    }
    let (mut key_first, mut key_count) = (map.key_first.clone(), map.key_count.clone());
    for k in 0..key_first.len() {
        if (k as u32) < first_gpu_key {
            key_first[k] = 0;
            key_count[k] = 0;
        } else {
            key_first[k] = new_id[key_first[k] as usize];
        }
    }
    UnitMap {
        key_first,
        key_count,
        units,
        ..map.clone()
    }
}

/// Refuse a placement the engine does not model on `map` with `predictor`: `misses` and
/// `cheaper` decide per commit unit on VMM paging (a unit's page-in price), so OS paging
/// (`os*`) is refused, and they replace the demand page-ins a prefetch predictor works
/// around, so a predictor is refused with them.
pub fn check(
    mode: CpuExperts,
    map: &UnitMap,
    predictor: super::PredictorKind,
) -> Result<(), anyhow::Error> {
    if !matches!(mode, CpuExperts::Misses | CpuExperts::Cheaper) {
        return Ok(());
    }
    if map.paging != policies::mechanisms::Paging::Vmm {
        anyhow::bail!(
            "--cpu-experts {mode} decides per VMM commit unit; --policy {} pages through the OS: give an e* or region:* mechanism, or --cpu-experts all or layers:N",
            map.spec
        );
    }
    if predictor != super::PredictorKind::None {
        anyhow::bail!(
            "--cpu-experts {mode} runs misses on the CPU instead of prefetching them; drop --predictor (or use --cpu-experts layers:N)"
        );
    }
    Ok(())
}

/// The `cpu` block of a replay `r` of `plans` whose lane was `lane`, on profile `profile`.
pub fn report(
    lane: &CpuLane,
    profile: &str,
    r: &super::Replay,
) -> reports::cpu_lane::CpuLaneReport {
    let c = &r.cpu;
    let steps = r.detail.steps.max(1) as f64;
    let tokens = r.detail.tokens.max(1) as f64;
    let keys = r.keys;
    let ms = |us: f64| us / steps / 1e3;
    reports::cpu_lane::CpuLaneReport {
        placement: lane.mode.to_string(),
        host_profile: profile.to_string(),
        cpu_layers: lane.cpu_layers,
        experts_on_cpu: c.experts,
        experts_on_cpu_per_token: c.experts as f64 / tokens,
        cpu_share: c.experts as f64 / keys.max(1) as f64,
        cpu_lane_ms_per_step: ms(c.calls_us + c.activation_us),
        cpu_calls_ms_per_step: ms(c.calls_us),
        activation_ms_per_step: ms(c.activation_us),
        cpu_wait_ms_per_step: ms(c.wait_us),
        background_page_ins: (lane.mode == CpuExperts::Misses).then_some(c.background_page_ins),
        cheaper_paged: (lane.mode == CpuExperts::Cheaper).then_some(c.cheaper_paged),
    }
}

/// The unit map and configuration a run of `cfg` uses: without a CPU placement, `map` and
/// `None` (the run as given); with one, `map` without the CPU layers' units
/// ([`gpu_unit_map`]) and `cfg` with the run's expert dtype (`dtype`, which prices the CPU
/// calls) and its retention fitted to the GPU's bank, with notes saying what changed:
/// a budget of units or bytes above the GPU's bank holds all of it; with no unit left on the
/// GPU (`all`, or `layers:N` over every MoE layer) nothing is paged and the retention
/// settings are dropped (a batch, queue or tokens/s target is then an error: those need the
/// cache regime).
pub fn placed(
    cfg: &crate::runner::RunConfig,
    map: UnitMap,
    trace: &Trace,
    dtype: Option<DType>,
) -> anyhow::Result<(UnitMap, Option<crate::runner::RunConfig>, Vec<String>)> {
    let Some(t) = cfg
        .timing
        .as_ref()
        .filter(|t| t.cpu_experts != CpuExperts::None)
    else {
        return Ok((map, None, Vec::new()));
    };
    let ks = trace.keyspace();
    let mode = t.cpu_experts;
    if let CpuExperts::Layers(n) = mode {
        let moe = ks.num_moe_layers();
        anyhow::ensure!(
            n as usize <= moe,
            "--cpu-experts layers:{n}: the trace's model has {moe} MoE layers; give N <= {moe} (or --cpu-experts all)"
        );
    }
    let gpu = gpu_unit_map(&map, &ks, mode.cpu_layers(ks.num_moe_layers()));
    let mut out = cfg.clone();
    out.timing = Some(super::TimingConfig {
        expert_dtype: dtype,
        ..t.clone()
    });
    let mut notes = Vec::new();
    if let Some(rc) = &mut out.retention {
        let units = gpu.num_units();
        if units == 0 {
            let b = rc.batching;
            if b.batch > 1 || b.queue.is_some() || rc.target.is_some() {
                anyhow::bail!("--cpu-experts {mode} leaves no expert on the GPU: nothing is paged, so --batch, --queue and --target-tokens-per-s do not apply; drop them (or place fewer layers on the CPU)");
            }
            out.retention = None;
            notes.push(format!("note: --cpu-experts {mode} leaves no expert on the GPU: nothing is paged, the retention settings (--budget, --evict) do not apply"));
        } else {
            let max_unit = gpu
                .units
                .iter()
                .map(|u| u.committed_bytes)
                .max()
                .unwrap_or(1);
            let held = match rc.cache.budget {
                policies::Budget::Units(n) => Some(n as u128),
                policies::Budget::Bytes(b) => Some(u128::from(b / max_unit.max(1))),
                policies::Budget::Fraction { .. } => None,
            };
            if held.is_some_and(|n| n > units as u128) {
                notes.push(format!("note: --budget {} is above the GPU's bank under --cpu-experts {mode} ({units} units): every GPU unit fits", rc.cache.budget));
                rc.cache.budget = policies::Budget::Units(units as u64);
            }
        }
    }
    Ok((gpu, Some(out), notes))
}
