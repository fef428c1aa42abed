//! The DRAM and SSD tiers of a replay (`--dram`): a page-in the plan marks as a DRAM hit is
//! copied as any page-in (commit, then the H2D copy at the profile's `h2d_bandwidth`); one
//! read from SSD first reads its useful bytes from the NVMe drive at
//! `host_ssd_read_bandwidth` (queue depth 1: one read at a time, on its own resource), and its
//! copy starts when the read ends. Demand page-ins of VMM units only: prefetches, the CPU
//! lane's page-ins and OS paging are priced as DRAM hits. In page-cache mode
//! (`--dram-mode page-cache`) the same, with every VMM copy at `h2d_pageable_bandwidth`
//! (`CostModel::with_page_cache`, applied by the replay to the whole plan).

use super::{EngineError, State};
use crate::engine::plan::Plans;
use crate::engine::timeline::Resource;
use serde::Serialize;

/// The tiers' totals over a replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TierCounts {
    /// Demand page-ins served from DRAM, and read from SSD.
    pub dram_hits: u64,
    pub ssd_reads: u64,
    /// µs of H2D copies of DRAM hits; of SSD reads; of the copies after SSD reads.
    pub dram_copy_us: f64,
    pub ssd_read_us: f64,
    pub ssd_copy_us: f64,
}

impl State<'_> {
    /// Mark (`on`) or clear the units group `gi` reads from SSD; `cursor` walks
    /// `plans.ssd_reads` (group order) and moves past the group when clearing.
    pub(super) fn mark_ssd(&mut self, plans: &Plans, gi: usize, cursor: &mut usize, on: bool) {
        let mut i = *cursor;
        while let Some(&(g, u)) = plans.ssd_reads.get(i) {
            if g as usize != gi {
                break;
            }
            self.from_ssd[u as usize] = on;
            i += 1;
        }
        if !on {
            *cursor = i;
        }
    }

    /// Demand page-in of VMM unit `u` from `router` in a tiered plan: from SSD (the read,
    /// then commit and copy) or a DRAM hit; returns when resident.
    pub(super) fn tiered_page_in(&mut self, u: u32, router: f64) -> Result<f64, EngineError> {
        let before = self.busy_copy;
        if !self.from_ssd[u as usize] {
            let t = self.vmm_page_in(u, router, "h2d")?;
            self.tiers.dram_hits += 1;
            self.tiers.dram_copy_us += self.busy_copy - before;
            return Ok(t);
        }
        let bw = self
            .cost
            .ssd_bytes_per_us
            .ok_or_else(|| profile::ProfileError::Missing {
                profile: self.cost.profile.clone(),
                constant: "host_ssd_read_bandwidth",
                needed_for: "the DRAM tier's reads from SSD (--dram): add --hw-host with a host profile measured with `sim calibrate --only host --ssd-path DIR`".into(),
            })?;
        let d = self.units.units[u as usize].useful_bytes as f64 / bw;
        let start = self.ssd_free.max(router);
        self.ssd_free = start + d;
        self.span(Resource::Ssd, "ssd read", start, d);
        let t = self.vmm_page_in_after(u, router, "h2d", self.ssd_free)?;
        self.tiers.ssd_reads += 1;
        self.tiers.ssd_read_us += d;
        self.tiers.ssd_copy_us += self.busy_copy - before;
        Ok(t)
    }
}
