//! The run report ([`RunReport`], the object `sim run --json` prints and one entry of
//! `results.json` holds) and its typed blocks: the simulator builds and serializes them, and
//! reports read them back, so both sides use these definitions. Field order and names are the
//! JSON keys, in order; changing them changes every result file. The settings echoed in the
//! `retention` block (budget, split, semantics, schedule, policy) are defined in `policies`.

use policies::{Budget, PolicyKind, Schedule, Semantics, Split};
use serde::{Deserialize, Serialize};
use traces::{DType, PhaseSel};

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

/// The `prefetch` block of a timed run with a predictor (`--predictor` other than `none`):
/// what the predictor issued, what became of it, and how much stall it hid, against the same
/// plan replayed without prefetch (`none`) and with the `oracle` bound. Every issued prefetch
/// ends as exactly one of used, late, wasted or cancelled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefetchReport {
    /// The `--predictor` name.
    pub predictor: String,
    /// The prefetch lead, MoE layers (`--window`).
    pub window: usize,
    /// Where the predictor's knowledge came from: `profile` (the profile trace only),
    /// `online` (the evaluated trace's earlier tokens only) or `future` (the oracle).
    pub learns_from: String,
    /// Units prefetched (predicted and neither resident nor already in flight).
    pub issued: u64,
    /// Prefetched units a group then paged in, resident by that group's router.
    pub used: u64,
    /// Prefetched units a group then paged in while still in flight: it waited for the rest.
    pub late: u64,
    /// Prefetched units no group paged in before their target group passed (unmapped again).
    pub wasted: u64,
    /// Page-ins of the plan: all of them on demand with `--predictor none`.
    pub page_ins: u64,
    /// (used + late) / issued; `None` when nothing was issued.
    pub precision: Option<f64>,
    /// (used + late) / page_ins; `None` when the plan pages nothing in.
    pub recall: Option<f64>,
    /// Useful bytes of the wasted prefetches / tokens.
    pub wasted_bytes_per_token: f64,
    /// Stall per step of this run, ms (`timing.stall_ms_per_step`).
    pub stall_ms_per_step: f64,
    /// Stall per step of the same plan without prefetch, ms.
    pub stall_ms_per_step_none: f64,
    /// Stall per step of the same plan with the oracle at the same window, ms.
    pub stall_ms_per_step_oracle: f64,
    /// stall_ms_per_step_none - stall_ms_per_step (negative when the prefetches delay
    /// demand page-ins more than they save).
    pub stall_hidden_ms_per_step: f64,
    /// stall_hidden_ms_per_step / the oracle's; `None` when the oracle hides nothing.
    pub stall_hidden_of_oracle: Option<f64>,
    /// The issue policy (`--prefetch-issue`); absent under `legacy`, whose prefetches start
    /// at once and are never cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue: Option<String>,
    /// The cap on prefetch bytes in flight, MiB (`--prefetch-cap`); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_mib: Option<f64>,
    /// The staging buffer of started prefetches, units (`--prefetch-buffer`); absent
    /// without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_units: Option<usize>,
    /// The confidence cut (`--prefetch-min-score`): predictions below this fraction of their
    /// prediction's best score were not issued, so precision and recall are against the cut.
    /// Absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f64>,
    /// With `--prefetch-min-score auto`: which cut was chosen on the profile trace and why
    /// (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score_auto: Option<String>,
    /// Prefetches queued and dropped before they started (their target group's router came,
    /// or a demand page-in took the unit); they count in `issued`. Absent under `legacy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<u64>,
    /// Per step, how long demand work waited for prefetches already started on the driver
    /// or the copy engine (a driver call or copy cannot be preempted), ms. Absent under
    /// `legacy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_ms_per_step: Option<f64>,
    /// Precision and recall against the confidence cut: per cut (0.1, 0.2, ..., 1 of the
    /// prediction's best score), the issued prefetches scoring at least it and the
    /// precision and recall of those alone, the rest of the run as it was. Absent under
    /// `legacy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_curve: Option<Vec<CutPoint>>,
}

