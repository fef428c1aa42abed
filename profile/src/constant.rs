//! One cost constant: value, unit, optional measured range, and where it came from.

use serde::{Deserialize, Serialize};

/// Physical dimension of a constant; fixes which units are accepted and the canonical unit
/// [`Constant::canonical`] converts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dimension {
    /// Memory size. Units `B`, `KiB`, `MiB`, `GiB`; canonical: bytes.
    Bytes,
    /// Duration. Units `ns`, `us` (or `µs`), `ms`, `s`; canonical: µs.
    Time,
    /// Throughput. Units `MB/s`, `GB/s`, `TB/s` (decimal), `GiB/s`; canonical: bytes per µs.
    Bandwidth,
    /// Dimensionless ratio. Unit `ratio`; canonical: the value itself.
    Ratio,
}

impl Dimension {
    /// Accepted units and their factor to the canonical unit.
    pub fn units(self) -> &'static [(&'static str, f64)] {
        match self {
            Dimension::Bytes => &[
                ("B", 1.0),
                ("KiB", 1024.0),
                ("MiB", 1024.0 * 1024.0),
                ("GiB", 1024.0 * 1024.0 * 1024.0),
            ],
            Dimension::Time => &[
                ("ns", 1e-3),
                ("us", 1.0),
                ("µs", 1.0),
                ("ms", 1e3),
                ("s", 1e6),
            ],
            // bytes per µs: 1 GB/s = 1e9 B / 1e6 µs = 1e3 B/µs
            Dimension::Bandwidth => &[
                ("MB/s", 1.0),
                ("GB/s", 1e3),
                ("TB/s", 1e6),
                ("GiB/s", 1024.0 * 1024.0 * 1024.0 / 1e6),
            ],
            Dimension::Ratio => &[("ratio", 1.0)],
        }
    }

    /// Factor from `unit` to the canonical unit, or `None` when the unit does not fit.
    pub fn factor(self, unit: &str) -> Option<f64> {
        self.units()
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|&(_, f)| f)
    }

    /// The accepted units as a comma-separated list, for error messages.
    pub fn unit_list(self) -> String {
        self.units()
            .iter()
            .map(|(u, _)| *u)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

macro_rules! constant_names {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal : $dim:ident ),* $(,)?) => {
        /// The catalogue of cost constants a profile may hold. The JSON key of each is its
        /// [`ConstantName::as_str`] name; per-granule VMM costs are per 2 MiB granule call.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ConstantName {
            $( $(#[$doc])* $variant, )*
        }

        impl ConstantName {
            /// Every constant, in catalogue order.
            pub const ALL: &'static [ConstantName] = &[ $( ConstantName::$variant, )* ];

            /// The JSON key.
            pub fn as_str(self) -> &'static str {
                match self { $( ConstantName::$variant => $name, )* }
            }

            /// The physical dimension (which units are accepted).
            pub fn dimension(self) -> Dimension {
                match self { $( ConstantName::$variant => Dimension::$dim, )* }
            }

            /// Parse a JSON key.
            pub fn parse(s: &str) -> Option<ConstantName> {
                match s { $( $name => Some(ConstantName::$variant), )* _ => None }
            }
        }
    };
}

