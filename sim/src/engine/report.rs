//! What a timed replay reports: the `timing` block (exact keys) and the details beside it.

use serde::{Deserialize, Serialize};

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
