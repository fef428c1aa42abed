//! The expert kernels' time surface, from a calibration's kernel arms: time = f(slots,
//! distinct experts, expert bytes). For the per-slot kernel (the decode path's),
//!
//! `time = expert_kernel_fixed + distinct x bytes / expert_kernel_bandwidth
//!         + (slots - distinct) x bytes / expert_kernel_repeat_bandwidth`
//!
//! the first two terms being the fit over the arms whose slots name distinct experts (the
//! profile's existing fit, `to_profile::add_expert_kernel_fit`), the third fitted here on the
//! arms whose slots repeat experts: a slot whose expert the launch already read costs its bytes
//! at the repeat rate (served partly from L2). For the union kernel (one pass per distinct
//! expert), `time = union_kernel_fixed + distinct x bytes / union_kernel_bandwidth`. The
//! measured 60-slot sweep itself is kept as the profile's `expert_kernel_curve`, and the plain
//! streaming read as `stream_read_bandwidth` (the DRAM ceiling the union curve is judged by).

use crate::calibrate::{Calibration, KernelPoint};
use crate::stats::{slope_through_origin, LinearFit};
use crate::to_profile::{fit_stat, layer_launches, levels, Measure};
use profile::{Constant, ConstantName as N, KernelCurve, KernelCurvePoint, Profile};
use profile::{Domain, Regressor as R, Span};

/// Add the streaming-read ceiling, the repeat-slot and union-kernel fits and the measured
/// curve; each is left out when its arms did not run or its fit is not physical.
pub(crate) fn add_kernel_surface(c: &Calibration, p: &mut Profile, m: &Measure) {
    add_stream_read(c, p, m);
    add_repeat_fit(c, p, m);
    add_union_fit(c, p, m);
    p.expert_kernel_curve = curve(c, m);
}

/// The default per-slot kernel's arms (not the other kernels', not a phase alone).
fn per_slot(c: &Calibration) -> impl Iterator<Item = &KernelPoint> {
    c.kernels.iter().filter(|k| k.variant == "PerSlot")
}

/// The union kernel's arms.
fn union(c: &Calibration) -> impl Iterator<Item = &KernelPoint> {
    c.kernels.iter().filter(|k| k.variant == "Union")
}

/// The plain streaming read over a buffer many times the L2.
fn add_stream_read(c: &Calibration, p: &mut Profile, m: &Measure) {
    let s = &c.stream_read_bytes_per_us;
    if s.median > 0.0 {
        let method = format!("plain streaming read by a reference kernel over {} B of device memory (many times the L2), CUDA events; bytes / time", c.stream_read_bytes);
        p.set(
            N::StreamReadBandwidth,
            Constant::measured(s.median, "MB/s", m(method, Some(s)))
                .with_range(s.min, s.max)
                .with_domain(levels(R::Bytes, [c.stream_read_bytes as f64])),
        );
    }
}

/// Time of the per-slot kernel on `k` by the distinct-expert fit alone (no repeat term).
fn distinct_fit_us(k: &KernelPoint, fixed: f64, bw: f64) -> f64 {
    fixed + (k.distinct as u64 * k.expert_bytes) as f64 / bw
}

/// The repeat rate: the per-slot arms with repeated experts, their time minus the
/// distinct-expert fit against the repeated slots' bytes, least squares through the origin.
fn add_repeat_fit(c: &Calibration, p: &mut Profile, m: &Measure) {
    let (Some(fixed), Some(bw)) = (p.get(N::ExpertKernelFixed), p.get(N::ExpertKernelBandwidth))
    else {
        return;
    };
    let arms: Vec<&KernelPoint> = per_slot(c).filter(|k| k.slots > k.distinct).collect();
    let pts: Vec<(f64, f64)> = arms
        .iter()
        .map(|k| {
            let repeated = ((k.slots - k.distinct) as u64 * k.expert_bytes) as f64;
            (repeated, k.time_us.median - distinct_fit_us(k, fixed, bw))
        })
        .collect();
    let Some(slope) = slope_through_origin(&pts).filter(|&s| s > 0.0) else {
        return;
    };
    let repeat_bw = 1.0 / slope;
    // the surface's largest relative error over every per-slot arm (distinct ones included)
    let worst = per_slot(c)
        .map(|k| {
            let repeated = ((k.slots - k.distinct) as u64 * k.expert_bytes) as f64;
            let t = distinct_fit_us(k, fixed, bw) + repeated / repeat_bw;
            ((t - k.time_us.median) / k.time_us.median).abs()
        })
        .fold(0.0, f64::max);
    let (lo, hi) = arms.iter().fold((usize::MAX, 0), |(lo, hi), k| {
        (lo.min(k.distinct), hi.max(k.distinct))
    });
    let kernel = arms.first().map_or("", |k| k.kernel.as_str());
    let method = format!("int4 expert FFN kernels (kernels crate), per-slot variant, the {} arms whose {} slots repeat experts ({lo}..{hi} distinct), time of {} minus the distinct-expert fit (expert_kernel_fixed + distinct x expert bytes / expert_kernel_bandwidth) against the repeated slots' bytes ((slots - distinct) x expert bytes), least squares through the origin; 1 / slope. The surface fixed + distinct bytes / expert_kernel_bandwidth + repeated bytes / this is within {:.1}% of every per-slot arm", pts.len(), arms[0].slots, layer_launches(kernel), 100.0 * worst);
    let first = arms.first().map(|k| k.time_us.clone());
    p.set(
        N::ExpertKernelRepeatBandwidth,
        Constant::measured(repeat_bw, "MB/s", fit_stat(m(method, first.as_ref()))).with_domain(
            Domain::of([
                Span::of_levels(R::Slots, arms.iter().map(|k| k.slots as f64)),
                Span::of_levels(R::DistinctExperts, arms.iter().map(|k| k.distinct as f64)),
            ]),
        ),
    );
}

