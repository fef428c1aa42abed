//! Converts a [`Calibration`] into a hardware profile of the `profile` crate's schema.
//! Constants that were not measured (or were unsupported) are left out, never zero.

use crate::calibrate::{Calibration, Line, LAUNCHES_PER_REP, ROUTER_SYNCS_PER_REP};
use crate::calibrate::{ReadMode, EVICT_OVERLAP_K, READ_CYCLES, READ_CYCLE_UNITS};
use crate::calibrate::{FAULT_GEOMETRIES, FRESH_UNITS, PAGE_IN_UNITS};
use crate::stats::{slope_through_origin, LinearFit, Summary, TwoTerms};
use crate::DeviceInfo;
use profile::{Constant, ConstantName as N, Device, Measurement, OsPaging, Profile};
use profile::{Domain, Regressor as R, Span};

/// How a constant's [`Measurement`] is made from its method and the summary of its
/// repetitions (`None`: a single reading).
pub(crate) type Measure<'a> = dyn Fn(String, Option<&Summary>) -> Measurement + 'a;

/// Builds the profile `name` from `c`. Every constant carries GPU, driver, CUDA version, date,
/// method, repetitions and the spread of its repetitions; the value is their median.
pub fn to_profile(c: &Calibration, name: &str) -> Profile {
    let d = &c.device;
    let mut p = Profile::new(
        name,
        &format!(
            "{} measured by `sim calibrate`{} on {}{}",
            d.gpu,
            if c.quick { " --quick" } else { "" },
            d.date,
            c.pooled_from
                .map_or(String::new(), |n| format!(", pooled from {n} calibrations"))
        ),
        Device {
            gpu: d.gpu.clone(),
            os: d.os.clone(),
            driver: d.driver.clone(),
            cuda: d.cuda.clone(),
            link: None,
            host: None,
        },
    );
    let m = measure(d, &d.date);
    // The kernel arms carry their own date when they come from later kernel sets.
    let km = measure(d, c.kernel_arms_from.as_ref().map_or(&d.date, |k| &k.date));
    add_device_sizes(c, &mut p, &m);
    add_vmm_latencies(c, &mut p, &m);
    add_h2d_rates(c, &mut p, &m);
    add_read_rates(c, &mut p, &m);
    add_model_fits(c, &mut p, &m);
    add_device_read(c, &mut p, &km);
    add_expert_kernel_fit(c, &mut p, &km);
    crate::kernel_surface::add_kernel_surface(c, &mut p, &km);
    add_replay_granularity_fits(c, &mut p, &m);
    add_interference_fits(c, &mut p, &m);
    let s = &c.launch_us;
    p.set(N::KernelLaunch, ranged(s.median, s, 1.0, "us", m(format!("{LAUNCHES_PER_REP} back-to-back launches of an empty kernel (1 block of 32 threads), CUDA events, per launch"), Some(s))).with_domain(Domain::default()));
    add_notes(c, &mut p);
    p
}

/// How a constant measured on `d` on `date` is described: GPU, driver, CUDA version, date,
/// method, repetitions and the spread of its repetitions (`None`: a single reading).
fn measure<'a>(
    d: &'a DeviceInfo,
    date: &'a str,
) -> impl Fn(String, Option<&Summary>) -> Measurement + 'a {
    move |method, s| Measurement {
        gpu: d.gpu.clone(),
        driver: d.driver.clone(),
        cuda: d.cuda.clone(),
        date: date.to_owned(),
        method,
        repetitions: s.map(|s| s.n).or(Some(1)),
        spread: s.map(|s| s.spread),
        statistic: Some(
            if s.is_some() {
                "median"
            } else {
                "single reading"
            }
            .into(),
        ),
        source: Some("sim calibrate (validate crate)".into()),
    }
}

/// The domain of one regressor's measured levels (empty when there are none).
pub(crate) fn levels(of: R, xs: impl IntoIterator<Item = f64>) -> Domain {
    Domain::of([Span::of_levels(of, xs)])
}

/// A measured constant with the range `s.min * f ..= s.max * f`.
fn ranged(v: f64, s: &Summary, f: f64, unit: &str, meas: Measurement) -> Constant {
    Constant::measured(v, unit, meas).with_range(s.min * f, s.max * f)
}

/// VRAM total and usable, and the VMM granule.
fn add_device_sizes(c: &Calibration, p: &mut Profile, m: &Measure) {
    let d = &c.device;
    p.set(
        N::VramTotal,
        Constant::measured(
            d.vram_total as f64,
            "B",
            m("cuMemGetInfo total".into(), None),
        )
        .with_domain(Domain::default()),
    );
    p.set(
        N::VramUsable,
        Constant::measured(
            d.vram_free as f64,
            "B",
            m("cuMemGetInfo free at the start of calibration".into(), None),
        )
        .with_domain(Domain::default()),
    );
    p.set(
        N::VmmGranule,
        Constant::measured(
            c.granularity_min as f64,
            "B",
            m(
                format!(
                    "cuMemGetAllocationGranularity minimum (recommended {} B)",
                    c.granularity_recommended
                ),
                None,
            ),
        )
        .with_domain(Domain::default()),
    );
}

/// The per-granule VMM calls at the first fill level, and first touch per fill band.
fn add_vmm_latencies(c: &Calibration, p: &mut Profile, m: &Measure) {
    if let Some(v) = c.vmm.first() {
        let how = |call: &str| {
            format!("{call}, one call per {} B granule, {} granules per repetition, timed on the host, at {:.0}% of VRAM allocated", c.granularity_min, v.granules, v.fill_fraction * 100.0)
        };
        for (name, s, call) in [
            (N::CuMemCreate, &v.create_us, "cuMemCreate"),
            (N::CuMemMap, &v.map_us, "cuMemMap"),
            (N::CuMemSetAccess, &v.set_access_us, "cuMemSetAccess"),
            (N::CuMemUnmap, &v.unmap_us, "cuMemUnmap"),
            (N::CuMemRelease, &v.release_us, "cuMemRelease"),
        ] {
            let d = Domain::of([
                Span::of_levels(R::UnitGranules, [1.0]),
                Span::of_levels(R::VramFill, [v.fill_fraction]),
            ]);
            p.set(
                name,
                ranged(s.median, s, 1.0, "us", m(how(call), Some(s))).with_domain(d),
            );
        }
    }
    // First touch per fill band: the highest-fill measurement inside each band.
    for (name, lo, hi) in [
        (N::FirstTouchBelow90, 0.0, 0.9),
        (N::FirstTouch90To100, 0.9, 1.0),
    ] {
        if let Some(v) = c
            .vmm
            .iter()
            .rfind(|v| v.fill_fraction >= lo && v.fill_fraction < hi)
        {
            let s = &v.first_touch_us;
            p.set(name, ranged(s.median, s, 1.0, "us", m(format!("cuMemsetD8 over {} freshly mapped granules + synchronize, per granule, at {:.0}% of VRAM allocated", v.granules, v.fill_fraction * 100.0), Some(s))).with_domain(levels(R::VramFill, [v.fill_fraction])));
        }
    }
}

