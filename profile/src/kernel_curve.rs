//! The expert kernels' union curve: at one routed slot count, kernel time against the number
//! of distinct experts among the slots, for the per-slot kernel (one expert FFN per slot,
//! repeats read again) and the union kernel (one pass per distinct expert). The calibration's
//! kernel arms measure it (`sim calibrate`); `sim profile union-curve` prints it.

use crate::constant::Measurement;
use crate::error::ProfileError;
use serde::{Deserialize, Serialize};

/// One measured point of the curve: `distinct` experts among the curve's slots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelCurvePoint {
    /// Distinct experts among the slots (1 ..= slots).
    pub distinct: u32,
    /// Median time of one layer's launches of the per-slot kernel, µs.
    pub per_slot_us: f64,
    /// Median time of one layer's launches of the union kernel, µs; absent when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub union_us: Option<f64>,
}

/// The curve: every point shares the slot count, the batch's tokens and the expert geometry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelCurve {
    /// Routed (token, expert) slots of every point.
    pub slots: u32,
    /// Tokens of the batch the slots belong to.
    pub tokens: u32,
    /// Model hidden size of the experts.
    pub hidden: u32,
    /// Expert FFN width.
    pub ffn: u32,
    /// Bytes of one expert (int4 weights and their scales).
    pub expert_bytes: u64,
    /// CUDA function of the per-slot kernel.
    pub per_slot_kernel: String,
    /// CUDA function of the union kernel (empty when not measured).
    pub union_kernel: String,
    /// The points, in the order measured (distinct experts falling).
    pub points: Vec<KernelCurvePoint>,
    /// How the points were measured.
    pub measured: Measurement,
}

impl KernelCurve {
    /// Check the curve of profile `profile`: slots and geometry above 0, every point's
    /// distinct count in 1 ..= slots, every time finite and above 0.
    pub fn validate(&self, profile: &str) -> Result<(), ProfileError> {
        let bad = |reason: String| ProfileError::BadValue {
            profile: profile.to_string(),
            constant: "expert_kernel_curve".to_string(),
            reason,
        };
        if self.slots == 0 || self.expert_bytes == 0 || self.points.is_empty() {
            return Err(bad(
                "needs slots, expert bytes and at least one point above 0".into(),
            ));
        }
        for p in &self.points {
            if p.distinct == 0 || p.distinct > self.slots {
                return Err(bad(format!(
                    "has a point of {} distinct experts, outside 1..={} slots",
                    p.distinct, self.slots
                )));
            }
            for t in std::iter::once(p.per_slot_us).chain(p.union_us) {
                if !(t.is_finite() && t > 0.0) {
                    return Err(bad(format!(
                        "has a time of {t} µs at {} distinct experts, expected a finite time above 0",
                        p.distinct
                    )));
                }
            }
        }
        Ok(())
    }
}
