//! The `validation` block of `sim validate`'s output: per-step statistics, repetitions, rows,
//! and how repetitions combine (median of their p50s, spread).

use super::analysis::Analysis;
use super::RetentionSettings;
use crate::engine::StepParts;
use serde::{Deserialize, Serialize};
use validate::host_context::HostContext;
use validate::probe::BlockProbe;
use validate::stats::Summary;
use validate::warmup::WarmUp;
use validate::{HostBreakdown, ReplayMeasurement};

/// p50, p99 and mean of step times, ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

impl StepStats {
    /// Nearest-rank percentiles (rank ceil(q x n)) and the mean of `us` (µs), in ms.
    pub fn of(us: &[f64]) -> StepStats {
        let mut s = us.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let q = |p: f64| {
            if n == 0 {
                0.0
            } else {
                s[((p * n as f64).ceil() as usize).clamp(1, n) - 1] / 1e3
            }
        };
        StepStats {
            p50_ms: q(0.50),
            p99_ms: q(0.99),
            mean_ms: if n == 0 {
                0.0
            } else {
                s.iter().sum::<f64>() / n as f64 / 1e3
            },
        }
    }
}

/// (predicted - measured) / measured, in percent.
pub fn error_pct(pred: f64, meas: f64) -> f64 {
    100.0 * (pred - meas) / meas
}

/// One repetition of a policy's real replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Repetition {
    /// Position of this policy within its repetition (0 = replayed first).
    pub position: u32,
    /// Step statistics of this repetition, ms.
    pub measured: StepStats,
    /// Every step's measured time, µs.
    pub step_us: Vec<f64>,
    /// Every step's host breakdown.
    pub host: Vec<HostBreakdown>,
    /// The block (`--blocks`) this repetition ran in, from 0; absent in files written before
    /// blocks (their repetitions all ran back to back, in one block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<u32>,
}

impl Repetition {
    /// Host time of the replay's launches and event records per group, µs (`launch_us` summed
    /// over the steps / their groups): driver calls without any VMM work, so a probe of the host's
    /// speed in this repetition (the VMM calls slow down with it: launch and commit time correlate,
    /// r = 0.87, docs/history/validation.md). `None` for a replay without a host breakdown.
    pub fn launch_us_per_group(&self) -> Option<f64> {
        let groups: u64 = self.host.iter().map(|h| u64::from(h.groups)).sum();
        (groups > 0).then(|| self.host.iter().map(|h| h.launch_us).sum::<f64>() / groups as f64)
    }
}

/// One mechanism's row of the `validation` block. With `--repeat N`, `measured` holds the
/// median over the N repetitions of each repetition's p50, p99 and mean (for N = 1, the one
/// replay's), and the errors are taken against it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ValidationRow {
    pub policy: String,
    pub steps: usize,
    pub page_ins: u64,
    pub measured: StepStats,
    pub predicted: StepStats,
    /// Error of the prediction, percent of the measurement: p50, p99, mean.
    pub error_pct_p50: f64,
    pub error_pct_p99: f64,
    pub error_pct_mean: f64,
    /// The first repetition's full measurement.
    pub replay: ReplayMeasurement,
    /// Repetitions of the real replay (`--repeat`).
    #[serde(default = "one")]
    pub repeat: u32,
    /// Each repetition, in order.
    #[serde(default)]
    pub repetitions: Vec<Repetition>,
    /// Smallest and largest p50 of the repetitions, ms, and (max - min) / median, percent.
    #[serde(default)]
    pub measured_p50_min_ms: f64,
    #[serde(default)]
    pub measured_p50_max_ms: f64,
    #[serde(default)]
    pub measured_p50_spread_pct: f64,
    /// Error of the p50 prediction against the slowest and the fastest repetition's p50,
    /// percent (the range the error moves in over the repetitions).
    #[serde(default)]
    pub error_pct_p50_range: [f64; 2],
    /// The engine's predicted time of every replayed step, µs.
    #[serde(default)]
    pub predicted_step_us: Vec<f64>,
    /// The engine's time split of every replayed step.
    #[serde(default)]
    pub predicted_parts: Vec<StepParts>,
    /// Untimed warm-up steps before the measured ones, in the replay and in the prediction
    /// alike; absent in files written before the warm-up (they had none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_steps: Option<usize>,
    /// Whether the warm-up reached the steady rule (`validate::warmup::DEFAULT_RULE`); false
    /// when its cap or the trace's length ended it first (and for rows without a warm-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_steady: Option<bool>,
}

