//! The fit of the live-set arm ([`crate::calibrate::LiveSetArm`]): per-unit VMM call time
//! against the unit's granules and the granules mapped at the call. Pure CPU.
//!
//! Model, per unit of `g` granules with `L` granules live (times in µs):
//! `t = fixed + g x (per_granule + slope x L / 1024)`, the cost model's form (sim/src/cost.rs),
//! fitted by least squares on relative residuals `((t - model) / t)^2`, so that a 2-granule
//! cell of 90 µs weighs as much as a 128-granule one of 6,000 µs. Each cell's `t` is the median
//! over blocks of the block's median, so one slow block does not move it.

use crate::calibrate::{GpuWork, LiveSetArm};

/// One fit of [`fit`].
#[derive(Clone, Debug, PartialEq)]
pub struct LiveSetFit {
    /// Per-call fixed part, µs per unit.
    pub fixed_us: f64,
    /// Per-granule part with nothing live, µs.
    pub per_granule_us: f64,
    /// Per-granule time added per 1024 live granules, µs.
    pub slope_us: f64,
    /// Ordinary r^2 of the fitted model on the cells.
    pub r2: f64,
    /// Cells fitted.
    pub cells: usize,
}

/// Which call of the arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// cuMemCreate + cuMemMap + cuMemSetAccess per granule.
    Commit,
    /// cuMemUnmap + cuMemRelease per granule.
    Decommit,
}

/// Per (unit granules, live granules) cell of `work`: the median over blocks of the block
/// medians of `call`, µs per unit, sorted by granules then live granules.
pub fn cell_medians(arm: &LiveSetArm, work: GpuWork, call: Call) -> Vec<(u64, u64, f64)> {
    let mut by: std::collections::BTreeMap<(u64, u64), Vec<f64>> = Default::default();
    for p in arm.points.iter().filter(|p| p.work == work) {
        let s = match call {
            Call::Commit => &p.commit_us,
            Call::Decommit => &p.decommit_us,
        };
        by.entry((p.granules, p.live_granules))
            .or_default()
            .push(s.median);
    }
    by.into_iter()
        .filter_map(|((g, l), v)| crate::stats::Summary::of(&v).map(|s| (g, l, s.median)))
        .collect()
}

/// Fits `t = fixed + g (per_granule + slope L / 1024)` to cells `(g, L, t)`. `None` with fewer
/// than two unit sizes or two live levels, or any `t <= 0`.
pub fn fit(cells: &[(u64, u64, f64)]) -> Option<LiveSetFit> {
    let distinct = |f: fn(&(u64, u64, f64)) -> u64| {
        cells
            .iter()
            .map(f)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    if distinct(|c| c.0) < 2
        || distinct(|c| c.1) < 2
        || cells.iter().any(|c| c.2.is_nan() || c.2 <= 0.0)
    {
        return None;
    }
    // weighted normal equations: rows x / t with target 1
    let mut a = [[0.0f64; 3]; 3];
    let mut b = [0.0f64; 3];
    for &(g, l, t) in cells {
        let (g, l) = (g as f64, l as f64);
        let x = [1.0 / t, g / t, g * l / 1024.0 / t];
        for i in 0..3 {
            b[i] += x[i];
            for j in 0..3 {
                a[i][j] += x[i] * x[j];
            }
        }
    }
    let [fixed_us, per_granule_us, slope_us] = solve3(a, b)?;
    let model = |g: f64, l: f64| fixed_us + g * (per_granule_us + slope_us * l / 1024.0);
    let n = cells.len() as f64;
    let mean = cells.iter().map(|c| c.2).sum::<f64>() / n;
    let ss_tot: f64 = cells.iter().map(|c| (c.2 - mean).powi(2)).sum();
    let ss_res: f64 = cells
        .iter()
        .map(|c| (c.2 - model(c.0 as f64, c.1 as f64)).powi(2))
        .sum();
    Some(LiveSetFit {
        fixed_us,
        per_granule_us,
        slope_us,
        r2: if ss_tot > 0.0 {
            1.0 - ss_res / ss_tot
        } else {
            1.0
        },
        cells: cells.len(),
    })
}

/// Solves the 3 x 3 system by Gaussian elimination with partial pivoting; `None` when singular.
fn solve3(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let piv = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, piv);
        b.swap(col, piv);
        let (pivot_row, pivot_b) = (a[col], b[col]);
        for row in col + 1..3 {
            let f = a[row][col] / pivot_row[col];
            for (x, p) in a[row].iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            b[row] -= f * pivot_b;
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let s: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::LiveSetPoint;
    use crate::stats::Summary;

    #[test]
    fn exact_cells_give_back_their_constants() {
        // t = 3 + g (40 + 1.5 L / 1024), by hand: g = 2, L = 1024 -> 3 + 2 x 41.5 = 86
        let t = |g: u64, l: u64| 3.0 + g as f64 * (40.0 + 1.5 * l as f64 / 1024.0);
        assert_eq!(t(2, 1024), 86.0);
        let cells: Vec<_> = [2u64, 8, 32]
            .iter()
            .flat_map(|&g| [0u64, 1024, 4096].into_iter().map(move |l| (g, l, t(g, l))))
            .collect();
        let f = fit(&cells).expect("fit");
        assert!((f.fixed_us - 3.0).abs() < 1e-9, "{f:?}");
        assert!((f.per_granule_us - 40.0).abs() < 1e-9);
        assert!((f.slope_us - 1.5).abs() < 1e-9);
        assert!((f.r2 - 1.0).abs() < 1e-12);
        assert_eq!(f.cells, 9);
    }

    #[test]
    fn too_few_levels_or_sizes_or_a_zero_time_do_not_fit() {
        assert!(
            fit(&[(2, 0, 90.0), (8, 0, 330.0)]).is_none(),
            "one live level"
        );
        assert!(
            fit(&[(2, 0, 90.0), (2, 1024, 95.0)]).is_none(),
            "one unit size"
        );
        assert!(fit(&[(2, 0, 90.0), (8, 1024, 0.0), (8, 0, 330.0)]).is_none());
    }

    #[test]
    fn cells_take_the_median_over_blocks_of_their_mode_and_call() {
        let pt = |block, g, l, work, c: f64, d: f64| LiveSetPoint {
            block,
            granules: g,
            live_granules: l,
            work,
            commit_us: Summary::of(&[c]).unwrap(),
            decommit_us: Summary::of(&[d]).unwrap(),
        };
        let arm = LiveSetArm {
            points: vec![
                pt(0, 2, 0, GpuWork::Idle, 80.0, 60.0),
                pt(1, 2, 0, GpuWork::Idle, 100.0, 70.0),
                pt(2, 2, 0, GpuWork::Idle, 300.0, 65.0),
                pt(0, 2, 0, GpuWork::Kernels, 999.0, 999.0),
            ],
            ..LiveSetArm::default()
        };
        assert_eq!(
            cell_medians(&arm, GpuWork::Idle, Call::Commit),
            vec![(2, 0, 100.0)]
        );
        assert_eq!(
            cell_medians(&arm, GpuWork::Idle, Call::Decommit),
            vec![(2, 0, 65.0)]
        );
        assert_eq!(
            cell_medians(&arm, GpuWork::Kernels, Call::Commit),
            vec![(2, 0, 999.0)]
        );
    }
}