/// The union kernel's line: time against the distinct experts' bytes.
fn add_union_fit(c: &Calibration, p: &mut Profile, m: &Measure) {
    let arms: Vec<&KernelPoint> = union(c).collect();
    let pts: Vec<(f64, f64)> = arms
        .iter()
        .map(|k| {
            (
                (k.distinct as u64 * k.expert_bytes) as f64,
                k.time_us.median,
            )
        })
        .collect();
    if pts.len() < 2 {
        return;
    }
    let Some(f) = LinearFit::fit(&pts).filter(|f| f.latency_us > 0.0) else {
        return;
    };
    let kernel = arms[0].kernel.as_str();
    let method = |term: &str| {
        format!("int4 expert FFN kernels (kernels crate), union variant, {} arms of {} slots ({}..{} B of distinct weights per launch), time of {} against distinct expert bytes; {term} of the fit (r2 {:.5})", pts.len(), arms[0].slots, pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min), pts.iter().map(|p| p.0).fold(0.0, f64::max), layer_launches(kernel), f.r2)
    };
    let first = Some(arms[0].time_us.clone());
    let d = Domain::of([
        Span::of_levels(R::Slots, arms.iter().map(|k| k.slots as f64)),
        Span::of_levels(R::DistinctExperts, arms.iter().map(|k| k.distinct as f64)),
        Span::of_levels(R::Bytes, pts.iter().map(|p| p.0)),
    ]);
    p.set(
        N::UnionKernelFixed,
        Constant::measured(
            f.latency_us,
            "us",
            fit_stat(m(method("intercept"), first.as_ref())),
        )
        .with_domain(d.clone()),
    );
    p.set(
        N::UnionKernelBandwidth,
        Constant::measured(
            f.bytes_per_us,
            "MB/s",
            fit_stat(m(method("1 / slope"), first.as_ref())),
        )
        .with_domain(d),
    );
}

/// The measured sweep: the per-slot arms at the slot count of the first one that repeats
/// experts (the sweep's), with the union arm of the same slots and distinct count beside each.
fn curve(c: &Calibration, m: &Measure) -> Option<KernelCurve> {
    let first = per_slot(c).find(|k| k.slots > k.distinct)?;
    let same = |k: &&KernelPoint| {
        k.slots == first.slots && k.expert_bytes == first.expert_bytes && k.tokens == first.tokens
    };
    let union_kernel = union(c).find(same).map_or("", |k| k.kernel.as_str());
    // the repetitions of the sweep, with the largest spread of any of its points
    let mut reps = first.time_us.clone();
    reps.spread = per_slot(c)
        .chain(union(c))
        .filter(same)
        .map(|k| k.time_us.spread)
        .fold(0.0, f64::max);
    let points = per_slot(c)
        .filter(same)
        .map(|k| KernelCurvePoint {
            distinct: k.distinct as u32,
            per_slot_us: k.time_us.median,
            union_us: union(c)
                .filter(same)
                .find(|u| u.distinct == k.distinct)
                .map(|u| u.time_us.median),
        })
        .collect();
    let method = format!("int4 expert FFN kernels (kernels crate), {} slots of {} tokens over {}x{} experts (group {}), per-slot ({}) and union ({}) variants interleaved, fresh experts every repetition, median time of {} per point; spread: the largest of any point's repetitions", first.slots, first.tokens, first.hidden, first.ffn, first.group, first.kernel, union_kernel, layer_launches(""));
    Some(KernelCurve {
        slots: first.slots as u32,
        tokens: first.tokens as u32,
        hidden: first.hidden as u32,
        ffn: first.ffn as u32,
        expert_bytes: first.expert_bytes,
        per_slot_kernel: first.kernel.clone(),
        union_kernel: union_kernel.to_string(),
        points,
        measured: m(method, Some(&reps)),
    })
}

#[cfg(test)]
mod tests {
    use crate::calibrate::{Calibration, KernelPoint};
    use crate::stats::Summary;
    use crate::to_profile::to_profile;
    use profile::ConstantName as N;

    const P8: &str = include_str!("../tests/fixtures/h200-linux-p8.measurements.json");