/// One point of [`PrefetchReport::cut_curve`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CutPoint {
    /// The cut, a fraction of the prediction's best score.
    pub min_score: f64,
    /// Issued prefetches scoring at least the cut.
    pub issued: u64,
    /// Of those, the fraction a group paged in (used or late); `None` when none.
    pub precision: Option<f64>,
    /// Of the plan's page-ins, the fraction those caught; `None` without page-ins.
    pub recall: Option<f64>,
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
    /// Per-tier time of the page-ins, with `--dram`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<crate::tier_timing::TierTiming>,
    /// Every step's latency, or quantiles of them in a long run, for the report's CDF;
    /// kept by `sim compare` only (`results.json`, not `results.csv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_latency: Option<crate::step_latency::StepLatencies>,
    /// The constants the run priced outside their measured domain; empty (and left out of
    /// the JSON) when every price lay inside.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside_range: Vec<OutsideRange>,
    /// Most VMM granules live at once (absent: none, or OS paging). In-process only (not
    /// written, so result files stay as they were): `sim run` places the run against the
    /// validated regions with it (`gpu::validation::checked`).
    #[serde(skip)]
    pub peak_live_granules: Option<f64>,
}

/// One constant a timed run used outside the range its fit was measured over.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutsideRange {
    /// The profile constant (`vmm_commit_busy_live_slope`).
    pub constant: String,
    /// The regressor in words (`live granules`).
    pub regressor: String,
    /// The largest level the run priced at.
    pub value: f64,
    /// The measured range of the regressor.
    pub measured_min: f64,
    pub measured_max: f64,
    /// value / measured_max: how far past the range.
    pub distance: f64,
    /// Share of the run's simulated time spent in the calls priced past the range (their
    /// priced time / the run's time).
    pub share: f64,
    /// How they were priced: `clamped` (at the range's edge), `extrapolated`.
    pub priced: String,
}

impl OutsideRange {
    /// One line: `vmm_commit_busy_live_slope: live granules 40,832, measured 0..6,144: 6.6x,
    /// 87% of the time priced so (clamped at the edge)`.
    pub fn line(&self) -> String {
        use profile::constant::level;
        format!(
            "{}: {} {}, measured {}..{}: {:.1}x, {:.0}% of the time priced so ({})",
            self.constant,
            self.regressor,
            level(self.value.round()),
            level(self.measured_min),
            level(self.measured_max),
            self.distance,
            100.0 * self.share,
            if self.priced == "clamped" {
                "clamped at the edge"
            } else {
                "extrapolated"
            }
        )
    }
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

/// The `steps` block of a run with several tokens per step (`--verify K`, `--prefill-chunk
/// C`): how many tokens the steps took and produced, the union of experts each step's MoE
/// layers read, the page-ins by phase, and (on a hardware profile) whether verification pays
/// against one token per step. A group is one (step, MoE layer): its union is over the
/// chunks of every sequence of the step (one chunk at batch 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepsReport {
    /// Drafted tokens verified per decode step (`--verify K`).
    pub verify: u32,
    /// Probability that a draft is accepted (`--acceptance P`); `None` with `--accepted`.
    pub acceptance: Option<f64>,
    /// Drafts every step accepts (`--accepted N`); `None` with `--acceptance`.
    pub accepted: Option<u32>,
    /// Prompt tokens per prefill step (`--prefill-chunk C`); `None`: one per step.
    pub prefill_chunk: Option<u32>,
    /// Decode chunks (one per sequence per decode step) and the tokens they produced.
    pub decode_chunks: u64,
    pub decode_tokens: u64,
    /// decode_tokens / decode_chunks: tokens per sequence per decode step.
    pub tokens_per_step: f64,
    /// The same expected from the acceptance: (1 - P^(K+1)) / (1 - P), or N + 1.
    pub expected_tokens_per_step: f64,
    /// Distinct experts per decode group (MoE layer of a decode step): mean, 50th and 99th
    /// percentile (hdrhistogram, exact for these counts).
    pub union_mean: f64,
    pub union_p50: u64,
    pub union_p99: u64,
    /// Routed (token, expert) slots per decode group, mean (tokens x top-k over the step).
    pub slots_mean: f64,
    /// Steps that processed prompt tokens, and the distinct experts per MoE layer of theirs
    /// (mean; `None` without prompt steps).
    pub prefill_steps: u64,
    pub prefill_union_mean: Option<f64>,
    /// Page-ins of the groups of prompt steps, and of decode steps (all of a group's
    /// accessed units in the streaming regime).
    pub prefill_page_ins: u64,
    pub decode_page_ins: u64,
    /// decode_page_ins / decode_tokens.
    pub decode_page_ins_per_token: f64,
    /// Whether the expert kernel priced the slots that repeat an expert (the profile holds
    /// `expert_kernel_repeat_bandwidth`); `None` without timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_slots_priced: Option<bool>,
    /// The same run with one token per decode step (K = 0): its tokens per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_tokens_per_s: Option<f64>,
    /// tokens_per_s / baseline_tokens_per_s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// Mean decode step time over the baseline's (how much a verify step costs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_cost_ratio: Option<f64>,
    /// The smallest acceptance P, to 1/128, at which the same setting verifying K drafts
    /// accepted with probability P reaches baseline_tokens_per_s (a bisection over simulated
    /// runs with this run's seed; 0: verification pays at any acceptance); `None` without
    /// timing (no step_cost_ratio) or when it does not pay even at P = 1.
    #[serde(default)]
    pub break_even_acceptance: Option<f64>,
}

