//! Summaries of repeated measurements and the latency + bytes/bandwidth fit. Pure CPU.

use serde::{Deserialize, Serialize};

/// Median and spread of one arm's repetitions (warm-up already discarded).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Median of the samples (mean of the two middle ones for an even count).
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// (max - min) / median; 0 when the median is 0.
    pub spread: f64,
    /// Number of samples.
    pub n: u32,
}

impl Summary {
    /// Summary of `samples`; `None` when there are none or any is not finite.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() || samples.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        let (min, max) = (s[0], s[n - 1]);
        let spread = if median != 0.0 {
            (max - min) / median.abs()
        } else {
            0.0
        };
        Some(Self {
            median,
            min,
            max,
            spread,
            n: n as u32,
        })
    }
}

/// Least-squares fit of `time_us = latency_us + bytes / bytes_per_us`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinearFit {
    /// Intercept, µs (may come out slightly negative when latency is below the noise).
    pub latency_us: f64,
    /// Bandwidth, bytes per µs (= MB/s); 1 / slope.
    pub bytes_per_us: f64,
    /// Coefficient of determination of the fit.
    pub r2: f64,
}

impl LinearFit {
    /// Fits `(bytes, µs)` points; `None` with fewer than two distinct sizes or a non-positive slope.
    pub fn fit(points: &[(f64, f64)]) -> Option<Self> {
        let line = Line::fit(points)?;
        (line.slope > 0.0).then(|| Self {
            latency_us: line.intercept,
            bytes_per_us: 1.0 / line.slope,
            r2: line.r2,
        })
    }
}

/// Least-squares line `y = intercept + slope x` (slope may be of any sign).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// `y` at `x = 0`, in the unit of `y`.
    pub intercept: f64,
    /// Change of `y` per unit of `x`.
    pub slope: f64,
    /// Coefficient of determination of the fit (1 = every point on the line).
    pub r2: f64,
}

impl Line {
    /// Fit over `(x, y)` points; `None` with fewer than two distinct x.
    pub fn fit(points: &[(f64, f64)]) -> Option<Line> {
        let n = points.len() as f64;
        if points.len() < 2 {
            return None;
        }
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        if sxx == 0.0 {
            return None;
        }
        let slope = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx;
        let intercept = my - slope * mx;
        let ss_tot: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
        let ss_res: f64 = points
            .iter()
            .map(|p| (p.1 - intercept - slope * p.0).powi(2))
            .sum();
        let r2 = if ss_tot > 0.0 {
            1.0 - ss_res / ss_tot
        } else {
            1.0
        };
        Some(Line {
            intercept,
            slope,
            r2,
        })
    }
}