fn one() -> u32 {
    1
}

/// Repetition order: in repetition `rep`, position `i` replays policy `(i + rep) mod n`.
pub fn rotation(rep: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |i| (i + rep) % n)
}

/// The combined measurement of repetitions: the median of their p50s, p99s and means
/// (`Summary` median: the mean of the two middle values for an even count), and the summary
/// of the p50s (min, max, spread). `None` without repetitions.
pub fn combine(reps: &[StepStats]) -> Option<(StepStats, Summary)> {
    let p50 = Summary::of(&reps.iter().map(|r| r.p50_ms).collect::<Vec<_>>())?;
    let p99 = Summary::of(&reps.iter().map(|r| r.p99_ms).collect::<Vec<_>>())?;
    let mean = Summary::of(&reps.iter().map(|r| r.mean_ms).collect::<Vec<_>>())?;
    Some((
        StepStats {
            p50_ms: p50.median,
            p99_ms: p99.median,
            mean_ms: mean.median,
        },
        p50,
    ))
}

/// The `validation` block.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Validation {
    pub trace: String,
    pub model: String,
    pub hw: String,
    pub expert_bytes: u64,
    /// VMM commit granule of the run's `e*` and `region:*` policies, bytes (`--granule-mib`;
    /// `None` when every policy pages through the OS, and in files written before this field).
    #[serde(default)]
    pub vmm_granule_bytes: Option<u64>,
    /// Retention echo for machines: `{policy:?}@{budget:?}` (`Lru@Fraction { num: 50, den:
    /// 100 }`), or `streaming`; the form every earlier file holds, kept so they compare.
    pub retention: String,
    /// Retention as the flags said it: `lru, budget 50%`, or `streaming` (empty in files
    /// written before this field).
    #[serde(default)]
    pub retention_text: String,
    /// Retention flags (`None` for streaming, and in files written before this field).
    #[serde(default)]
    pub retention_settings: Option<RetentionSettings>,
    pub rows: Vec<ValidationRow>,
    /// The host when the validation started (absent in files written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_context: Option<HostContext>,
    /// The probes bracketing each block of replays (`--blocks`), in block order; empty in
    /// files written before blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<BlockRecord>,
    /// The verdicts and the component table ([`super::analysis`]); written for validations
    /// that recorded blocks (stored files without them: `sim validate --reprice`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<Analysis>,
    /// A composed validation's CPU lane (`--cpu-experts` with `--hw`): every row is one
    /// placement of the one `--policy`; absent for a GPU-only validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub composed: Option<Composed>,
}

/// What a composed validation ran on the host CPU beside the GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Composed {
    /// The host profile that priced the CPU calls (`--hw-host`).
    pub host_profile: String,
    /// The placements, one per row, in row order (`layers:N`, `misses`).
    pub placements: Vec<String>,
    /// Weight dtype of the experts (`--dtype`): the host kernel's format and the price.
    pub dtype: String,
    /// Bytes of one expert in the host kernel's layout.
    pub cpu_kernel_expert_bytes: u64,
    /// What the replay does differently from the engine, in words.
    pub differences: String,
}

/// One block of a blocked validation: the probes before and after its replays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockRecord {
    /// Block index, from 0.
    pub block: u32,
    pub before: BlockProbe,
    pub after: BlockProbe,
}