/// The resolved inputs of a run, echoed so a result file documents itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunInputs {
    /// Canonical mechanism spec (`e2` resolves to `e2:hot`).
    pub policy: String,
    /// The trace's path as given, or `embedded:prose`.
    pub trace: String,
    /// The profile trace (the trace itself unless `--profile-trace` was given).
    pub profile_trace: String,
    pub phase: PhaseSel,
    /// Model name from the trace header.
    pub model: String,
    /// MoE layers (layers with routed experts).
    pub moe_layers: usize,
    /// Steps replayed: tokens of the selected phases over all sequences.
    pub tokens: u64,
    /// Dtype the expert size was derived with; `null` when `--expert-mib` set it.
    pub dtype: Option<DType>,
    /// Bytes of one expert, and the same in MiB.
    pub expert_bytes: u64,
    pub expert_mib: f64,
    /// Commit granularity of the mechanism in bytes: the VMM granule, or the OS page size.
    pub granule_bytes: u64,
}

impl RunInputs {
    /// The trace as summaries name it: `PATH (MODEL, N MoE layers, T PHASE tokens)`.
    pub fn trace_text(&self) -> String {
        format!(
            "{} ({}, {} MoE layers, {} {} tokens)",
            self.trace,
            self.model,
            self.moe_layers,
            self.tokens,
            self.phase.as_str()
        )
    }
}