/// H2D copies: the pinned fit (bandwidth and latency) and the largest size's rate from
/// pinned and pageable memory.
fn add_h2d_rates(c: &Calibration, p: &mut Profile, m: &Measure) {
    if let Some(f) = &c.h2d_pinned.fit {
        let sizes = format!(
            "{}..{} B",
            c.h2d_pinned.points.first().map_or(0, |p| p.bytes),
            c.h2d_pinned.points.last().map_or(0, |p| p.bytes)
        );
        let reps = c.h2d_pinned.points.first().map(|p| p.time_us.clone());
        let meas = |what: &str| {
            Measurement { statistic: Some("least-squares fit over per-size medians".into()), ..m(format!("cuMemcpyHtoDAsync from cuMemHostAlloc memory, CUDA events, sizes {sizes}; {what} (r2 {:.5})", f.r2), reps.as_ref()) }
        };
        let d = levels(R::Bytes, c.h2d_pinned.points.iter().map(|p| p.bytes as f64));
        p.set(
            N::H2dBandwidth,
            Constant::measured(f.bytes_per_us, "MB/s", meas("1 / slope")).with_domain(d.clone()),
        );
        if f.latency_us > 0.0 {
            p.set(
                N::H2dLatency,
                Constant::measured(f.latency_us, "us", meas("intercept")).with_domain(d),
            );
        }
    }
    for (name, curve, kind) in [
        (
            N::H2dPinnedBandwidth,
            &c.h2d_pinned,
            "pinned (cuMemHostAlloc)",
        ),
        (
            N::H2dPageableBandwidth,
            &c.h2d_pageable,
            "pageable (Vec<u8>)",
        ),
    ] {
        if let Some(pt) = curve.points.last() {
            let s = &pt.time_us;
            let bw = |t: f64| pt.bytes as f64 / t;
            p.set(
                name,
                Constant::measured(
                    bw(s.median),
                    "MB/s",
                    m(
                        format!(
                            "cuMemcpyHtoDAsync of {} B from {kind} host memory, CUDA events",
                            pt.bytes
                        ),
                        Some(s),
                    ),
                )
                .with_range(bw(s.max), bw(s.min))
                .with_domain(levels(R::Bytes, [pt.bytes as f64])),
            );
        }
    }
}

/// The expert kernels' weight-read rate (measured by the kernel arms: `m` carries their date).
fn add_device_read(c: &Calibration, p: &mut Profile, m: &Measure) {
    // The decode kernel's weight-read rate: the 60-slot per-slot launch with 60 distinct experts.
    if let Some(k) = c
        .kernels
        .iter()
        .find(|k| k.slots == 60 && k.distinct == 60 && k.variant == "PerSlot")
    {
        let s = &k.time_us;
        let bw = |t: f64| (k.distinct as u64 * k.expert_bytes) as f64 / t;
        p.set(N::DeviceReadBandwidth, Constant::measured(bw(s.median), "MB/s", m(format!("int4 expert FFN kernels (kernels crate), {} slots of {} distinct experts of {}x{} (group {}, {} B each), expert bytes / time of {}", k.slots, k.distinct, k.hidden, k.ffn, k.group, k.expert_bytes, layer_launches(&k.kernel)), Some(s))).with_range(bw(s.max), bw(s.min)).with_domain(Domain::of([Span::of_levels(R::Slots, [k.slots as f64]), Span::of_levels(R::DistinctExperts, [k.distinct as f64]), Span::of_levels(R::Bytes, [(k.distinct as u64 * k.expert_bytes) as f64])])));
    }
}

/// The demand-fault rate and the prefetch rate.
fn add_read_rates(c: &Calibration, p: &mut Profile, m: &Measure) {
    if let Some(f) = c.managed.faults.iter().find(|f| f.stride == 4096) {
        let s = &f.bytes_per_us;
        p.set(N::FaultBandwidth, ranged(s.median, s, 1.0, "MB/s", m(format!("cuMemAllocManaged of {} B written by the host, then a kernel reading one byte per 4 KiB page; buffer bytes / kernel time", f.bytes), Some(s))).with_domain(levels(R::Bytes, [f.bytes as f64])));
    }
    if let Some(s) = &c.managed.prefetch_bytes_per_us {
        let bytes = c.managed.faults.first().map_or(0, |f| f.bytes);
        p.set(N::PrefetchBandwidth, ranged(s.median, s, 1.0, "MB/s", m(format!("cuMemPrefetchAsync to the device of {bytes} B of host-resident managed memory, CUDA events"), Some(s))).with_domain(levels(R::Bytes, [bytes as f64])));
    }
}

/// OS paging's prefetch support, and the notes on pooling and the streaming read.
fn add_notes(c: &Calibration, p: &mut Profile) {
    p.os_paging = Some(OsPaging {
        prefetch_hints: c.managed.prefetch_bytes_per_us.is_some(),
        note: c.managed.prefetch_unsupported.clone().unwrap_or_else(|| {
            "cuMemPrefetchAsync to the device succeeded during calibration".into()
        }),
    });
    if let Some(n) = c.pooled_from {
        p.notes.push(format!(
            "Pooled from {n} calibrations of this GPU (sim calibrate --from-measurements A,B,...): each measured median is the median of theirs, each spread that of all their repetitions."
        ));
    }
    if let Some(k) = &c.kernel_arms_from {
        p.notes.push(format!(
            "Expert-kernel constants, the kernel curve and the streaming read: {} `sim calibrate --only kernels` set(s) of {} (each median the median of theirs when more than one), measured apart from the other arms (of {}) and substituted for this calibration's kernel arms (sim calibrate --from-measurements ... --kernels-from ...).",
            k.sets, k.date, c.device.date
        ));
    }
    p.notes.push(format!(
        "Streaming read by a plain kernel over {} B: {:.0} GB/s (median of {}). The full measurement set (VMM latencies at every fill level, H2D curves, fault strides, kernel sweeps) is in the calibration's measurements JSON.",
        c.stream_read_bytes,
        c.stream_read_bytes_per_us.median / 1e3,
        c.stream_read_bytes_per_us.n
    ));
}

/// What a kernel arm timed, for a constant's provenance: one layer's launches (the activation
/// pre-pass included, if the kernel has one) between CUDA events, naming the CUDA function
/// unless the measurement set predates recording it (`kernel` empty).
pub(crate) fn layer_launches(kernel: &str) -> String {
    if kernel.is_empty() {
        "one layer's launches (CUDA events)".to_string()
    } else {
        format!("one layer's launches of {kernel} (CUDA events)")
    }
}

/// Line `y = intercept + slope x` minimizing the sum of squared relative residuals
/// `((y - intercept - slope x) / y)^2`, so that a point of 100 µs weighs as much as one of
/// 5000 µs; its `r2` is the ordinary one of that line on `points`. `None` with fewer than two
/// distinct x or any `y <= 0`.
fn relative_line(points: &[(f64, f64)]) -> Option<Line> {
    if points.iter().any(|p| p.1 <= 0.0 || !p.1.is_finite()) {
        return None;
    }
    // intercept / y + slope x / y = 1: a fit through the origin in two terms
    let pts: Vec<(f64, f64, f64)> = points.iter().map(|p| (1.0 / p.1, p.0 / p.1, 1.0)).collect();
    let t = TwoTerms::fit(&pts)?;
    let n = points.len() as f64;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let ss_tot: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    let ss_res: f64 = points.iter().map(|p| (p.1 - t.a - t.b * p.0).powi(2)).sum();
    Some(Line {
        intercept: t.a,
        slope: t.b,
        r2: if ss_tot > 0.0 {
            1.0 - ss_res / ss_tot
        } else {
            1.0
        },
    })
}

