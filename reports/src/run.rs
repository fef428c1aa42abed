//! The typed blocks of a run report (`sim run --json`, one entry of `results.json`): the
//! simulator builds and serializes them, and reports read them back, so both sides use these
//! definitions. Field order and names are the JSON keys, in order; changing them changes every
//! result file.

use serde::{Deserialize, Serialize};

/// Streaming-regime metrics of one mechanism on one trace. The JSON keys are part of the
/// interface (`sim run --json`'s `streaming` block); MiB = 2^20 bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamingMetrics {
    /// Committed bytes of hot units, MiB per MoE layer per step.
    pub resident_mib_per_layer_step: f64,
    /// Useful bytes of hot units (what an H2D copy moves), MiB per MoE layer per step.
    pub transfer_mib_per_layer_step: f64,
    /// Distinct experts inside hot units, per MoE layer per step.
    pub resident_experts_per_layer_step: f64,
    /// Hot units, per MoE layer per step.
    pub hot_units_per_layer_step: f64,
    /// Committed bytes / useful bytes over all units (>= 1).
    pub waste_factor: f64,
    /// Resident experts / selected experts, a ratio (>= 1; 1.0 = 100%).
    pub selectivity: f64,
    /// Units hot in every step.
    pub always_on_units: u64,
    /// Units / MoE layers (fractional when regions span layers).
    pub units_per_layer: f64,
    /// Committed bytes of all units, MiB.
    pub committed_mib_total: f64,
    /// Useful bytes of all units (the whole expert bank), MiB.
    pub useful_mib_total: f64,
}

/// The `cache` block of a run report (exact JSON keys).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheReport {
    /// Tokens (requests) decoded.
    pub tokens: u64,
    /// Unit accesses (each unit at most once per group).
    pub accesses: u64,
    /// Accesses to a non-resident unit, first touches included; static pins excluded.
    pub page_ins: u64,
    /// page_ins / tokens.
    pub page_ins_per_token: f64,
    /// page_ins / accesses.
    pub miss_rate: f64,
    /// Useful bytes of every paged-in unit, summed, / tokens (bytes). Units of unequal
    /// useful bytes (regions, the last OS page of an expert) contribute their actual bytes.
    pub bytes_per_token: f64,
    /// Units evicted from VRAM (streamed units of static pin are not evictions).
    pub evictions: u64,
    /// The budget in units (summed over pools for the per-layer split).
    pub budget_units: u64,
    /// Largest committed bytes resident, measured after each group (group semantics) or
    /// each access (access semantics) completes, pins included, in MiB (2^20 bytes).
    pub peak_resident_mib: f64,
}

/// The `timing` block of `sim run --hw ... --json`, exactly these keys. Times per step are
/// means over decode steps (one step = one token of every sequence in the batch).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimingReport {
    /// Step latency percentiles (hdrhistogram, 3 significant digits), ms.
    pub step_ms_p50: f64,
    pub step_ms_p90: f64,
    pub step_ms_p99: f64,
    /// Exact slowest step, ms.
    pub step_ms_max: f64,
    /// Exact mean step, ms.
    pub step_ms_mean: f64,
    /// Tokens decoded (all sequences) per second of simulated time.
    pub tokens_per_s: f64,
    /// Busy time of the compute stream per step, ms.
    pub compute_ms_per_step: f64,
    /// Busy time of the copy engine (H2D copies, VMM-unit prefetches) per step, ms.
    pub h2d_ms_per_step: f64,
    /// Busy time of the driver (VMM calls, deferred ones included) per step, ms.
    pub vmm_ms_per_step: f64,
    /// Busy time of the fault handler (OS demand paging) per step, ms.
    pub fault_ms_per_step: f64,
    /// Time the compute stream waited for units to become resident, per step, ms.
    pub stall_ms_per_step: f64,
    /// Largest mapped physical memory (non-expert weights + KV cache + committed expert
    /// units, prefetched and not-yet-unmapped ones included), MiB.
    pub peak_mapped_mib: f64,
    /// cuMemMap calls (one per granule mapped).
    pub map_calls: u64,
    /// cuMemUnmap calls (one per granule unmapped).
    pub unmap_calls: u64,
    /// Units prefetched ahead of their group.
    pub prefetch_issued: u64,
    /// Prefetched units that a group then paged in (the prefetch replaced a demand page-in).
    pub prefetch_used: u64,
}

/// Details of a timed replay beyond the `timing` block.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimingDetail {
    /// Profile name.
    pub profile: String,
    pub steps: u64,
    pub tokens: u64,
    /// Simulated time of the whole replay, ms.
    pub total_ms: f64,
    /// Demand and prefetched page-ins the plan asked for.
    pub page_ins: u64,
    /// Prefetched units no group paged in before their target group passed (unmapped again).
    pub prefetch_wasted: u64,
    /// Useful bytes copied or faulted in (demand and prefetch, used or not).
    pub bytes_in: u64,
    /// Page-ins priced above 90% of usable VRAM (on the oversubscription curve).
    pub oversubscribed_page_ins: u64,
    /// The profile's usable VRAM, MiB.
    pub usable_mib: f64,
}

/// The engine's time split of one decode step, µs: what each resource was busy with while
/// the step ran (the `timing` block's per-step means, step by step), for comparing with a
/// real replay's breakdown (`sim validate`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepParts {
    /// Compute stream: non-expert compute and expert compute.
    pub compute_us: f64,
    /// Of which expert compute.
    pub expert_us: f64,
    /// Host round trips to learn the router's selection (`router_sync` per group).
    pub host_sync_us: f64,
    /// Driver: VMM commits of page-ins (prefetches included).
    pub commit_us: f64,
    /// Driver: VMM decommits of evictions.
    pub decommit_us: f64,
    /// Copy engine: H2D copies (and prefetches).
    pub copy_us: f64,
    /// Fault handler: OS demand faults.
    pub fault_us: f64,
    /// Compute stream waiting for units to become resident.
    pub stall_us: f64,
    /// Groups (MoE layers) of the step.
    pub groups: u32,
}