/// The result of one run (`sim run --json`, and one entry of `results.json` beside its grid
/// coordinates). Blocks other than `inputs` are optional and left out when `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub inputs: RunInputs,
    /// Streaming-regime metrics (nothing retained across steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<StreamingMetrics>,
    /// Retention inputs echo (policy, budget as given, split, semantics, batching).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionInputs>,
    /// Cache-regime totals under the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheReport>,
    /// DRAM/SSD tier totals, with `--dram`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<TiersReport>,
    /// Batching summary, with `--queue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleReport>,
    /// Smallest budget reaching a tokens-per-second target, with `--target-tokens-per-s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<TargetReport>,
    /// Step latencies and the time split on a hardware profile, with `--hw`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<TimingReport>,
    /// Details of the timed replay beside the `timing` block (profile, totals, wasted prefetches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing_detail: Option<TimingDetail>,
    /// The predictor's accuracy and the stall it hid, with a `--predictor` other than `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<PrefetchReport>,
    /// Batch admission under `--admission-cap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    /// Tokens per step, unions and the break-even acceptance, with `--verify` or
    /// `--prefill-chunk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<StepsReport>,
    /// The CPU lane (experts computed on the host), with `--cpu-experts` other than `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<crate::cpu_lane::CpuLaneReport>,
    /// "Policy or working set?": LRU's page-ins against Belady/MIN's at the same budget, and
    /// the budget LRU needs to match them, with `sim run --evict lru --vs-belady`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_belady: Option<VsBelady>,
    /// Lines for the user about what the run wrote or left out (not part of the result, so
    /// not in the JSON; empty in a run read back from a file).
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// The `vs_belady` block: is the policy losing to the optimum, or is the working set too
/// large? At the run's budget, split and semantics: Belady/MIN's page-ins from its exact curve
/// (`sim curve`), and the budget the run's policy needs to do as well.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VsBelady {
    /// The run's eviction policy.
    pub policy: PolicyKind,
    /// The run's budget, in units.
    pub budget_units: u64,
    /// The policy's page-ins at that budget (the `cache` block's).
    pub policy_page_ins: u64,
    /// Belady/MIN's page-ins at the same budget.
    pub belady_page_ins: u64,
    /// The smallest budget, in units, at which the policy's page-ins are at most Belady's
    /// here (the per-layer split: a budget of that many units split as `--budget <units>`
    /// splits it); `None` when no budget of the bank is enough.
    pub policy_budget_matching_belady: Option<u64>,
    /// How that budget was found: `exact-curve` (LRU and Belady/MIN, stack policies: their
    /// one-pass curve) or `bisection` (any other policy: runs at budgets halving the
    /// interval, which assumes its page-ins do not rise with the budget; FIFO can break
    /// that, Belady's anomaly, so the budget is one that matches, maybe not the smallest).
    pub matched_by: String,
}

/// The retention inputs echoed in a run report (the `retention` block).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetentionInputs {
    pub evict: PolicyKind,
    /// The budget as given (`25%`, `192 units`, bytes); `cache.budget_units` is the resolved count.
    pub budget: Budget,
    pub split: Split,
    pub semantics: Semantics,
    pub batch: usize,
    pub queue: Option<usize>,
    pub schedule: Schedule,
    pub dram: Option<Budget>,
    pub seed: u64,
    /// `binary` or `scan`, for the target search (policy monotone in the budget or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_search: Option<String>,
    /// `recorded` when the trace's own forward passes were replayed, `continuous` when a
    /// continuous-batching scheduler formed them (`--batching`; `batch` is then unused);
    /// absent for the round-robin batches of `batch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batching: Option<String>,
    /// With `continuous` batching: requests running at once and tokens per pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seqs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batched_tokens: Option<u32>,
}

/// How the DRAM tier of `--dram` holds experts (`--dram-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DramMode {
    /// An exclusive LRU tier of experts in pinned host memory (a unit leaving VRAM enters it,
    /// a DRAM hit leaves it); copies at the profile's `h2d_bandwidth`.
    #[default]
    Pinned,
    /// The OS page cache of the expert file, read through `mmap` (llama.cpp's default): an
    /// inclusive LRU of the units read, which VRAM evictions leave alone; copies from
    /// pageable memory at `h2d_pageable_bandwidth`.
    PageCache,
}

impl DramMode {
    /// The mode's `--dram-mode` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DramMode::Pinned => "pinned",
            DramMode::PageCache => "page-cache",
        }
    }

    /// Whether this is the default mode (left out of the JSON, so older reports match).
    pub fn is_pinned(&self) -> bool {
        *self == DramMode::Pinned
    }
}

/// The `tiers` block of a run report (exact JSON keys; totals over the run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TiersReport {
    /// How the DRAM tier holds experts; `mode` is present only for `page-cache`.
    #[serde(default, skip_serializing_if = "DramMode::is_pinned")]
    pub mode: DramMode,
    /// Page-ins served from DRAM (a PCIe copy).
    pub dram_hits: u64,
    /// Page-ins of units never touched before (first read from SSD).
    pub ssd_compulsory: u64,
    /// Page-ins from SSD of units touched before but in neither VRAM nor DRAM.
    pub ssd_capacity: u64,
}

