//! Statistics used by the calibration (no GPU).

use validate::device::civil_from_days;
use validate::stats::{LinearFit, Summary};

#[test]
fn summary_median_and_spread() {
    let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
    assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 4.0, 4));
    assert!((s.spread - 3.0 / 2.5).abs() < 1e-12);
    assert_eq!(Summary::of(&[5.0, 1.0, 9.0]).unwrap().median, 5.0);
    assert!(Summary::of(&[]).is_none());
    assert!(Summary::of(&[1.0, f64::NAN]).is_none());
}

#[test]
fn fit_recovers_latency_and_bandwidth_of_exact_points() {
    // t = 10 µs + bytes / 50_000 B/µs (50 GB/s)
    let pts: Vec<(f64, f64)> = [65536.0, 1048576.0, 268435456.0]
        .iter()
        .map(|&b| (b, 10.0 + b / 50_000.0))
        .collect();
    let f = LinearFit::fit(&pts).unwrap();
    assert!((f.latency_us - 10.0).abs() < 1e-6, "{f:?}");
    assert!((f.bytes_per_us - 50_000.0).abs() < 1e-6, "{f:?}");
    assert!((f.r2 - 1.0).abs() < 1e-12);
    assert!(LinearFit::fit(&[(1.0, 1.0)]).is_none());
    assert!(LinearFit::fit(&[(1.0, 2.0), (2.0, 1.0)]).is_none());
}

#[test]
fn civil_dates() {
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(civil_from_days(11016), (2000, 2, 29));
    assert_eq!(civil_from_days(20_000), (2024, 10, 4));
}
