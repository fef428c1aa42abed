//! The union-curve table (`sim profile union-curve`, and the curve `sim profile show` prints):
//! at one routed slot count, the expert kernels' time against the number of distinct experts,
//! with the DRAM bandwidth each reading of the per-slot kernel's time implies. The simulator
//! computes it from a profile (`sim::kernel_surface`); this crate defines and renders it.

use serde::{Deserialize, Serialize};

/// The table for one profile and slot count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnionCurve {
    /// Profile name.
    pub profile: String,
    /// Routed (token, expert) slots of every row.
    pub slots: u32,
    /// Bytes of one expert.
    pub expert_bytes: u64,
    /// The plain streaming read of device memory, bytes per µs (= MB/s): the DRAM ceiling;
    /// `None` when the profile lacks `stream_read_bandwidth`.
    pub stream_read_bytes_per_us: Option<f64>,
    /// CUDA functions of the per-slot and the union kernel as calibrated (empty when the
    /// profile has no measured curve).
    pub per_slot_kernel: String,
    pub union_kernel: String,
    /// One row per distinct-expert count, in the order asked.
    pub rows: Vec<UnionCurveRow>,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnionCurveRow {
    /// Distinct experts among the slots.
    pub distinct: u32,
    /// The per-slot kernel's time from the surface (fixed + distinct bytes / distinct rate +
    /// repeated bytes / repeat rate), µs.
    pub per_slot_us: f64,
    /// The same measured (the profile's curve at these slots and expert bytes), µs.
    pub per_slot_measured_us: Option<f64>,
    /// The union kernel's time from its fit, µs; `None` without the fit.
    pub union_us: Option<f64>,
    /// The same measured, µs.
    pub union_measured_us: Option<f64>,
    /// distinct x expert bytes / per-slot time (measured where measured): the DRAM rate if
    /// only the distinct experts' bytes reached DRAM (repeats served by the L2), bytes per µs.
    pub distinct_bytes_per_us: f64,
    /// slots x expert bytes / the same time: the DRAM rate if every slot's bytes did.
    pub slot_bytes_per_us: f64,
    /// Whether each rate is at or below the streaming read (physically possible); `None`
    /// without `stream_read_bandwidth`.
    pub distinct_possible: Option<bool>,
    pub slot_possible: Option<bool>,
}