/// The `schedule` block of a run report (exact JSON keys).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleReport {
    /// Unit accesses (sum of every group's union) per token.
    pub unions_per_token: f64,
    /// Dispatch delay (dispatch rank minus arrival rank, in requests; negative when a
    /// request overtook older ones) at the 50th percentile.
    pub delay_p50: i64,
    /// ... at the 99th percentile.
    pub delay_p99: i64,
    /// ... the largest.
    pub delay_max: i64,
}

/// Answer of a target search: the smallest budget reaching a tokens-per-second target when
/// every page-in crosses the link (the `target` block).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetReport {
    /// Tokens per second asked for.
    pub target_tokens_per_s: f64,
    /// Link bandwidth, GB/s (10^9 bytes per second).
    pub link_gbps: f64,
    /// Smallest budget (units, the value given to `--budget`) that reaches the target, or
    /// `None` when even the whole bank does not.
    pub budget_units: Option<u64>,
    /// bytes_per_token at that budget (at the whole bank when no budget reaches the target).
    pub bytes_per_token: f64,
    /// Transfer-floor tokens per second at that budget: link bytes/s / bytes_per_token
    /// (`None` when nothing crosses the link: unbounded by transfers).
    pub tokens_per_s: Option<f64>,
    /// `binary` (policy monotone in the budget) or `scan` (every unit count tried).
    pub search: String,
    /// Simulations run.
    pub evaluations: u64,
}

/// The outcome of batch admission under a cap (the `admission` block): how many sequences
/// were asked for and how many run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Admission {
    pub requested: usize,
    pub admitted: usize,
    /// The cap as a fraction of usable VRAM; `None`: no admission control (all admitted).
    pub cap: Option<f64>,
    /// cap x usable VRAM, MiB; `None` without a cap.
    pub limit_mib: Option<f64>,
}

impl Admission {
    /// A batch of `batch` sequences run without admission control: all admitted, no cap.
    /// `sim sweep --admission-cap` gives its uncapped rows this block so that every row of
    /// its JSON says whether it was capped.
    pub fn uncapped(batch: usize) -> Admission {
        Admission {
            requested: batch,
            admitted: batch,
            cap: None,
            limit_mib: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget and a policy read back from their JSON text are the same values and write
    /// the same text again (results files are re-serialized when shards are merged).
    #[test]
    fn retention_echo_round_trips() {
        for s in [
            "25%", "12.5%", "0.25%", "100%", "1", "192", "3GiB", "1048576B", "2GB",
        ] {
            let b = Budget::parse(s).unwrap();
            let json = serde_json::to_string(&b).unwrap();
            let back: Budget = serde_json::from_str(&json).unwrap();
            assert_eq!(back, b, "{s} -> {json}");
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
        assert_eq!(
            serde_json::to_string(&Budget::Units(1)).unwrap(),
            "\"1 unit\""
        );
        assert_eq!(
            serde_json::to_string(&Budget::Units(192)).unwrap(),
            "\"192 units\""
        );
        assert_eq!(
            serde_json::to_string(&Budget::Bytes(3 << 30)).unwrap(),
            "\"3221225472 B\""
        );
        assert!(serde_json::from_str::<Budget>("\"lots\"").is_err());
        for k in PolicyKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(serde_json::from_str::<PolicyKind>(&json).unwrap(), k);
        }
        let r = RetentionInputs {
            evict: PolicyKind::PinLru,
            budget: Budget::parse("12.5%").unwrap(),
            split: Split::PerLayer,
            semantics: Semantics::Access,
            batch: 4,
            queue: Some(8),
            schedule: Schedule::RouteAware,
            dram: Some(Budget::Units(3)),
            seed: 7,
            target_search: None,
            batching: None,
            max_seqs: None,
            max_batched_tokens: None,
        };
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(
            json,
            r#"{"evict":"pin-lru","budget":"12.5%","split":"per-layer","semantics":"access","batch":4,"queue":8,"schedule":"route-aware","dram":"3 units","seed":7}"#
        );
        let back: RetentionInputs = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
    }
}