constant_names! {
    /// Total device memory (cuMemGetInfo total).
    VramTotal = "vram_total": Bytes,
    /// Memory free to the application at idle (cuMemGetInfo free); the oversubscription curve
    /// and the admission cap are relative to it.
    VramUsable = "vram_usable": Bytes,
    /// Fraction of usable VRAM past which the runtime refuses growth.
    AdmissionCap = "admission_cap": Ratio,
    /// VMM allocation granule (cuMemGetAllocationGranularity).
    VmmGranule = "vmm_granule": Bytes,
    /// cuMemCreate, per granule.
    CuMemCreate = "cu_mem_create": Time,
    /// cuMemMap, per granule.
    CuMemMap = "cu_mem_map": Time,
    /// cuMemSetAccess, per granule (one call per granule).
    CuMemSetAccess = "cu_mem_set_access": Time,
    /// cuMemUnmap, per granule.
    CuMemUnmap = "cu_mem_unmap": Time,
    /// cuMemRelease, per granule.
    CuMemRelease = "cu_mem_release": Time,
    /// Commit (create + map + set access) per granule, for profiles where only the sum was
    /// measured, or measured as a page-in does it (`sim calibrate`: per unit, one granule at a
    /// time, then the H2D enqueue, slope of the fit over unit sizes); used instead of the three
    /// calls when present.
    VmmCommit = "vmm_commit": Time,
    /// Decommit (unmap + release) per granule, where only the sum was measured or measured per
    /// unit as an eviction does it (slope of the fit over unit sizes).
    VmmDecommit = "vmm_decommit": Time,
    /// Fixed driver cost per committed unit (per page-in call sequence), on top of the
    /// per-granule cost; optional term.
    VmmCommitFixed = "vmm_commit_fixed": Time,
    /// Fixed driver cost per decommitted unit (per eviction), on top of the per-granule cost.
    VmmDecommitFixed = "vmm_decommit_fixed": Time,
    /// Bandwidth of an expert page-in copy host to device (the copy engine's rate).
    H2dBandwidth = "h2d_bandwidth": Bandwidth,
    /// Peak H2D from pinned memory in a copy benchmark (informational).
    H2dPinnedBandwidth = "h2d_pinned_bandwidth": Bandwidth,
    /// H2D from pageable host memory (informational).
    H2dPageableBandwidth = "h2d_pageable_bandwidth": Bandwidth,
    /// Fixed latency of one H2D copy; optional term.
    H2dLatency = "h2d_latency": Time,
    /// Rate at which a decode kernel reads device-resident weights.
    DeviceReadBandwidth = "device_read_bandwidth": Bandwidth,
    /// Rate at which a kernel reads memory that lives in host RAM over the bus (zero-copy
    /// reads of host-registered memory). Prices compute touches of the memory the driver
    /// demoted to host RAM when mapped memory exceeds usable VRAM (WDDM oversubscription).
    HostReadBandwidth = "host_read_bandwidth": Bandwidth,
    /// Throughput of demand faults of managed memory (host-resident pages touched on the GPU).
    FaultBandwidth = "fault_bandwidth": Bandwidth,
    /// Throughput of a managed-memory prefetch (cuMemPrefetchAsync) to the device.
    PrefetchBandwidth = "prefetch_bandwidth": Bandwidth,
    /// Launch of one tiny kernel, back to back.
    KernelLaunch = "kernel_launch": Time,
    /// First touch of a fresh granule below 90% of usable VRAM (base of the fill-level curve).
    FirstTouchBelow90 = "first_touch_below_90": Time,
    /// First touch of a fresh granule at 90-100% of usable VRAM.
    FirstTouch90To100 = "first_touch_90_100": Time,
    /// First touch of a fresh granule above 100% of usable VRAM (oversubscribed).
    FirstTouchAbove100 = "first_touch_above_100": Time,
    /// Commit (cuMemCreate + cuMemMap + cuMemSetAccess, one granule at a time as a page-in
    /// does it) per granule with no other granule mapped: the intercept of the fit over live
    /// mapping counts. With [`ConstantName::VmmCommitLiveSlope`] it replaces the three calls.
    VmmCommitLiveBase = "vmm_commit_live_base": Time,
    /// Commit time added per granule for every 1024 granules already mapped (slope of the
    /// same fit): VMM calls slow down as the driver tracks more mappings.
    VmmCommitLiveSlope = "vmm_commit_live_slope": Time,
    /// Decommit (cuMemUnmap + cuMemRelease) per granule with no other granule mapped.
    VmmDecommitLiveBase = "vmm_decommit_live_base": Time,
    /// Decommit time added per granule for every 1024 granules still mapped.
    VmmDecommitLiveSlope = "vmm_decommit_live_slope": Time,
    /// Fixed time of demand-faulting one contiguous run of host-resident managed memory read
    /// densely by a kernel (intercept of `latency + bytes / fault_dense_bandwidth`).
    FaultRunLatency = "fault_run_latency": Time,
    /// Demand-fault throughput of dense reads of contiguous managed runs (slope of the same fit);
    /// with [`ConstantName::FaultRunLatency`] it replaces `fault_bandwidth` for `os*` faults.
    FaultDenseBandwidth = "fault_dense_bandwidth": Bandwidth,
    /// Host round trip per layer: launch a kernel, wait for its event on the host (the
    /// router's selection reaching the CPU), measured per iteration of that loop.
    RouterSync = "router_sync": Time,
    /// Fixed time of a layer's expert kernel launches (gate+up, down), the intercept of the
    /// fit of kernel time against the distinct experts' bytes.
    ExpertKernelFixed = "expert_kernel_fixed": Time,
    /// Weight-read rate of the expert kernels beyond the fixed part (slope of the same fit);
    /// with [`ConstantName::ExpertKernelFixed`] it prices expert compute instead of
    /// `device_read_bandwidth`.
    ExpertKernelBandwidth = "expert_kernel_bandwidth": Bandwidth,
    /// Bytes per µs of the per-slot expert kernel's slots that repeat an expert already read
    /// by the same launch (a verify chunk's or a batch's tokens sharing experts), beyond the
    /// distinct-expert fit: kernel time = [`ConstantName::ExpertKernelFixed`] + distinct x
    /// expert bytes / [`ConstantName::ExpertKernelBandwidth`] + (slots - distinct) x expert
    /// bytes / this. Fitted on the calibration's 60-slot sweep over distinct experts.
    ExpertKernelRepeatBandwidth = "expert_kernel_repeat_bandwidth": Bandwidth,
    /// Fixed time of the union expert kernel (one pass over each distinct expert for every
    /// token that selected it): the intercept of its time against the distinct experts' bytes.
    UnionKernelFixed = "union_kernel_fixed": Time,
    /// Distinct expert bytes per µs of the union expert kernel (slope of the same fit).
    UnionKernelBandwidth = "union_kernel_bandwidth": Bandwidth,
    /// Plain streaming read of device memory by a reference kernel over a buffer many times
    /// the L2: the ceiling of what any kernel can read from DRAM per µs.
    StreamReadBandwidth = "stream_read_bandwidth": Bandwidth,
    /// Extra commit time per granule for a "fresh" granule: one committed while no granule
    /// released earlier is left to reuse (the footprint grows, as in a cache warming up).
    /// Measured as the commit time while a live set grows minus the commit time of granules
    /// committed right after others were released, at the same live count.
    VmmCommitFresh = "vmm_commit_fresh": Time,
    /// Fixed time of migrating one contiguous run of device-resident managed memory back to
    /// host memory (cuMemPrefetchAsync to the host: an `os*` eviction), per run; the cost
    /// model holds the fault handler this long per evicted run.
    OsEvictRunLatency = "os_evict_run_latency": Time,
    /// Throughput of those migrations (slope of the same fit). Informational: on the H200 the
    /// migrations' bytes overlap the next group's faults; the cost model prices what they add
    /// to those faults ([`ConstantName::OsEvictOverlapBandwidth`]) where measured, else only
    /// the per-run part ([`ConstantName::OsEvictRunLatency`]).
    OsEvictBandwidth = "os_evict_bandwidth": Bandwidth,
    /// Commit time added per granule for every 1024 mapped granules that kernels have read
    /// since they were mapped (on top of [`ConstantName::VmmCommitLiveSlope`]): page-ins among
    /// a live set the GPU reads between them (an LRU cache's) cost more than among an unread
    /// one. Measured by `sim calibrate`'s read-live-set arm: commits among a live set read
    /// once after it was mapped (and a few units per cycle, as an LRU replay's groups read
    /// theirs) minus commits among one never read, per granule, against live granules / 1024.
    VmmCommitReadSlope = "vmm_commit_read_slope": Time,
    /// Decommit time added per granule for every 1024 mapped granules kernels have read
    /// (same arm, evictions of live units).
    VmmDecommitReadSlope = "vmm_decommit_read_slope": Time,
    /// Commit time added per granule for every 1024 mapped UNITS (a page-in's run of
    /// granules) that kernels have read: the same arm's premium fitted against read units
    /// instead of read granules; the calibration keeps whichever of the two fits its points
    /// better and leaves the other out.
    VmmCommitReadUnitSlope = "vmm_commit_read_unit_slope": Time,
    /// Decommit time added per granule for every 1024 mapped units kernels have read.
    VmmDecommitReadUnitSlope = "vmm_decommit_read_unit_slope": Time,
    /// Fault time added per run of OS pages evicted while the next group's experts fault in
    /// (cuMemPrefetchAsync back to the host on a side stream, overlapping the faults). With
    /// [`ConstantName::OsEvictOverlapBandwidth`] it replaces
    /// [`ConstantName::OsEvictRunLatency`] in the cost model.
    OsEvictOverlapRunLatency = "os_evict_overlap_run_latency": Time,
    /// Evicted bytes per µs of fault time added when the eviction overlaps the next group's
    /// faults (the per-byte part of the same fit).
    OsEvictOverlapBandwidth = "os_evict_overlap_bandwidth": Bandwidth,
    /// Commit time added per granule for every 1024 granules mapped, while kernels run
    /// between the calls (a replay's state): the slope of the live-set arm's fit of per-unit
    /// commit time against unit granules and live granules, GPU busy. The cost model uses it
    /// in place of [`ConstantName::VmmCommitLiveSlope`] (the idle GPU's slope) when present.
    VmmCommitBusyLiveSlope = "vmm_commit_busy_live_slope": Time,
    /// Decommit time added per granule for every 1024 granules mapped, kernels running
    /// between the calls (same arm and fit as [`ConstantName::VmmCommitBusyLiveSlope`]).
    VmmDecommitBusyLiveSlope = "vmm_decommit_busy_live_slope": Time,
    /// Commit time added per granule at 1024 granules mapped, kernels running between the
    /// calls, on a concave live-set curve: the term is `this x (live / 1024)^e`, `e` being
    /// [`ConstantName::VmmCommitLivePowerExp`]. Fitted by least squares to the per-granule
    /// commit price of each live level of `sim calibrate --only live-set` sets (`sim calibrate
    /// --from-measurements ... --live-set-from ...`). With its exponent it replaces
    /// [`ConstantName::VmmCommitBusyLiveSlope`] in the cost model; absent, pricing stays linear.
    VmmCommitLivePower = "vmm_commit_live_power": Time,
    /// The exponent `e` of [`ConstantName::VmmCommitLivePower`] (0 < e <= 1: concave).
    VmmCommitLivePowerExp = "vmm_commit_live_power_exp": Ratio,
    /// Decommit time added per granule at 1024 granules mapped on the concave live-set curve
    /// (same sets and fit as [`ConstantName::VmmCommitLivePower`]).
    VmmDecommitLivePower = "vmm_decommit_live_power": Time,
    /// The exponent of [`ConstantName::VmmDecommitLivePower`].
    VmmDecommitLivePowerExp = "vmm_decommit_live_power_exp": Ratio,
    /// Host CPU: expert bytes per µs of the int4 expert FFN (gate/up, SiLU, down; group
    /// scales) for one token on all threads, from weights in DRAM: the slope of the fit of
    /// call time against expert bytes (`sim calibrate --only host`).
    HostExpertInt4Bandwidth = "host_expert_int4_bandwidth": Bandwidth,
    /// Host CPU: fixed time of one int4 expert call, one token, all threads (intercept of the
    /// same fit); absent when the intercept fell below zero (under the noise).
    HostExpertInt4CallOverhead = "host_expert_int4_call_overhead": Time,
    /// Host CPU: as [`ConstantName::HostExpertInt4Bandwidth`] on one thread.
    HostExpertInt4Bandwidth1Thread = "host_expert_int4_1t_bandwidth": Bandwidth,
    /// Host CPU: expert bytes per µs of the int4 expert FFN for a call of 16 tokens on all
    /// threads (the compute-bound rate of a batch: one read of the weights, 16 tokens' FLOPs).
    HostExpertInt4Tokens16Bandwidth = "host_expert_int4_t16_bandwidth": Bandwidth,
    /// Host CPU: expert bytes per µs of the bf16 expert FFN, one token, all threads.
    HostExpertBf16Bandwidth = "host_expert_bf16_bandwidth": Bandwidth,
    /// Host CPU: fixed time of one bf16 expert call, one token, all threads.
    HostExpertBf16CallOverhead = "host_expert_bf16_call_overhead": Time,
    /// Host memory read bandwidth, all threads: the CPU streaming a buffer 8 times the
    /// last-level cache from its own DRAM (not [`ConstantName::HostReadBandwidth`], a GPU
    /// kernel reading host RAM over the bus).
    HostMemoryReadBandwidth = "host_memory_read_bandwidth": Bandwidth,
    /// Host memory read bandwidth of one thread (same read).
    HostMemoryReadBandwidth1Thread = "host_memory_read_1t_bandwidth": Bandwidth,
    /// File reads of expert-sized blocks from the `--ssd-path` directory, one at a time
    /// (queue depth 1), in random block order; O_DIRECT or buffered as the profile notes say.
    HostSsdReadBandwidth = "host_ssd_read_bandwidth": Bandwidth,
    /// The same reads 4 at a time (queue depth 4, four threads).
    HostSsdReadBandwidthQd4 = "host_ssd_read_qd4_bandwidth": Bandwidth,
}