/// `meas` labelled as a least-squares fit over the per-point medians of its arm.
pub(crate) fn fit_stat(meas: Measurement) -> Measurement {
    Measurement {
        statistic: Some("least-squares fit over per-point medians".into()),
        ..meas
    }
}

/// The constants of the finer VMM and host terms: the live-mapping VMM fit, the dense-fault
/// run fit and the router round trip (the expert kernels' fixed part and their time surface
/// over slots and distinct experts are added beside it, with the kernel arms' date). Each is
/// left out when its arm did not run or its fit is not physical (a negative intercept or
/// rate).
fn add_model_fits(c: &Calibration, p: &mut Profile, m: &Measure) {
    add_vmm_live_fits(c, p, m);
    add_live_set_fits(c, p, m);
    add_dense_fault_fits(c, p, m);
    add_router_sync(c, p, m);
}

/// The live-mapping VMM fit: commit and decommit per granule against the live granules.
fn add_vmm_live_fits(c: &Calibration, p: &mut Profile, m: &Measure) {
    if c.vmm_live.len() >= 2 {
        let levels: Vec<u64> = c.vmm_live.iter().map(|v| v.live_granules).collect();
        let first = c.vmm_live.first().map(|v| v.commit_us.clone());
        for (base, slope, what, pick) in [
            (
                N::VmmCommitLiveBase,
                N::VmmCommitLiveSlope,
                "cuMemCreate + cuMemMap + cuMemSetAccess",
                true,
            ),
            (
                N::VmmDecommitLiveBase,
                N::VmmDecommitLiveSlope,
                "cuMemUnmap + cuMemRelease",
                false,
            ),
        ] {
            let pts: Vec<(f64, f64)> = c
                .vmm_live
                .iter()
                .map(|v| {
                    let s = if pick { &v.commit_us } else { &v.decommit_us };
                    (v.live_granules as f64 / 1024.0, s.median)
                })
                .collect();
            let Some(l) = Line::fit(&pts) else { continue };
            if l.intercept <= 0.0 {
                continue;
            }
            let d = Domain::of([
                Span::of_levels(R::LiveGranules, levels.iter().map(|&l| l as f64)),
                Span::of_levels(R::UnitGranules, [1.0]),
            ]);
            let method = |term: &str| {
                format!("{what} per granule, one granule at a time ({} per repetition), timed on the host, with {levels:?} other single-granule mappings live, live and cycled granules scattered over one range in a seeded random order; {term} of the fit against live granules / 1024 (r2 {:.4})", c.vmm_live[0].granules, l.r2)
            };
            p.set(
                base,
                Constant::measured(
                    l.intercept,
                    "us",
                    fit_stat(m(method("intercept"), first.as_ref())),
                )
                .with_domain(d.clone()),
            );
            // a slope below 0 is noise around a flat cost: record it as measured (it is), the
            // model adds it linearly and it stays small
            p.set(
                slope,
                Constant::measured(
                    l.slope.max(0.0),
                    "us",
                    fit_stat(m(
                        method("slope, clamped at 0 (µs per granule per 1024 live granules)"),
                        first.as_ref(),
                    )),
                )
                .with_domain(d),
            );
        }
    }
}

/// The live-set arm's fits ([`crate::live_set_fit`]): with the GPU idle they replace the
/// live-mapping arm's slopes (the arm measures whole units in randomised blocks), with kernels
/// between the calls they give the busy slopes the cost model prefers. A slope below 0 is
/// recorded as 0 (noise around a flat cost), as the live-mapping fit does.
fn add_live_set_fits(c: &Calibration, p: &mut Profile, m: &Measure) {
    use crate::calibrate::{GpuWork, LIVE_SET_READ_GRANULES};
    use crate::live_set_fit::{cell_medians, fit, Call};
    let arm = &c.live_set;
    let blocks = arm.probes.len();
    let probes: Vec<f64> = arm.probes.iter().map(|p| p.launch_us).collect();
    let probe = Summary::of(&probes);
    for (work, call, name, what) in [
        (
            GpuWork::Idle,
            Call::Commit,
            N::VmmCommitLiveSlope,
            "commit (cuMemCreate + cuMemMap + cuMemSetAccess per granule)",
        ),
        (
            GpuWork::Idle,
            Call::Decommit,
            N::VmmDecommitLiveSlope,
            "decommit (cuMemUnmap + cuMemRelease per granule)",
        ),
        (
            GpuWork::Kernels,
            Call::Commit,
            N::VmmCommitBusyLiveSlope,
            "commit (cuMemCreate + cuMemMap + cuMemSetAccess per granule)",
        ),
        (
            GpuWork::Kernels,
            Call::Decommit,
            N::VmmDecommitBusyLiveSlope,
            "decommit (cuMemUnmap + cuMemRelease per granule)",
        ),
    ] {
        let cells = cell_medians(arm, work, call);
        let Some(f) = fit(&cells) else { continue };
        let samples = arm
            .points
            .iter()
            .find(|q| q.work == work)
            .map(|q| q.commit_us.n)
            .unwrap_or(0);
        let sizes: std::collections::BTreeSet<u64> = cells.iter().map(|c| c.0).collect();
        let levels: std::collections::BTreeSet<u64> = cells.iter().map(|c| c.1).collect();
        let gpu = match work {
            GpuWork::Idle => "GPU idle".to_string(),
            GpuWork::Kernels => format!("a streaming read of {LIVE_SET_READ_GRANULES} live granules in flight at each call and the new unit read between commit and decommit"),
        };
        let method = format!(
            "live-set arm: per-unit {what}, host clock, units of {sizes:?} granules with {levels:?} single-granule mappings live, {gpu}; {blocks} randomised blocks of {samples} samples per cell (a host probe of empty-kernel launches before each block: median {:.2} µs), cell = median over blocks of block medians; least-squares fit on relative residuals of t = fixed + g x (per granule + slope x live / 1024): fixed {:.2} µs, per granule {:.2} µs, slope {:.3} (r2 {:.4}); µs per granule per 1024 live granules, clamped at 0",
            probe.as_ref().map_or(f64::NAN, |s| s.median), f.fixed_us, f.per_granule_us, f.slope_us, f.r2
        );
        let d = Domain::of([
            Span::of_levels(R::LiveGranules, levels.iter().map(|&l| l as f64)),
            Span::of_levels(R::UnitGranules, sizes.iter().map(|&g| g as f64)),
        ]);
        let meas = |method| Measurement {
            repetitions: Some(blocks as u32),
            spread: None,
            ..fit_stat(m(method, None))
        };
        p.set(
            name,
            Constant::measured(f.slope_us.max(0.0), "us", meas(method)).with_domain(d.clone()),
        );
        if work == GpuWork::Idle {
            let base = if call == Call::Commit {
                N::VmmCommitLiveBase
            } else {
                N::VmmDecommitLiveBase
            };
            if f.per_granule_us > 0.0 {
                let method = format!("live-set arm, {what}, GPU idle: the per-granule part of the same fit with nothing live (fixed {:.2} µs per unit apart; r2 {:.4})", f.fixed_us, f.r2);
                p.set(
                    base,
                    Constant::measured(f.per_granule_us, "us", meas(method)).with_domain(d),
                );
            }
        }
    }
}