    /// A kernel arm of `variant` at (slots, distinct) of `bytes` experts taking `us` µs.
    fn arm(variant: &str, slots: usize, distinct: usize, bytes: u64, us: f64) -> KernelPoint {
        KernelPoint {
            hidden: 2560,
            ffn: 640,
            group: 128,
            expert_bytes: bytes,
            tokens: slots / 10,
            slots,
            distinct,
            variant: variant.into(),
            kernel: format!("k_{variant}"),
            time_us: Summary::of(&[us]).unwrap(),
            weight_bytes_per_us: 0.0,
        }
    }

    #[test]
    fn the_fits_recover_an_exact_surface() {
        let mut c: Calibration = serde_json::from_str(P8).unwrap();
        // per-slot: 10 µs + 0.5 µs per distinct 2 MB expert (4e6 B/µs) + 0.4 µs per repeated
        // slot (5e6 B/µs); union: 30 µs + 2 µs per distinct expert (1e6 B/µs)
        let b = 2_000_000u64;
        let per_slot = |s: usize, d: usize| 10.0 + 0.5 * d as f64 + 0.4 * (s - d) as f64;
        c.kernels = vec![arm("PerSlot", 8, 8, b, per_slot(8, 8))];
        for d in [60, 30, 10, 6] {
            c.kernels.push(arm("PerSlot", 60, d, b, per_slot(60, d)));
            c.kernels
                .push(arm("Union", 60, d, b, 30.0 + 2.0 * d as f64));
        }
        let p = to_profile(&c, "t");
        let g = |n: N| p.get(n).unwrap();
        assert!((g(N::ExpertKernelFixed) - 10.0).abs() < 1e-9);
        assert!((g(N::ExpertKernelBandwidth) - 4e6).abs() < 1e-3);
        assert!((g(N::ExpertKernelRepeatBandwidth) - 5e6).abs() < 1e-3);
        assert!((g(N::UnionKernelFixed) - 30.0).abs() < 1e-9);
        assert!((g(N::UnionKernelBandwidth) - 1e6).abs() < 1e-6);
        // the curve: the 60-slot arms in the order measured, each with its union time
        let curve = p.expert_kernel_curve.unwrap();
        assert_eq!((curve.slots, curve.expert_bytes), (60, b));
        // 10 + 0.5 d + 0.4 (60 - d): 40, 37, 35, 34.6 µs
        let pts: Vec<(u32, f64, Option<f64>)> = curve
            .points
            .iter()
            .map(|q| (q.distinct, q.per_slot_us, q.union_us))
            .collect();
        assert_eq!(
            pts,
            [
                (60, 40.0, Some(150.0)),
                (30, 37.0, Some(90.0)),
                (10, 35.0, Some(50.0)),
                (6, 34.6, Some(42.0))
            ]
        );
        assert_eq!(curve.per_slot_kernel, "k_PerSlot");
        assert_eq!(curve.union_kernel, "k_Union");
    }

    #[test]
    fn the_shipped_sets_surface_reproduces_its_arms() {
        let c: Calibration =
            serde_json::from_str(include_str!("../data/h200-linux-p9.measurements.json")).unwrap();
        let p = to_profile(&c, "t");
        let g = |n: N| p.get(n).unwrap();
        let (fixed, bw, rep) = (
            g(N::ExpertKernelFixed),
            g(N::ExpertKernelBandwidth),
            g(N::ExpertKernelRepeatBandwidth),
        );
        // the repeat rate, by the normal equation of a line through the origin over the arms
        // that repeat experts: sum(x r) / sum(x^2), x = repeated bytes, r = time - distinct fit
        let (mut sxr, mut sxx) = (0.0, 0.0);
        for k in c
            .kernels
            .iter()
            .filter(|k| k.variant == "PerSlot" && k.slots > k.distinct)
        {
            let x = ((k.slots - k.distinct) as u64 * k.expert_bytes) as f64;
            let r = k.time_us.median - fixed - (k.distinct as u64 * k.expert_bytes) as f64 / bw;
            sxr += x * r;
            sxx += x * x;
        }
        assert!((rep - sxx / sxr).abs() < 1e-6 * rep);
        // every per-slot arm within 5.2% of the surface (its provenance says 5.1%)
        for k in c.kernels.iter().filter(|k| k.variant == "PerSlot") {
            let b = k.expert_bytes as f64;
            let t = fixed + k.distinct as f64 * b / bw + (k.slots - k.distinct) as f64 * b / rep;
            let m = k.time_us.median;
            assert!(
                ((t - m) / m).abs() < 0.052,
                "{} of {}: {t} vs {m}",
                k.distinct,
                k.slots
            );
        }
        let method = match &p
            .constant(N::ExpertKernelRepeatBandwidth)
            .unwrap()
            .provenance
        {
            profile::Provenance::Measured(m) => m.method.clone(),
            other => panic!("{other:?}"),
        };
        assert!(method.contains("within 5.1%"), "{method}");
        // the streaming read is the set's own
        assert_eq!(g(N::StreamReadBandwidth), c.stream_read_bytes_per_us.median);
    }
}