impl BlockRecord {
    /// The block's host probe: the mean of the launch probes before and after it, µs per group.
    pub fn probe_us(&self) -> f64 {
        (self.before.launch_us_per_group + self.after.launch_us_per_group) / 2.0
    }
}

impl ValidationRow {
    /// A policy's row from its prediction (`predicted_step_us` and `predicted_parts`, one per
    /// replayed step) and its repetitions `(position, measurement)`, the first kept in full.
    /// Errors: no repetition, or none with a finite step time.
    pub fn new(
        policy: String,
        steps: usize,
        page_ins: u64,
        predicted_step_us: Vec<f64>,
        predicted_parts: Vec<StepParts>,
        reps: Vec<StoredRep>,
    ) -> anyhow::Result<ValidationRow> {
        let repetitions: Vec<Repetition> = reps
            .iter()
            .map(|r| Repetition {
                position: r.position,
                measured: StepStats::of(&r.measurement.step_us),
                step_us: r.measurement.step_us.clone(),
                host: r.measurement.host.clone(),
                block: r.block,
            })
            .collect();
        let stats: Vec<StepStats> = repetitions.iter().map(|r| r.measured).collect();
        let Some((measured, p50s)) = combine(&stats) else {
            anyhow::bail!(
                "no finite measurement of --policy {policy}: the replay returned no step times"
            );
        };
        let predicted = StepStats::of(&predicted_step_us);
        let Some(StoredRep {
            measurement: first, ..
        }) = reps.into_iter().next()
        else {
            anyhow::bail!("--policy {policy} was not replayed");
        };
        Ok(ValidationRow {
            policy,
            steps,
            page_ins,
            error_pct_p50: error_pct(predicted.p50_ms, measured.p50_ms),
            error_pct_p99: error_pct(predicted.p99_ms, measured.p99_ms),
            error_pct_mean: error_pct(predicted.mean_ms, measured.mean_ms),
            measured,
            predicted,
            replay: first,
            repeat: repetitions.len() as u32,
            measured_p50_min_ms: p50s.min,
            measured_p50_max_ms: p50s.max,
            measured_p50_spread_pct: 100.0 * p50s.spread,
            error_pct_p50_range: [
                error_pct(predicted.p50_ms, p50s.max),
                error_pct(predicted.p50_ms, p50s.min),
            ],
            repetitions,
            predicted_step_us,
            predicted_parts,
            warmup_steps: None,
            warmup_steady: None,
        })
    }

    /// The row with its warm-up recorded (`None`: a stored file's row without one, left so).
    pub fn with_warm_up(mut self, w: Option<WarmUp>) -> ValidationRow {
        self.warmup_steps = w.map(|w| w.steps);
        self.warmup_steady = w.map(|w| w.steady);
        self
    }

    /// The warm-up the row recorded (`None` in files written before it).
    pub fn warm_up(&self) -> Option<WarmUp> {
        self.warmup_steps.map(|steps| WarmUp {
            steps,
            steady: self.warmup_steady.unwrap_or(false),
        })
    }

    /// The repetitions a stored row holds (one, the `replay`, for files written before
    /// repetitions were recorded).
    pub fn stored_repetitions(&self) -> Vec<StoredRep> {
        if self.repetitions.is_empty() {
            return vec![StoredRep {
                position: 0,
                block: None,
                measurement: self.replay.clone(),
            }];
        }
        self.repetitions
            .iter()
            .map(|x| StoredRep {
                position: x.position,
                block: x.block,
                measurement: ReplayMeasurement {
                    step_us: x.step_us.clone(),
                    host: x.host.clone(),
                    ..self.replay.clone()
                },
            })
            .collect()
    }
}

/// One repetition's measurement with where it ran: its position within its round and its
/// block (`None`: no blocks recorded).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRep {
    pub position: u32,
    pub block: Option<u32>,
    pub measurement: ReplayMeasurement,
}
