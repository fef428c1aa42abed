//! The `cpu_lane_validation` block: per mode, predicted against measured step time.

use crate::validation::error_pct;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// A CPU-lane validation: its setting and one row per `--cpu-experts` mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuLaneValidation {
    /// Trace label.
    pub trace: String,
    /// Model name from the trace header.
    pub model: String,
    /// Name of the host profile that priced the calls.
    pub host_profile: String,
    /// Expert dtype (`int4`, `bf16`, `fp16`).
    pub dtype: String,
    /// Bytes of one expert as the engine sizes and prices it.
    pub expert_bytes: u64,
    /// Bytes of one expert as the host kernel lays it out (int4: f32 group scales).
    pub kernel_expert_bytes: u64,
    /// Rayon threads of every call (the calibration's "all threads").
    pub threads: usize,
    /// Requests per step (fifo).
    pub batch: usize,
    /// Steps per repetition.
    pub steps: usize,
    /// Passes over every step per mode, interleaved across modes.
    pub repetitions: u32,
    /// What is compared: the CPU lane only.
    pub scope: String,
    /// One row per mode, in the order given.
    pub rows: Vec<CpuLaneRow>,
}

/// One mode's prediction and measurements. Errors are (predicted - measured) / measured, in
/// percent, per step against the median of that step's repetitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuLaneRow {
    /// The `--cpu-experts` mode (`all`, `layers:N`).
    pub mode: String,
    /// MoE layers whose experts run on the CPU.
    pub cpu_layers: usize,
    /// Expert calls per step, mean.
    pub calls_per_step: f64,
    /// True when every CPU-resident expert had its own weights; false when a bank was cycled.
    pub distinct_weights: bool,
    /// Bytes of expert weights the replay read from.
    pub bank_bytes: u64,
    /// Predicted µs of each step.
    pub predicted_us: Vec<f64>,
    /// Measured µs of each step, per repetition (`[repetition][step]`).
    pub measured_us: Vec<Vec<f64>>,
    /// Position of this mode within each repetition (0 = run first).
    pub positions: Vec<u32>,
    /// Median over steps of the predicted step time, µs.
    pub median_predicted_us: f64,
    /// Median over steps of the per-step median measured time, µs.
    pub median_measured_us: f64,
    /// Median per-step error, %.
    pub median_error_pct: f64,
    /// 10th percentile of the per-step errors, %.
    pub p10_error_pct: f64,
    /// 90th percentile of the per-step errors, %.
    pub p90_error_pct: f64,
    /// Median per-step error of each repetition alone, %.
    pub repetition_error_pct: Vec<f64>,
    /// (max - min) / median of the repetitions' total measured times.
    pub repetition_spread: f64,
    /// The machine's state during this mode: the calibration's own point run beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<Probe>,
}

/// A probe of the machine's state: calls at one point the host calibration measured (its
/// middle geometry, one token, all threads, a bank cycled call by call), one before every
/// step of a pass (timed apart from it). On a shared machine the other tenants slow every call
/// alike; the probe's measured/predicted ratio says by how much, apart from the model's error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// Bytes of the probe's expert in the kernel's layout (what the calibration's fit is in).
    pub expert_bytes: u64,
    /// The host profile's price of one probe call, µs.
    pub predicted_us: f64,
    /// Measured µs per probe call, the mean of each repetition's calls.
    pub measured_us: Vec<f64>,
    /// Median over repetitions of measured / predicted.
    pub ratio: f64,
    /// Median per-step error with each repetition's step times divided by that repetition's
    /// ratio before the median over repetitions is taken, %.
    pub adjusted_median_error_pct: f64,
}

/// The `q` quantile (0..=1) of `values` by linear interpolation between the closest ranks
/// (Hyndman and Fan's type 7, NumPy's default); `NaN` for no values.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let h = (s.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    s[lo] + (h - lo as f64) * (s[hi] - s[lo])
}

/// Per-step errors of `measured` (one value per step) against `predicted`, %.
fn step_errors(predicted: &[f64], measured: &[f64]) -> Vec<f64> {
    predicted
        .iter()
        .zip(measured)
        .filter(|(_, &m)| m > 0.0)
        .map(|(&p, &m)| error_pct(p, m))
        .collect()
}

