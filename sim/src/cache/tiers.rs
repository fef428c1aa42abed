//! The DRAM tier behind VRAM, with SSD behind it.

use policies::retention::list::DList;
use serde::{Deserialize, Serialize};

/// The `tiers` block of a run report (exact JSON keys; totals over the run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TiersReport {
    /// Page-ins served from DRAM (a PCIe copy).
    pub dram_hits: u64,
    /// Page-ins of units never touched before (first read from SSD).
    pub ssd_compulsory: u64,
    /// Page-ins from SSD of units touched before but in neither VRAM nor DRAM.
    pub ssd_capacity: u64,
}

/// An exclusive LRU DRAM cache: a unit leaving VRAM (evicted, or streamed through) enters
/// DRAM at the MRU end and DRAM drops its LRU unit when over capacity; a page-in found in
/// DRAM leaves DRAM (exclusive). SSD holds everything.
#[derive(Clone, Debug)]
pub struct DramTier {
    lru: DList,
    capacity: usize,
    touched: Vec<bool>,
    /// Totals so far.
    pub report: TiersReport,
}

impl DramTier {
    /// An empty DRAM tier of `capacity` units over unit ids `0..units`.
    pub fn new(units: usize, capacity: usize) -> Self {
        DramTier {
            lru: DList::new(units),
            capacity,
            touched: vec![false; units],
            report: TiersReport::default(),
        }
    }

    /// Units resident in VRAM before the run (pins) count as touched: never compulsory.
    pub fn preload(&mut self, u: u32) {
        self.touched[u as usize] = true;
    }

    /// Classify the page-in of unit `u` and take it out of DRAM.
    #[inline]
    pub fn page_in(&mut self, u: u32) {
        if self.lru.contains(u) {
            self.lru.remove(u);
            self.report.dram_hits += 1;
        } else if !self.touched[u as usize] {
            self.report.ssd_compulsory += 1;
        } else {
            self.report.ssd_capacity += 1;
        }
        self.touched[u as usize] = true;
    }

    /// Unit `u` left VRAM: keep it in DRAM.
    #[inline]
    pub fn demote(&mut self, u: u32) {
        self.lru.push_head(u);
        if self.lru.len() > self.capacity {
            let old = self.lru.tail().expect("DRAM is not empty");
            self.lru.remove(old);
        }
    }
}
