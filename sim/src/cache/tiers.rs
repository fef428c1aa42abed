//! The DRAM tier behind VRAM, with SSD behind it.

use policies::retention::list::DList;

/// The `tiers` block of a run report; defined beside the other report blocks.
pub use reports::run::TiersReport;

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

    /// Classify the page-in of unit `u` and take it out of DRAM; true when it is read from
    /// SSD (not a DRAM hit).
    #[inline]
    pub fn page_in(&mut self, u: u32) -> bool {
        let from_ssd = if self.lru.contains(u) {
            self.lru.remove(u);
            self.report.dram_hits += 1;
            false
        } else if !self.touched[u as usize] {
            self.report.ssd_compulsory += 1;
            true
        } else {
            self.report.ssd_capacity += 1;
            true
        };
        self.touched[u as usize] = true;
        from_ssd
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