/// The dense-fault run fit: latency per run and bandwidth.
fn add_dense_fault_fits(c: &Calibration, p: &mut Profile, m: &Measure) {
    if c.dense_faults.len() >= 2 {
        let pts: Vec<(f64, f64)> = c
            .dense_faults
            .iter()
            .map(|d| (d.run_bytes as f64, d.per_run_us.median))
            .collect();
        if let Some(f) = LinearFit::fit(&pts) {
            if f.latency_us > 0.0 {
                let sizes = format!(
                    "{}..{} B",
                    pts.first().map_or(0.0, |p| p.0),
                    pts.last().map_or(0.0, |p| p.0)
                );
                let first = c.dense_faults.first().map(|d| d.per_run_us.clone());
                let d = levels(R::Bytes, pts.iter().map(|p| p.0));
                let method = |term: &str| {
                    format!("cuMemAllocManaged written by the host, then {} runs per size read densely (one load per 16 B, one launch per run, runs one run apart), CUDA events, run sizes {sizes}; {term} of the fit per run (r2 {:.5})", c.dense_faults[0].runs, f.r2)
                };
                p.set(
                    N::FaultRunLatency,
                    Constant::measured(
                        f.latency_us,
                        "us",
                        fit_stat(m(method("intercept"), first.as_ref())),
                    )
                    .with_domain(d.clone()),
                );
                p.set(
                    N::FaultDenseBandwidth,
                    Constant::measured(
                        f.bytes_per_us,
                        "MB/s",
                        fit_stat(m(method("1 / slope"), first.as_ref())),
                    )
                    .with_domain(d),
                );
            }
        }
    }
}

/// The router round trip.
fn add_router_sync(c: &Calibration, p: &mut Profile, m: &Measure) {
    if let Some(s) = &c.router_sync_us {
        p.set(
            N::RouterSync,
            Constant::measured(
                s.median,
                "us",
                m(format!("launch an empty kernel, record an event, cuEventSynchronize on the host; {ROUTER_SYNCS_PER_REP} iterations per repetition, host clock, per iteration"), Some(s)),
            )
            .with_range(s.min, s.max)
            .with_domain(Domain::default()),
        );
    }
}

/// The expert kernels' fixed part and bandwidth, fitted over the arms of distinct experts.
fn add_expert_kernel_fit(c: &Calibration, p: &mut Profile, m: &Measure) {
    let distinct_arms = || {
        c.kernels
            .iter()
            .filter(|k| k.variant == "PerSlot" && k.distinct == k.slots)
    };
    // The kernel the fit's arms ran, when they all name the same one.
    let kernel = distinct_arms()
        .map(|k| k.kernel.as_str())
        .reduce(|a, b| if a == b { a } else { "" })
        .unwrap_or("")
        .to_string();
    let pts: Vec<(f64, f64)> = distinct_arms()
        .map(|k| {
            (
                (k.distinct as u64 * k.expert_bytes) as f64,
                k.time_us.median,
            )
        })
        .collect();
    if pts.len() >= 2 {
        if let Some(f) = LinearFit::fit(&pts) {
            if f.latency_us > 0.0 {
                let first = c
                    .kernels
                    .iter()
                    .find(|k| k.variant == "PerSlot")
                    .map(|k| k.time_us.clone());
                let d = Domain::of([
                    Span::of_levels(R::Slots, distinct_arms().map(|k| k.slots as f64)),
                    Span::of_levels(
                        R::DistinctExperts,
                        distinct_arms().map(|k| k.distinct as f64),
                    ),
                    Span::of_levels(R::Bytes, pts.iter().map(|p| p.0)),
                ]);
                let method = |term: &str| {
                    format!("int4 expert FFN kernels (kernels crate), per-slot variant, every arm whose slots name distinct experts ({} points, {}..{} B of weights per launch), time of {} against distinct expert bytes; {term} of the fit (r2 {:.5})", pts.len(), pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min), pts.iter().map(|p| p.0).fold(0.0, f64::max), layer_launches(&kernel), f.r2)
                };
                p.set(
                    N::ExpertKernelFixed,
                    Constant::measured(
                        f.latency_us,
                        "us",
                        fit_stat(m(method("intercept"), first.as_ref())),
                    )
                    .with_domain(d.clone()),
                );
                p.set(
                    N::ExpertKernelBandwidth,
                    Constant::measured(
                        f.bytes_per_us,
                        "MB/s",
                        fit_stat(m(method("1 / slope"), first.as_ref())),
                    )
                    .with_domain(d),
                );
            }
        }
    }
}

/// The constants measured at the replay's granularity (`calibrate::paging_arms` and the grow
/// phase of the live-mapping arm): per-unit commit and decommit, the fresh-granule premium,
/// demand faults of k experts in one launch and their migration back to the host. Each is
/// left out when its arm did not run or its fit is not physical; the fault fit replaces the
/// one-run-per-launch fit of [`add_model_fits`] when present.
fn add_replay_granularity_fits(c: &Calibration, p: &mut Profile, m: &Measure) {
    add_page_in_fits(c, p, m);
    add_fresh_granule_premium(c, p, m);
    add_fault_launch_fit(c, p, m);
    add_evict_to_host_fit(c, p, m);
}

/// Per-unit commit and decommit at the replay's granularity.
fn add_page_in_fits(c: &Calibration, p: &mut Profile, m: &Measure) {
    if c.page_in.len() >= 2 {
        let sizes: Vec<u64> = c.page_in.iter().map(|q| q.granules).collect();
        let first = c.page_in.first().map(|q| q.commit_us.clone());
        // the commits right after a same-size cycle's release (the replay's regime), when
        // every point has them; older measurement sets keep the fit they were shipped with
        let steady: Option<Vec<(f64, f64)>> = c
            .page_in
            .iter()
            .map(|q| {
                Some((
                    q.granules as f64,
                    q.steady_commit_us.as_ref()?.median + q.steady_h2d_enqueue_us.as_ref()?.median,
                ))
            })
            .collect();
        let steady_first = c.page_in.first().and_then(|q| q.steady_commit_us.clone());
        let d = levels(R::UnitGranules, sizes.iter().map(|&g| g as f64));
        for (fixed, per, what, commit) in [
            (
                N::VmmCommitFixed,
                N::VmmCommit,
                "cuMemCreate + cuMemMap + cuMemSetAccess per granule, one granule at a time, then cuMemcpyHtoDAsync of the unit's bytes from pinned memory (the previous unit's copy in flight), host clock",
                true,
            ),
            (
                N::VmmDecommitFixed,
                N::VmmDecommit,
                "cuMemUnmap + cuMemRelease per granule, one granule at a time, host clock",
                false,
            ),
        ] {
            let pts: Vec<(f64, f64)> = c
                .page_in
                .iter()
                .map(|q| {
                    let t = if commit {
                        q.commit_us.median + q.h2d_enqueue_us.median
                    } else {
                        q.decommit_us.median
                    };
                    (q.granules as f64, t)
                })
                .collect();
            let same_size = match &steady {
                Some(sp) if commit => Some(sp),
                _ => None,
            };
            let fitted = match same_size {
                Some(sp) => relative_line(sp),
                None => Line::fit(&pts),
            };
            let Some(l) = fitted else { continue };
            if l.slope <= 0.0 {
                continue;
            }
            let method = |term: &str| match same_size {
                Some(_) => format!("{what}, per unit of g granules, in a cycle run right after a cycle of the same size was decommitted ({PAGE_IN_UNITS} units per cycle, two cycles per size and repetition, g in {sizes:?}, sizes in rotating order, GPU idle); {term} of the fit of unit time against g, least squares on relative residuals (each size priced within the same relative error: the per-unit times span 64x) (r2 {:.5})", l.r2),
                None => format!("{what}, per unit of g granules ({PAGE_IN_UNITS} units per size and repetition, g in {sizes:?}, sizes in rotating order, GPU idle); {term} of the fit of unit time against g (r2 {:.5})", l.r2),
            };
            let stat = |meas: Measurement| match same_size {
                Some(_) => Measurement {
                    statistic: Some(
                        "least-squares fit on relative residuals over per-point medians".into(),
                    ),
                    ..meas
                },
                None => fit_stat(meas),
            };
            let spread_of = match same_size {
                Some(_) => steady_first.as_ref(),
                None => first.as_ref(),
            };
            // a negative intercept is noise around no fixed cost: leave the fixed term out
            if l.intercept >= 0.0 {
                p.set(
                    fixed,
                    Constant::measured(
                        l.intercept,
                        "us",
                        stat(m(method("intercept (per unit)"), spread_of)),
                    )
                    .with_domain(d.clone()),
                );
            }
            p.set(
                per,
                Constant::measured(
                    l.slope,
                    "us",
                    stat(m(method("slope (per granule)"), spread_of)),
                )
                .with_domain(d.clone()),
            );
        }
    }
}