impl std::fmt::Display for ConstantName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How and where a constant was measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// GPU model, e.g. `NVIDIA H200 SXM 141 GB`.
    pub gpu: String,
    /// Driver version, e.g. `580.159.04`.
    pub driver: String,
    /// CUDA version, e.g. `13.0`.
    pub cuda: String,
    /// Date of the measurement, ISO 8601.
    pub date: String,
    /// What was timed and how (API calls, sizes, synchronisation).
    pub method: String,
    /// Repetitions the value summarises, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetitions: Option<u32>,
    /// Relative spread of the repetitions, (max - min) / value, when known (0.15 = 15%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<f64>,
    /// What `value` is: `median`, `mean`, `midpoint of range`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistic: Option<String>,
    /// Publication or program the figure comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Where a constant's value came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Provenance {
    /// Measured on a real GPU.
    Measured(Measurement),
    /// Computed from measured figures (e.g. a fit); `from` names them, `method` says how.
    Derived {
        /// The measured figures the value is computed from.
        from: String,
        /// How it is computed from them.
        method: String,
    },
    /// Not measured; the reason the value is believed.
    Assumed {
        /// Why the value is believed.
        reason: String,
    },
}

/// A quantity a fitted constant was measured against (the x of its fit or the level its arm
/// held fixed): what the engine compares with the run's own value before pricing with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Regressor {
    /// VMM granules mapped when the call ran (the live set).
    LiveGranules,
    /// Mapped units kernels had read (the read-live-set arm).
    LiveUnits,
    /// Granules per committed or decommitted unit (one page-in's run of granules).
    UnitGranules,
    /// Routed (token, expert) slots of one expert-kernel launch.
    Slots,
    /// Distinct experts of one expert-kernel launch.
    DistinctExperts,
    /// Experts (contiguous runs) of one fault or migration launch.
    Experts,
    /// Bytes of one call: a copy, a launch's weights, a faulted run.
    Bytes,
    /// Host threads of a CPU call.
    Threads,
    /// Mapped memory / usable VRAM when the call ran.
    VramFill,
}

