//! The host profile built from a [`HostCalibration`]: one constant per fitted or measured
//! figure, each with its provenance; a figure not measured is absent.

use super::expert_arms::ExpertFit;
use super::expert_kernel::Format;
use super::HostCalibration;
use crate::stats::Summary;
use profile::{Constant, ConstantName, Device, Domain, Measurement, Profile, Regressor as R, Span};

/// The provenance of one figure of `cal`.
fn measurement(cal: &HostCalibration, method: String, reps: u32, spread: f64) -> Measurement {
    Measurement {
        gpu: format!("none (host CPU: {})", cal.cpu),
        driver: "n/a (no GPU used)".into(),
        cuda: "n/a (no GPU used)".into(),
        date: cal.date.clone(),
        method,
        repetitions: Some(reps),
        spread: Some(spread),
        statistic: Some("median".into()),
        source: Some("sim calibrate --only host".into()),
    }
}

/// The fit of `cal` for (format, tokens, threads), if measured.
fn fit(cal: &HostCalibration, format: Format, tokens: usize, threads: usize) -> Option<&ExpertFit> {
    cal.expert_fits
        .iter()
        .find(|f| (f.format, f.tokens, f.threads) == (format, tokens, threads))
}

/// Set the bandwidth (and, with `overhead`, the intercept) of one expert fit.
fn set_fit(
    p: &mut Profile,
    cal: &HostCalibration,
    (format, tokens, threads): (Format, usize, usize),
    bandwidth: ConstantName,
    overhead: Option<ConstantName>,
) {
    let Some(f) = fit(cal, format, tokens, threads) else {
        return;
    };
    let points: Vec<_> = cal
        .experts
        .iter()
        .filter(|e| (e.format, e.tokens, e.threads) == (format, tokens, threads))
        .collect();
    let reps = points.iter().map(|e| e.call_us.n).min().unwrap_or(0);
    let method = format!(
        "{format:?} expert FFN (gate/up, SiLU, down) on the host CPU, {tokens} token(s), \
         {threads} rayon thread(s), each call on the next expert of a {} MiB bank; \
         least-squares fit of median call time against expert bytes over {} sizes (r2 {:.4})",
        cal.expert_bank_bytes >> 20,
        points.len(),
        f.fit.r2
    );
    let m = measurement(cal, method, reps, f.spread);
    let d = Domain::of([
        Span::of_levels(R::Threads, [threads as f64]),
        Span::of_levels(R::Bytes, points.iter().map(|e| e.expert_bytes as f64)),
    ]);
    p.set(
        bandwidth,
        Constant::measured(f.fit.bytes_per_us, "MB/s", m.clone()).with_domain(d.clone()),
    );
    if let Some(name) = overhead.filter(|_| f.fit.latency_us >= 0.0) {
        p.set(
            name,
            Constant::measured(f.fit.latency_us, "us", m).with_domain(d),
        );
    }
}

/// Set a constant from a summary of bytes per µs, measured with `threads` threads on
/// `bytes`-byte reads (its domain).
fn set_rate(
    p: &mut Profile,
    cal: &HostCalibration,
    name: ConstantName,
    s: &Summary,
    method: String,
    (threads, bytes): (usize, u64),
) {
    let m = measurement(cal, method, s.n, s.spread);
    let d = Domain::of([
        Span::of_levels(R::Threads, [threads as f64]),
        Span::of_levels(R::Bytes, [bytes as f64]),
    ]);
    p.set(
        name,
        Constant::measured(s.median, "MB/s", m)
            .with_range(s.min, s.max)
            .with_domain(d),
    );
}

/// The host profile `name` of `cal` (no GPU constants: combine it with a GPU profile).
pub fn to_profile(cal: &HostCalibration, name: &str) -> Profile {
    let device = Device {
        gpu: "none (host profile)".into(),
        os: cal.os.clone(),
        driver: String::new(),
        cuda: String::new(),
        link: None,
        host: Some(format!("{} ({} threads)", cal.cpu, cal.all_threads)),
    };
    let desc = format!(
        "Host CPU profile of {} measured by sim calibrate --only host",
        cal.cpu
    );
    let mut p = Profile::new(name, &desc, device);
    let all = cal.all_threads;
    use ConstantName as C;
    set_fit(
        &mut p,
        cal,
        (Format::Int4, 1, all),
        C::HostExpertInt4Bandwidth,
        Some(C::HostExpertInt4CallOverhead),
    );
    set_fit(
        &mut p,
        cal,
        (Format::Int4, 1, 1),
        C::HostExpertInt4Bandwidth1Thread,
        None,
    );
    set_fit(
        &mut p,
        cal,
        (Format::Int4, 16, all),
        C::HostExpertInt4Tokens16Bandwidth,
        None,
    );
    set_fit(
        &mut p,
        cal,
        (Format::Bf16, 1, all),
        C::HostExpertBf16Bandwidth,
        Some(C::HostExpertBf16CallOverhead),
    );
    for m in &cal.memory {
        let name = if m.threads == 1 {
            C::HostMemoryReadBandwidth1Thread
        } else {
            C::HostMemoryReadBandwidth
        };
        let method = format!(
            "streaming read (wrapping u64 sum) of a {} MiB buffer, {} thread(s), per pass",
            m.buffer_bytes >> 20,
            m.threads
        );
        let at = (m.threads, m.buffer_bytes as u64);
        set_rate(&mut p, cal, name, &m.bytes_per_us, method, at);
    }
    if all == 1 {
        // one thread is all threads: the all-thread figure is the single-thread one
        if let Some(c) = p.constant(C::HostMemoryReadBandwidth1Thread).cloned() {
            p.set(C::HostMemoryReadBandwidth, c);
        }
    }
    if let Some(s) = &cal.ssd {
        for pt in &s.points {
            let name = if pt.queue_depth == 1 {
                C::HostSsdReadBandwidth
            } else {
                C::HostSsdReadBandwidthQd4
            };
            let method =
                format!(
                "{} reads of {} B blocks of a {} MiB temporary file in {}, random order, queue \
                 depth {}, {}, per pass",
                pt.reads, pt.block_bytes, s.file_bytes >> 20, s.dir, pt.queue_depth, s.io_mode
            );
            let at = (pt.queue_depth, pt.block_bytes as u64);
            set_rate(&mut p, cal, name, &pt.bytes_per_us, method, at);
        }
        p.notes.push(format!("SSD reads: {}", s.io_mode));
    }
    if cal.quick {
        p.notes
            .push("--quick run: tiny sizes, figures not representative".into());
    }
    p
}