/// The premium of a commit of fresh granules over a recycled one.
fn add_fresh_granule_premium(c: &Calibration, p: &mut Profile, m: &Measure) {
    // fresh granules: commits with nothing released left to reuse vs recycled commits
    let fresh: Vec<(u64, f64)> = c
        .page_in
        .iter()
        .filter_map(|q| {
            let recycled = q.steady_commit_us.as_ref().unwrap_or(&q.commit_us);
            q.fresh_commit_us
                .as_ref()
                .map(|f| (q.granules, f.median - recycled.median))
        })
        .collect();
    let against = if c.page_in.iter().all(|q| q.steady_commit_us.is_some()) {
        "the same right after a cycle of the same size was decommitted"
    } else {
        "the same with the units of the cycle just released"
    };
    let granules: u64 = fresh.iter().map(|f| f.0).sum();
    if granules > 0 {
        let premium = fresh.iter().map(|f| f.1).sum::<f64>() / granules as f64;
        let per_size: Vec<String> = fresh
            .iter()
            .map(|(g, d)| format!("{g} granules: {:+.1} µs per granule", d / *g as f64))
            .collect();
        let first = c.page_in.iter().find_map(|q| q.fresh_commit_us.clone());
        p.set(
            N::VmmCommitFresh,
            Constant::measured(
                premium.max(0.0),
                "us",
                Measurement {
                    statistic: Some("granule-weighted mean over unit sizes of the difference of medians, clamped at 0".into()),
                    ..m(format!("commit calls per unit (cuMemCreate + cuMemMap + cuMemSetAccess per granule, one granule at a time, the previous unit's H2D copy in flight) with the footprint growing ({FRESH_UNITS} more units per repetition, all kept mapped) minus {against}, per granule; {}", per_size.join(", ")), first.as_ref())
                },
            )
            .with_domain(levels(R::UnitGranules, fresh.iter().map(|f| f.0 as f64))),
        );
    }
}

/// Demand faults of k experts in one launch.
fn add_fault_launch_fit(c: &Calibration, p: &mut Profile, m: &Measure) {
    // demand faults of k experts in one launch: k x run latency + bytes / bandwidth
    let pts: Vec<(f64, f64, f64)> = c
        .fault_launches
        .iter()
        .map(|f| {
            let k = f.experts as f64;
            (
                k,
                k * f.run_bytes.max(f.expert_bytes) as f64,
                f.fault_us.median,
            )
        })
        .collect();
    let geoms = format!("{FAULT_GEOMETRIES:?}");
    if let Some(f) = TwoTerms::fit(&pts).filter(|f| f.a >= 0.0 && f.b > 0.0) {
        let d = fault_domain(&pts);
        let first = c.fault_launches.first().map(|f| f.fault_us.clone());
        let method = |term: &str| {
            format!("k host-resident experts (managed memory written by the host, (hidden, bytes) in {geoms}) (runs of their pages, 4 KiB-aligned) read by one launch of the int4 expert kernels (gate+up, down), minus the same launch on resident pages, CUDA events, k in {:?}; {term} of the fit time = k x latency + k x bytes / bandwidth (no per-launch term; r2 {:.5})", { let mut ks: Vec<u32> = c.fault_launches.iter().map(|f| f.experts).collect(); ks.sort_unstable(); ks.dedup(); ks }, f.r2)
        };
        p.set(
            N::FaultRunLatency,
            Constant::measured(
                f.a,
                "us",
                fit_stat(m(method("latency (per expert run)"), first.as_ref())),
            )
            .with_domain(d.clone()),
        );
        p.set(
            N::FaultDenseBandwidth,
            Constant::measured(
                1.0 / f.b,
                "MB/s",
                fit_stat(m(method("1 / bytes coefficient"), first.as_ref())),
            )
            .with_domain(d),
        );
    }
}

/// The fault arm's experts migrated back to the host.
fn add_evict_to_host_fit(c: &Calibration, p: &mut Profile, m: &Measure) {
    let geoms = format!("{FAULT_GEOMETRIES:?}");
    // the same experts migrated back to the host: one cuMemPrefetchAsync per expert
    let pts: Vec<(f64, f64, f64)> = c
        .fault_launches
        .iter()
        .filter_map(|f| {
            let k = f.experts as f64;
            f.evict_us
                .as_ref()
                .map(|e| (k, k * f.run_bytes.max(f.expert_bytes) as f64, e.median))
        })
        .collect();
    if let Some(f) = TwoTerms::fit(&pts).filter(|f| f.a >= 0.0 && f.b > 0.0) {
        let d = fault_domain(&pts);
        let first = c.fault_launches.iter().find_map(|f| f.evict_us.clone());
        let method = |term: &str| {
            format!("after the fault arm's launches, cuMemPrefetchAsync to the host of each of the k experts' ranges (one call per expert; the pages the kernels touched are device-resident), CUDA events, (hidden, bytes) in {geoms}; {term} of the fit time = k x latency + k x bytes / bandwidth (r2 {:.5})", f.r2)
        };
        p.set(
            N::OsEvictRunLatency,
            Constant::measured(
                f.a,
                "us",
                fit_stat(m(method("latency (per expert run)"), first.as_ref())),
            )
            .with_domain(d.clone()),
        );
        p.set(
            N::OsEvictBandwidth,
            Constant::measured(
                1.0 / f.b,
                "MB/s",
                fit_stat(m(method("1 / bytes coefficient"), first.as_ref())),
            )
            .with_domain(d),
        );
    }
}

/// The domain of a fit over (k experts, k x run bytes, time) points: experts per launch and
/// bytes per run.
fn fault_domain(pts: &[(f64, f64, f64)]) -> Domain {
    Domain::of([
        Span::of_levels(R::Experts, pts.iter().map(|p| p.0)),
        Span::of_levels(R::Bytes, pts.iter().map(|p| p.1 / p.0)),
    ])
}