impl Regressor {
    /// Words for a report line (`live granules`).
    pub fn words(self) -> &'static str {
        match self {
            Regressor::LiveGranules => "live granules",
            Regressor::LiveUnits => "live units",
            Regressor::UnitGranules => "granules per unit",
            Regressor::Slots => "slots",
            Regressor::DistinctExperts => "distinct experts",
            Regressor::Experts => "experts per launch",
            Regressor::Bytes => "bytes",
            Regressor::Threads => "threads",
            Regressor::VramFill => "VRAM fill",
        }
    }
}

/// The measured range of one regressor: the smallest and largest level the fit saw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Span {
    /// The regressor.
    pub of: Regressor,
    /// Smallest level measured.
    pub min: f64,
    /// Largest level measured.
    pub max: f64,
}

impl Span {
    /// The range of `levels` (`None` when there is none or one is not finite).
    pub fn of_levels(of: Regressor, levels: impl IntoIterator<Item = f64>) -> Option<Span> {
        let mut it = levels.into_iter();
        let first = it.next()?;
        let (min, max) = it.fold((first, first), |(lo, hi), x| (lo.min(x), hi.max(x)));
        (min.is_finite() && max.is_finite()).then_some(Span { of, min, max })
    }

    /// How far `x` lies outside: `x / max` above the range, `min / x` below it (a factor >
    /// 1), `None` inside it.
    pub fn distance(&self, x: f64) -> Option<f64> {
        if x > self.max {
            Some(if self.max > 0.0 {
                x / self.max
            } else {
                f64::INFINITY
            })
        } else if x < self.min {
            Some(if x > 0.0 { self.min / x } else { f64::INFINITY })
        } else {
            None
        }
    }
}