impl CpuLaneRow {
    /// The row of `mode` from its predicted and measured step times (`measured[rep][step]`,
    /// every repetition as long as `predicted`) and the replay's setting.
    pub fn new(
        mode: &str,
        cpu_layers: usize,
        calls_per_step: f64,
        (distinct_weights, bank_bytes): (bool, u64),
        predicted_us: Vec<f64>,
        measured_us: Vec<Vec<f64>>,
        positions: Vec<u32>,
    ) -> CpuLaneRow {
        let per_step: Vec<f64> = (0..predicted_us.len())
            .map(|s| quantile(&measured_us.iter().map(|r| r[s]).collect::<Vec<_>>(), 0.5))
            .collect();
        let errors = step_errors(&predicted_us, &per_step);
        let totals: Vec<f64> = measured_us.iter().map(|r| r.iter().sum()).collect();
        let mid = quantile(&totals, 0.5);
        let (lo, hi) = (quantile(&totals, 0.0), quantile(&totals, 1.0));
        CpuLaneRow {
            mode: mode.to_string(),
            cpu_layers,
            calls_per_step,
            distinct_weights,
            bank_bytes,
            median_predicted_us: quantile(&predicted_us, 0.5),
            median_measured_us: quantile(&per_step, 0.5),
            median_error_pct: quantile(&errors, 0.5),
            p10_error_pct: quantile(&errors, 0.1),
            p90_error_pct: quantile(&errors, 0.9),
            repetition_error_pct: measured_us
                .iter()
                .map(|r| quantile(&step_errors(&predicted_us, r), 0.5))
                .collect(),
            repetition_spread: if mid > 0.0 { (hi - lo) / mid } else { 0.0 },
            predicted_us,
            measured_us,
            positions,
            probe: None,
        }
    }

    /// This row with its probe: `measured_us` per probe call per repetition against the
    /// profile's `predicted_us` for one call of `expert_bytes`.
    pub fn with_probe(
        mut self,
        expert_bytes: u64,
        predicted_us: f64,
        measured_us: Vec<f64>,
    ) -> Self {
        let ratios: Vec<f64> = measured_us.iter().map(|m| m / predicted_us).collect();
        let per_step: Vec<f64> = (0..self.predicted_us.len())
            .map(|s| {
                let reps: Vec<f64> = (self.measured_us.iter().zip(&ratios))
                    .map(|(r, k)| r[s] / k)
                    .collect();
                quantile(&reps, 0.5)
            })
            .collect();
        let ratio = quantile(&ratios, 0.5);
        let adjusted = quantile(&step_errors(&self.predicted_us, &per_step), 0.5);
        self.probe = Some(Probe {
            expert_bytes,
            predicted_us,
            measured_us,
            ratio,
            adjusted_median_error_pct: adjusted,
        });
        self
    }
}

/// The text table of `v`: its setting, then one line per mode.
pub fn cpu_lane_table(v: &CpuLaneValidation) -> String {
    let mut t = format!(
        "CPU-lane validation: {} ({}), host profile {}, {} experts ({} B priced, {} B in the \
         kernel's layout), {} threads, batch {}, {} steps x {} repetitions\n{}\n",
        v.trace,
        v.model,
        v.host_profile,
        v.dtype,
        v.expert_bytes,
        v.kernel_expert_bytes,
        v.threads,
        v.batch,
        v.steps,
        v.repetitions,
        v.scope
    );
    let _ = writeln!(
        t,
        "{:<12} {:>6} {:>10} {:>13} {:>12} {:>10} {:>8} {:>8} {:>10} {:>11} {:>12}  weights",
        "mode",
        "layers",
        "calls/step",
        "predicted ms",
        "measured ms",
        "median err",
        "p10",
        "p90",
        "rep spread",
        "probe ratio",
        "adjusted err"
    );
    for r in &v.rows {
        let _ = writeln!(
            t,
            "{:<12} {:>6} {:>10.1} {:>13.3} {:>12.3} {:>+9.1}% {:>+7.1}% {:>+7.1}% {:>9.1}% {:>11} {:>12}  {}",
            r.mode,
            r.cpu_layers,
            r.calls_per_step,
            r.median_predicted_us / 1e3,
            r.median_measured_us / 1e3,
            r.median_error_pct,
            r.p10_error_pct,
            r.p90_error_pct,
            100.0 * r.repetition_spread,
            r.probe
                .as_ref()
                .map_or("-".into(), |p| format!("{:.2}", p.ratio)),
            r.probe
                .as_ref()
                .map_or("-".into(), |p| format!("{:+.1}%", p.adjusted_median_error_pct)),
            if r.distinct_weights {
                format!("one block per expert, {} MB", r.bank_bytes / 1_000_000)
            } else {
                format!("{} MB bank cycled per call", r.bank_bytes / 1_000_000)
            }
        );
    }
    t
}