/// Read mode whose premium over no reads the read slopes price: the live set read once after
/// it is mapped, then the previous cycle's page-ins before each cycle: the state of an LRU
/// replay, whose resident units were each read by the group that paged them in and whose
/// groups read a few of them (the engine counts a unit as read from its first group's expert
/// compute until it is evicted).
pub const READ_PRICED_MODE: ReadMode = ReadMode::OnceThenFew;

/// The constants of the interference arms (`calibrate::interference_arms`): the read slopes
/// (VMM calls after kernels read the live set, minus with nothing read, per granule, against
/// live granules / 1024 or live units / 1024, whichever leaves less residual, through the
/// origin, clamped at 0) and the fault time an eviction adds
/// to the faults it overlaps (per run and per byte, neither below 0). Each is left out when
/// its arm did not run.
fn add_interference_fits(c: &Calibration, p: &mut Profile, m: &Measure) {
    add_read_slopes(c, p, m);
    add_fault_evict_overlap(c, p, m);
}

/// The read slopes: VMM calls after kernels read the live set, minus with nothing read.
fn add_read_slopes(c: &Calibration, p: &mut Profile, m: &Measure) {
    // (live granules / 1024, live units / 1024, commit premium, decommit premium); the
    // premiums per granule
    let mut pts: Vec<(f64, f64, f64, f64)> = Vec::new();
    for q in c.read_page_in.iter().filter(|q| q.mode == READ_PRICED_MODE) {
        let Some(none) = c.read_page_in.iter().find(|n| {
            n.mode == ReadMode::None && n.granules == q.granules && n.live_units == q.live_units
        }) else {
            continue;
        };
        let g = q.granules as f64;
        let commit =
            |x: &crate::calibrate::ReadPageInPoint| x.commit_us.median + x.h2d_enqueue_us.median;
        pts.push((
            q.live_units as f64 * g / 1024.0,
            q.live_units as f64 / 1024.0,
            (commit(q) - commit(none)) / g,
            (q.decommit_us.median - none.decommit_us.median) / g,
        ));
    }
    let first = c.read_page_in.first().map(|q| q.commit_us.clone());
    let shapes: Vec<String> = c
        .read_page_in
        .iter()
        .filter(|q| q.mode == ReadMode::None)
        .map(|q| format!("{} x {} granules", q.live_units, q.granules))
        .collect();
    for (by_granule, by_unit, what, pick) in [
        (
            N::VmmCommitReadSlope,
            N::VmmCommitReadUnitSlope,
            "commit (cuMemCreate + cuMemMap + cuMemSetAccess per granule, then the unit's cuMemcpyHtoDAsync enqueue)",
            true,
        ),
        (
            N::VmmDecommitReadSlope,
            N::VmmDecommitReadUnitSlope,
            "decommit of a live unit (cuMemUnmap + cuMemRelease per granule)",
            false,
        ),
    ] {
        let y = |p: &(f64, f64, f64, f64)| if pick { p.2 } else { p.3 };
        // the premium against read granules and against read units: keep the closer fit
        let fit = |x: fn(&(f64, f64, f64, f64)) -> f64| {
            let xy: Vec<(f64, f64)> = pts.iter().map(|p| (x(p), y(p))).collect();
            slope_through_origin(&xy).map(|s| {
                let res: f64 = xy.iter().map(|(x, y)| (y - s * x).powi(2)).sum();
                (s, res)
            })
        };
        let (Some(g), Some(u)) = (fit(|p| p.0), fit(|p| p.1)) else {
            continue;
        };
        let (name, slope, against, other) = if g.1 <= u.1 {
            (by_granule, g.0, "live granules", u)
        } else {
            (by_unit, u.0, "live units", g)
        };
        let d = Domain::of([
            Span::of_levels(R::LiveGranules, pts.iter().map(|p| p.0 * 1024.0)),
            Span::of_levels(R::LiveUnits, pts.iter().map(|p| p.1 * 1024.0)),
        ]);
        let per_point: Vec<String> = pts
            .iter()
            .map(|p| {
                format!(
                    "{:.0} live granules in {:.0} units: {:+.2} µs per granule",
                    p.0 * 1024.0,
                    p.1 * 1024.0,
                    y(p)
                )
            })
            .collect();
        p.set(
            name,
            Constant::measured(
                slope.max(0.0),
                "us",
                Measurement {
                    statistic: Some("least-squares slope through the origin over differences of per-point medians, clamped at 0".into()),
                    ..m(format!("{what}, per unit, host clock, {READ_CYCLE_UNITS} units per cycle at random free slots of one random 128-slot layer of a range holding live units ({}) at seeded random slots, {READ_CYCLES} cycles per mode and repetition, a fresh live set per mode; with the live set read once after it was mapped (one streaming-read launch per unit) and the previous cycle's page-ins read before each cycle (synchronized), minus with nothing read, per granule, against {against} / 1024 ({}); µs per granule per 1024 {against} read; the fit against the other count (slope {:.3}) left more residual ({:.3} vs {:.3} µs^2)", shapes.join(", "), per_point.join(", "), other.0, other.1, g.1.min(u.1)), first.as_ref())
                },
            )
            .with_domain(d),
        );
    }
}