/// Where a constant's fit holds: the measured range of each regressor it was fitted against
/// (`ranges`), or, when the source states none, why (`unknown`). A constant without a domain
/// predates this field; the engine prices it everywhere without a flag.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Domain {
    /// Each regressor's measured range.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<Span>,
    /// Why no range is known (a published figure that states none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
}

impl Domain {
    /// The domain of the given spans (those that are `None` are left out).
    pub fn of(spans: impl IntoIterator<Item = Option<Span>>) -> Domain {
        Domain {
            ranges: spans.into_iter().flatten().collect(),
            unknown: None,
        }
    }

    /// A domain known to be unknown, with the reason.
    pub fn unknown(reason: &str) -> Domain {
        Domain {
            ranges: Vec::new(),
            unknown: Some(reason.to_string()),
        }
    }

    /// The range of `of`, when recorded.
    pub fn span(&self, of: Regressor) -> Option<&Span> {
        self.ranges.iter().find(|s| s.of == of)
    }

    /// One line: `live granules 0..6,144; granules per unit 2..128; VRAM fill 89.8%` (one
    /// level where the range is one point), then `unknown (why)` when set.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .ranges
            .iter()
            .map(|s| {
                let at = |x: f64| match s.of {
                    Regressor::VramFill => format!("{:.1}%", 100.0 * x),
                    _ => level(x),
                };
                if s.min == s.max {
                    format!("{} {}", s.of.words(), at(s.min))
                } else {
                    format!("{} {}..{}", s.of.words(), at(s.min), at(s.max))
                }
            })
            .collect();
        if let Some(why) = &self.unknown {
            parts.push(format!("unknown ({why})"));
        }
        parts.join("; ")
    }
}

