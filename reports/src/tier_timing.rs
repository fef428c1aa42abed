//! The timed tiers of a run with `--dram` on a hardware profile: how the DRAM tier's hits
//! and SSD reads priced (the `tiers` entry of `timing_detail`), and its line in the text.

use serde::{Deserialize, Serialize};

/// Per-tier time of the demand page-ins (definitions in docs/DESIGN.md, "Timed tiers").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierTiming {
    /// Demand page-ins served from DRAM (an H2D copy each).
    pub dram_hits: u64,
    /// Demand page-ins read from SSD (an NVMe read, then the copy).
    pub ssd_reads: u64,
    /// H2D copy time of the DRAM hits, ms per step.
    pub dram_copy_ms_per_step: f64,
    /// NVMe read time of the SSD reads, ms per step.
    pub ssd_read_ms_per_step: f64,
    /// H2D copy time after the SSD reads, ms per step.
    pub ssd_copy_ms_per_step: f64,
}

/// The run summary's tier line.
pub fn tier_summary(t: &TierTiming) -> String {
    format!(
        "  tiers       DRAM hits {} (copies {:.3} ms/step)   SSD reads {} (NVMe {:.3} ms/step, then copies {:.3} ms/step)\n",
        t.dram_hits, t.dram_copy_ms_per_step, t.ssd_reads, t.ssd_read_ms_per_step, t.ssd_copy_ms_per_step
    )
}