/// The fault time an eviction adds to the faults it overlaps.
fn add_fault_evict_overlap(c: &Calibration, p: &mut Profile, m: &Measure) {
    // faults overlapped by evictions: extra = k x run latency + k x bytes / bandwidth
    let pts: Vec<(f64, f64, f64)> = c
        .fault_evict
        .iter()
        .map(|f| {
            let k = f.experts as f64;
            (k, k * f.run_bytes as f64, f.extra_us.median)
        })
        .collect();
    if let Some(f) = TwoTerms::fit_nonneg(&pts) {
        let first = c.fault_evict.first().map(|f| f.extra_us.clone());
        let per_point: Vec<String> = c
            .fault_evict
            .iter()
            .map(|f| {
                format!(
                    "{} B runs: {:.1} µs alone, {:.1} µs overlapped",
                    f.run_bytes, f.alone_us.median, f.overlapped_us.median
                )
            })
            .collect();
        let method = |term: &str| {
            format!("one expert-kernel launch (gate+up, down) over {EVICT_OVERLAP_K} host-resident experts of managed memory (CUDA events) while cuMemPrefetchAsync moves {EVICT_OVERLAP_K} device-resident experts back to the host on a side stream (one call per expert, enqueued just before), minus the same launch over {EVICT_OVERLAP_K} other fresh experts with no eviction, per repetition; (hidden, bytes) in {FAULT_GEOMETRIES:?} ({}); {term} of the fit extra = runs x latency + bytes / bandwidth, neither term below 0 (r2 {:.5})", per_point.join("; "), f.r2)
        };
        let stat = |meas: Measurement| Measurement {
            statistic: Some("least-squares fit over per-point medians, terms clamped at 0".into()),
            ..meas
        };
        let d = fault_domain(&pts);
        p.set(
            N::OsEvictOverlapRunLatency,
            Constant::measured(
                f.a,
                "us",
                stat(m(method("latency (per evicted run)"), first.as_ref())),
            )
            .with_domain(d.clone()),
        );
        if f.b > 0.0 {
            p.set(
                N::OsEvictOverlapBandwidth,
                Constant::measured(
                    1.0 / f.b,
                    "MB/s",
                    stat(m(method("1 / bytes coefficient"), first.as_ref())),
                )
                .with_domain(d),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::{FaultLaunchPoint, PageInPoint};

    fn one(v: f64) -> Summary {
        Summary::of(&[v]).unwrap()
    }

    #[test]
    fn replay_granularity_fits_by_hand() {
        // a real measurement set (the paging diagnosis's calibration) with hand-made arm points
        let text = include_str!("../tests/fixtures/h200-linux-p5-diag/cal.measurements.json");
        let mut c: Calibration = serde_json::from_str(text).unwrap();
        let pt =
            |g: u64, commit: f64, enqueue: f64, decommit: f64, fresh: Option<f64>| PageInPoint {
                granules: g,
                units: 8,
                commit_us: one(commit),
                h2d_enqueue_us: one(enqueue),
                decommit_us: one(decommit),
                fresh_commit_us: fresh.map(one),
                steady_commit_us: None,
                steady_h2d_enqueue_us: None,
            };
        c.page_in = vec![
            pt(2, 90.0, 2.0, 60.0, Some(110.0)),
            pt(8, 330.0, 4.0, 230.0, Some(350.0)),
        ];
        // faults: k x 50 µs + k x run bytes / 8000 B/µs; evictions: k x 70 + bytes / 16000
        let fl = |k: u32, run: u64| {
            let b = (k as u64 * run) as f64;
            FaultLaunchPoint {
                hidden: 2048,
                ffn: 640,
                expert_bytes: run - 4096,
                run_bytes: run,
                experts: k,
                faulted_us: one(0.0),
                resident_us: one(0.0),
                fault_us: one(k as f64 * 50.0 + b / 8000.0),
                evict_us: Some(one(k as f64 * 70.0 + b / 16000.0)),
            }
        };
        c.fault_launches = vec![
            fl(1, 1 << 20),
            fl(2, 1 << 20),
            fl(1, 4 << 20),
            fl(4, 4 << 20),
        ];
        let p = to_profile(&c, "t");
        let g = |n: N| p.get(n).unwrap();
        // commit + enqueue: (2, 92), (8, 334) -> slope 242 / 6, intercept 92 - 2 x slope
        let slope = 242.0 / 6.0;
        assert!((g(N::VmmCommit) - slope).abs() < 1e-9);
        assert!((g(N::VmmCommitFixed) - (92.0 - 2.0 * slope)).abs() < 1e-9);
        // decommit: (2, 60), (8, 230) -> slope 170 / 6
        assert!((g(N::VmmDecommit) - 170.0 / 6.0).abs() < 1e-9);
        assert!((g(N::VmmDecommitFixed) - (60.0 - 2.0 * 170.0 / 6.0)).abs() < 1e-9);
        // fresh: (20 + 20) µs over 2 + 8 granules
        assert!((g(N::VmmCommitFresh) - 4.0).abs() < 1e-9);
        // faults and evictions, on run bytes (not the kernel's bytes)
        assert!((g(N::FaultRunLatency) - 50.0).abs() < 1e-6);
        assert!((g(N::FaultDenseBandwidth) - 8000.0).abs() < 1e-3);
        assert!((g(N::OsEvictRunLatency) - 70.0).abs() < 1e-6);
        assert!((g(N::OsEvictBandwidth) - 16000.0).abs() < 1e-3);
        p.validate().unwrap();
    }

    #[test]
    fn same_size_commits_fit_on_relative_residuals() {
        let text = include_str!("../tests/fixtures/h200-linux-p5-diag/cal.measurements.json");
        let mut c: Calibration = serde_json::from_str(text).unwrap();
        let pt =
            |g: u64, commit: f64, fresh: Option<f64>, steady: Option<(f64, f64)>| PageInPoint {
                granules: g,
                units: 8,
                commit_us: one(commit),
                h2d_enqueue_us: one(2.0),
                decommit_us: one(30.0 * g as f64),
                fresh_commit_us: fresh.map(one),
                steady_commit_us: steady.map(|s| one(s.0)),
                steady_h2d_enqueue_us: steady.map(|s| one(s.1)),
            };
        // after another size's release the 2-granule cycle is slow (110); right after its
        // own size's release it is not (88 + 2 enqueue)
        c.page_in = vec![
            pt(2, 110.0, Some(90.0), Some((88.0, 2.0))),
            pt(8, 330.0, Some(350.0), Some((346.0, 4.0))),
            pt(32, 1400.0, None, Some((1432.0, 8.0))),
        ];
        let p = to_profile(&c, "t");
        let g = |n: N| p.get(n).unwrap();
        // weighted least squares on (2, 90), (8, 350), (32, 1440) with weights 1 / y^2
        // (weighted means and moments, exact rationals, computed apart from this code):
        // intercept 0.98448449, slope 44.35393205; unweighted the same points give -5 and
        // 45.119, so a plain fit would drop the fixed term
        assert!((g(N::VmmCommitFixed) - 0.984_484_494).abs() < 1e-6);
        assert!((g(N::VmmCommit) - 44.353_932_051).abs() < 1e-6);
        // the model prices a 2-granule page-in's commit calls at the same-size point's 89.7 µs,
        // not at the 112 µs (110 + 2) of the cycle after another size's release
        let m = |gr: f64| g(N::VmmCommitFixed) + gr * g(N::VmmCommit);
        assert!((m(2.0) - 89.692_348_596).abs() < 1e-6);
        // fresh against the same-size commits: (90 - 88) + (350 - 346) over 2 + 8 granules
        assert!((g(N::VmmCommitFresh) - 0.6).abs() < 1e-9);
        // decommits keep the plain fit: 30 µs per granule exactly, no fixed term
        assert!((g(N::VmmDecommit) - 30.0).abs() < 1e-9);
        p.validate().unwrap();

        // one size without the same-size phase: the whole set keeps the plain fit
        c.page_in[2].steady_commit_us = None;
        let p = to_profile(&c, "t");
        // (2, 112), (8, 332), (32, 1402): slope and intercept of the unweighted line
        let pts = [(2.0, 112.0), (8.0, 332.0), (32.0, 1402.0)];
        let (mx, my) = (14.0, 1846.0 / 3.0);
        let sxx: f64 = pts.iter().map(|q: &(f64, f64)| (q.0 - mx).powi(2)).sum();
        let sxy: f64 = pts.iter().map(|q| (q.0 - mx) * (q.1 - my)).sum();
        assert!((p.get(N::VmmCommit).unwrap() - sxy / sxx).abs() < 1e-9);
    }

    #[test]
    fn interference_fits_by_hand() {
        use crate::calibrate::{FaultEvictPoint, ReadPageInPoint};
        let text = include_str!("../tests/fixtures/h200-linux-p5-diag/cal.measurements.json");
        let mut c: Calibration = serde_json::from_str(text).unwrap();
        let rp = |g: u64, live: u64, mode: ReadMode, commit: f64, enq: f64, decommit: f64| {
            ReadPageInPoint {
                granules: g,
                live_units: live,
                mode,
                units: 16,
                commit_us: one(commit),
                h2d_enqueue_us: one(enq),
                decommit_us: one(decommit),
            }
        };
        c.read_page_in = vec![
            // 512 x 2 granules = 1024 live granules (x = 1): +5 µs per granule to commit
            // (110 + 4 vs 100 + 4 per 2-granule unit), +3 to decommit (66 vs 60)
            rp(2, 512, ReadMode::None, 100.0, 4.0, 60.0),
            rp(2, 512, ReadMode::OnceThenFew, 110.0, 4.0, 66.0),
            rp(2, 512, ReadMode::Few, 900.0, 4.0, 900.0), // not the priced mode: ignored
            // 512 x 8 granules = 4096 (x = 4): +10 per granule (480 + 6 vs 400 + 6), +4
            rp(8, 512, ReadMode::None, 400.0, 6.0, 240.0),
            rp(8, 512, ReadMode::OnceThenFew, 480.0, 6.0, 272.0),
        ];
        // extra = 8 runs x 20 µs + 8 runs x run bytes / 4000 B/µs
        let fe = |run: u64| {
            let extra = 8.0 * 20.0 + (8 * run) as f64 / 4000.0;
            FaultEvictPoint {
                hidden: 2048,
                ffn: 640,
                expert_bytes: run,
                run_bytes: run,
                experts: 8,
                alone_us: one(1000.0),
                overlapped_us: one(1000.0 + extra),
                extra_us: one(extra),
                evict_host_us: one(400.0),
                evict_stream_us: one(900.0),
            }
        };
        c.fault_evict = vec![fe(1 << 20), fe(4 << 20)];
        let p = to_profile(&c, "t");
        let g = |n: N| p.get(n).unwrap();
        // through the origin, against live granules / 1024 (1 and 4) or live units / 1024 (0.5
        // both). Commit (1, 5), (4, 10): slope 45 / 17, residuals (5 - 45/17)^2 + (10 -
        // 180/17)^2 = 5.88; against units 15 (both 7.5), residuals 12.5: granules win.
        // Decommit (1, 3), (4, 4): 19 / 17, residuals 3.76; against units 7 (both 3.5),
        // residuals 0.5: units win, and only the winner is set
        assert!((g(N::VmmCommitReadSlope) - 45.0 / 17.0).abs() < 1e-9);
        assert_eq!(p.get(N::VmmCommitReadUnitSlope), None);
        assert!((g(N::VmmDecommitReadUnitSlope) - 7.0).abs() < 1e-9);
        assert_eq!(p.get(N::VmmDecommitReadSlope), None);
        assert!((g(N::OsEvictOverlapRunLatency) - 20.0).abs() < 1e-6);
        assert!((g(N::OsEvictOverlapBandwidth) - 4000.0).abs() < 1e-3);
        p.validate().unwrap();
        // reads that make the calls faster clamp the slope at 0; an overlap that costs
        // nothing prices 0 per run and no bytes term
        c.read_page_in[1] = rp(2, 512, ReadMode::OnceThenFew, 90.0, 4.0, 50.0);
        c.read_page_in[4] = rp(8, 512, ReadMode::OnceThenFew, 380.0, 6.0, 200.0);
        for f in &mut c.fault_evict {
            f.extra_us = one(-30.0);
        }
        let p = to_profile(&c, "t");
        // commit -5 and -2.5 µs per granule: against units -7.5 (residuals 3.125) beats
        // against granules (-15 / 17, residuals 18.0); decommit -5 both: units fit exactly
        assert_eq!(p.get(N::VmmCommitReadUnitSlope), Some(0.0));
        assert_eq!(p.get(N::VmmDecommitReadUnitSlope), Some(0.0));
        assert_eq!(p.get(N::VmmCommitReadSlope), None);
        assert_eq!(p.get(N::OsEvictOverlapRunLatency), Some(0.0));
        assert_eq!(p.get(N::OsEvictOverlapBandwidth), None);
    }

    #[test]
    fn without_the_arms_the_constants_stay_out() {
        let text = include_str!("../tests/fixtures/h200-linux-p5-diag/cal.measurements.json");
        let mut c: Calibration = serde_json::from_str(text).unwrap();
        c.page_in.clear();
        c.fault_launches.clear();
        let p = to_profile(&c, "t");
        for n in [
            N::VmmCommit,
            N::VmmCommitFixed,
            N::VmmDecommit,
            N::VmmCommitFresh,
            N::OsEvictRunLatency,
            N::OsEvictBandwidth,
            N::VmmCommitReadSlope,
            N::VmmDecommitReadSlope,
            N::VmmCommitReadUnitSlope,
            N::VmmDecommitReadUnitSlope,
            N::OsEvictOverlapRunLatency,
            N::OsEvictOverlapBandwidth,
            N::VmmCommitBusyLiveSlope,
            N::VmmDecommitBusyLiveSlope,
        ] {
            assert_eq!(p.get(n), None, "{n}");
        }
        // the one-run-per-launch dense-fault fit remains
        assert!(p.get(N::FaultRunLatency).is_some());
    }

    #[test]
    fn live_set_fits_by_hand() {
        use crate::calibrate::{GpuWork, LiveSetArm, LiveSetPoint, LiveSetProbe};
        let text = include_str!("../tests/fixtures/h200-linux-p5-diag/cal.measurements.json");
        let mut c: Calibration = serde_json::from_str(text).unwrap();
        let idle_live_slope = to_profile(&c, "t").get(N::VmmCommitLiveSlope);
        // commit = 3 + g (40 + s L / 1024), s = 0.5 idle and 1.5 busy; decommit = g (30 + s'
        // L / 1024), s' = 0.25 idle and a negative -0.1 busy (recorded as 0)
        let mut points = Vec::new();
        for block in 0..2 {
            for g in [2u64, 8, 32] {
                for l in [0u64, 1024, 3072] {
                    for (work, cs, ds) in
                        [(GpuWork::Idle, 0.5, 0.25), (GpuWork::Kernels, 1.5, -0.1)]
                    {
                        let x = l as f64 / 1024.0;
                        points.push(LiveSetPoint {
                            block,
                            granules: g,
                            live_granules: l,
                            work,
                            commit_us: one(3.0 + g as f64 * (40.0 + cs * x)),
                            decommit_us: one(g as f64 * (30.0 + ds * x)),
                        });
                    }
                }
            }
        }
        c.live_set = LiveSetArm {
            points,
            probes: vec![
                LiveSetProbe {
                    block: 0,
                    launch_us: 2.0,
                },
                LiveSetProbe {
                    block: 1,
                    launch_us: 2.2,
                },
            ],
            skipped_levels: vec![6144],
        };
        let p = to_profile(&c, "t");
        let near = |n: N, want: f64| {
            let v = p.get(n).unwrap_or_else(|| panic!("{n} absent"));
            assert!((v - want).abs() < 1e-6, "{n}: {v} vs {want}");
        };
        near(N::VmmCommitLiveSlope, 0.5);
        near(N::VmmDecommitLiveSlope, 0.25);
        near(N::VmmCommitBusyLiveSlope, 1.5);
        near(N::VmmDecommitBusyLiveSlope, 0.0);
        near(N::VmmCommitLiveBase, 40.0);
        near(N::VmmDecommitLiveBase, 30.0);
        assert_ne!(
            idle_live_slope,
            Some(0.5),
            "the live-set arm replaced the old fit"
        );
        let meas = |n: N| match &p.constant(n).unwrap().provenance {
            profile::Provenance::Measured(m) => m.clone(),
            other => panic!("{other:?}"),
        };
        let m = meas(N::VmmCommitBusyLiveSlope);
        assert_eq!(m.repetitions, Some(2), "two blocks");
        assert!(m.method.contains("slope 1.500"), "{}", m.method);
        assert!(m.method.contains("median 2.10 µs"), "{}", m.method);
    }
}
