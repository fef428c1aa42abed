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

/// Least-squares fit through the origin of `y = a x1 + b x2`: two per-item costs of one
/// measurement, e.g. `time = runs x latency + bytes / bandwidth` with no per-launch term.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TwoTerms {
    /// Coefficient of `x1`, in the unit of `y` per unit of `x1`.
    pub a: f64,
    /// Coefficient of `x2`, in the unit of `y` per unit of `x2`.
    pub b: f64,
    /// Coefficient of determination against the mean of `y`.
    pub r2: f64,
}

impl TwoTerms {
    /// Fit over `(x1, x2, y)` points; `None` when the normal equations are singular (fewer
    /// than two points, or `x1` and `x2` proportional).
    pub fn fit(points: &[(f64, f64, f64)]) -> Option<TwoTerms> {
        let s = |f: &dyn Fn(&(f64, f64, f64)) -> f64| points.iter().map(f).sum::<f64>();
        let (s11, s12, s22) = (s(&|p| p.0 * p.0), s(&|p| p.0 * p.1), s(&|p| p.1 * p.1));
        let (s1y, s2y) = (s(&|p| p.0 * p.2), s(&|p| p.1 * p.2));
        let det = s11 * s22 - s12 * s12;
        if points.len() < 2 || det.abs() <= 1e-12 * (s11 * s22).abs() {
            return None;
        }
        let a = (s1y * s22 - s2y * s12) / det;
        let b = (s11 * s2y - s12 * s1y) / det;
        let my = s(&|p| p.2) / points.len() as f64;
        let ss_tot = s(&|p| (p.2 - my).powi(2));
        let ss_res = s(&|p| (p.2 - a * p.0 - b * p.1).powi(2));
        let r2 = if ss_tot > 0.0 {
            1.0 - ss_res / ss_tot
        } else {
            1.0
        };
        Some(TwoTerms { a, b, r2 })
    }

    /// As [`TwoTerms::fit`], with neither coefficient below 0: where the full fit gives a
    /// negative one, that term is dropped (0) and the other refitted alone through the origin
    /// (0 too if that is negative). `None` when no point has a non-zero `x1` or `x2`.
    pub fn fit_nonneg(points: &[(f64, f64, f64)]) -> Option<TwoTerms> {
        if let Some(f) = TwoTerms::fit(points).filter(|f| f.a >= 0.0 && f.b >= 0.0) {
            return Some(f);
        }
        let one = |pick: fn(&(f64, f64, f64)) -> f64| {
            let pts: Vec<(f64, f64)> = points.iter().map(|p| (pick(p), p.2)).collect();
            slope_through_origin(&pts).map(|s| s.max(0.0))
        };
        let (a, b) = (one(|p| p.0), one(|p| p.1));
        // keep the single term that explains more of y (smaller residual)
        let res = |a: f64, b: f64| -> f64 {
            points
                .iter()
                .map(|p| (p.2 - a * p.0 - b * p.1).powi(2))
                .sum()
        };
        let (a, b) = match (a, b) {
            (Some(a), Some(b)) => {
                if res(a, 0.0) <= res(0.0, b) {
                    (a, 0.0)
                } else {
                    (0.0, b)
                }
            }
            (Some(a), None) => (a, 0.0),
            (None, Some(b)) => (0.0, b),
            (None, None) => return None,
        };
        let my = points.iter().map(|p| p.2).sum::<f64>() / points.len() as f64;
        let ss_tot: f64 = points.iter().map(|p| (p.2 - my).powi(2)).sum();
        let r2 = if ss_tot > 0.0 {
            1.0 - res(a, b) / ss_tot
        } else {
            1.0
        };
        Some(TwoTerms { a, b, r2 })
    }
}

/// Least-squares slope of `y = slope x` through the origin over `(x, y)` points:
/// `sum(x y) / sum(x^2)`; `None` when every `x` is 0.
pub fn slope_through_origin(points: &[(f64, f64)]) -> Option<f64> {
    let sxx: f64 = points.iter().map(|p| p.0 * p.0).sum();
    (sxx > 0.0).then(|| points.iter().map(|p| p.0 * p.1).sum::<f64>() / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_terms_recover_exact_coefficients() {
        // y = 50 x1 + 0.125 x2 on points not on one line through the origin
        let pts: Vec<(f64, f64, f64)> = [(1.0, 2000.0), (2.0, 1000.0), (8.0, 64000.0), (4.0, 0.0)]
            .iter()
            .map(|&(x1, x2)| (x1, x2, 50.0 * x1 + 0.125 * x2))
            .collect();
        let f = TwoTerms::fit(&pts).unwrap();
        assert!(
            (f.a - 50.0).abs() < 1e-9 && (f.b - 0.125).abs() < 1e-12,
            "{f:?}"
        );
        assert!((f.r2 - 1.0).abs() < 1e-12);
        // proportional columns cannot be told apart
        assert!(TwoTerms::fit(&[(1.0, 2.0, 3.0), (2.0, 4.0, 6.0)]).is_none());
        assert!(TwoTerms::fit(&[(1.0, 2.0, 3.0)]).is_none());
    }

    #[test]
    fn two_terms_by_hand_with_noise() {
        // points (1,0,3), (0,1,5), (1,1,7): normal equations [2 1; 1 2][a b] = [10 12]
        // -> a = 8/3, b = 14/3
        let f = TwoTerms::fit(&[(1.0, 0.0, 3.0), (0.0, 1.0, 5.0), (1.0, 1.0, 7.0)]).unwrap();
        assert!((f.a - 8.0 / 3.0).abs() < 1e-12 && (f.b - 14.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn nonneg_fits_by_hand() {
        // (x, y) = (1, 2), (2, 5): sum(xy) = 12, sum(x^2) = 5
        assert_eq!(slope_through_origin(&[(1.0, 2.0), (2.0, 5.0)]), Some(2.4));
        assert_eq!(slope_through_origin(&[(0.0, 2.0)]), None);
        // exact y = 10 x1 + 2 x2: the full fit stands
        let f = TwoTerms::fit_nonneg(&[(8.0, 1.0, 82.0), (8.0, 4.0, 88.0)]).unwrap();
        assert!(
            (f.a - 10.0).abs() < 1e-9 && (f.b - 2.0).abs() < 1e-9,
            "{f:?}"
        );
        // the full fit is a = -1.25, b = 3 (8a + 10b = 20, 8a + 20b = 50): a < 0. Alone,
        // x1 gives a = (160 + 400) / 128 = 4.375 (residuals (20 - 35)^2 + (50 - 35)^2 = 450)
        // and x2 gives b = (200 + 1000) / (100 + 400) = 2.4 (residuals 16 + 4 = 20): b wins
        let f = TwoTerms::fit_nonneg(&[(8.0, 10.0, 20.0), (8.0, 20.0, 50.0)]).unwrap();
        assert_eq!(f.a, 0.0);
        assert!((f.b - 2.4).abs() < 1e-12, "{f:?}");
        // every y negative: both terms 0
        let f = TwoTerms::fit_nonneg(&[(8.0, 10.0, -5.0), (8.0, 20.0, -1.0)]).unwrap();
        assert_eq!((f.a, f.b), (0.0, 0.0));
    }

    #[test]
    fn line_and_summary_by_hand() {
        let l = Line::fit(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]).unwrap();
        assert_eq!((l.intercept, l.slope, l.r2), (1.0, 2.0, 1.0));
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(
            (s.median, s.min, s.max, s.spread, s.n),
            (2.5, 1.0, 4.0, 1.2, 4)
        );
    }
}