/// A regressor level for people: whole numbers with thousands separators, fractions with 3
/// decimals.
pub fn level(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        let digits = format!("{}", x.abs() as u64);
        let mut out = String::new();
        for (i, ch) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(ch);
        }
        if x < 0.0 {
            out.insert(0, '-');
        }
        out
    } else {
        format!("{x:.3}")
    }
}

/// One constant: `value` in `unit`, optional measured `min`/`max` (same unit), provenance and
/// the domain of its fit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Constant {
    /// The value, in `unit`.
    pub value: f64,
    /// Unit of `value`, `min` and `max`, e.g. `us`, `MB/s`.
    pub unit: String,
    /// Smallest measured value, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest measured value, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Where the value came from.
    pub provenance: Provenance,
    /// The measured range of each regressor of its fit; absent in profiles written before
    /// domains were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<Domain>,
}

impl Constant {
    /// A measured constant (what `sim calibrate` writes).
    pub fn measured(value: f64, unit: &str, m: Measurement) -> Self {
        Constant {
            value,
            unit: unit.to_string(),
            min: None,
            max: None,
            provenance: Provenance::Measured(m),
            domain: None,
        }
    }

    /// An assumed constant with the reason it is believed.
    pub fn assumed(value: f64, unit: &str, reason: &str) -> Self {
        Constant {
            value,
            unit: unit.to_string(),
            min: None,
            max: None,
            provenance: Provenance::Assumed {
                reason: reason.to_string(),
            },
            domain: None,
        }
    }

    /// The same constant with a measured range `[min, max]` in its unit.
    pub fn with_range(mut self, min: f64, max: f64) -> Self {
        self.min = Some(min);
        self.max = Some(max);
        self
    }

    /// The same constant with the domain of its fit.
    pub fn with_domain(mut self, d: Domain) -> Self {
        self.domain = Some(d);
        self
    }

    /// Value in the canonical unit of `dim` (bytes, µs, bytes per µs, ratio), or `None`
    /// when the unit does not fit the dimension.
    pub fn canonical(&self, dim: Dimension) -> Option<f64> {
        dim.factor(&self.unit).map(|f| self.value * f)
    }

    /// Relative spread of the measurement: `spread` of a [`Measurement`] if recorded, else
    /// (max - min) / value when a range is recorded; `None` when neither is known.
    pub fn relative_spread(&self) -> Option<f64> {
        if let Provenance::Measured(m) = &self.provenance {
            if let Some(s) = m.spread {
                return Some(s);
            }
        }
        match (self.min, self.max) {
            (Some(lo), Some(hi)) if self.value > 0.0 => Some((hi - lo) / self.value),
            _ => None,
        }
    }
}
