//! The DRAM tier behind VRAM, with SSD behind it.

use policies::retention::list::DList;

/// The `tiers` block of a run report and the tier's mode; defined beside the other report
/// blocks.
pub use reports::run::{DramMode, TiersReport};

/// The DRAM tier of `--dram`: its size (as given, over the VRAM budget's bank) and how it
/// holds experts (`--dram-mode`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DramConfig {
    pub budget: super::Budget,
    pub mode: DramMode,
}

impl DramConfig {
    /// A tier of `budget` in the default (pinned) mode.
    pub fn pinned(budget: super::Budget) -> Self {
        DramConfig {
            budget,
            mode: DramMode::Pinned,
        }
    }
}

/// An LRU DRAM cache in front of SSD, which holds everything.
///
/// `pinned` (exclusive): a unit leaving VRAM (evicted, or streamed through) enters DRAM at
/// the MRU end and DRAM drops its LRU unit when over capacity; a page-in found in DRAM
/// leaves DRAM.
///
/// `page-cache` (inclusive): the OS page cache of the `mmap`ed expert file. Every page-in
/// reads the unit through it: a hit moves the unit to the MRU end, a miss reads it from SSD
/// and inserts it there (dropping the LRU unit when over capacity); a unit leaving VRAM
/// changes nothing, since its file pages stay cached or not as the kernel decides. One LRU
/// list approximates the kernel's active/inactive lists (which promote a page on its second
/// access); the cache starts empty.
#[derive(Clone, Debug)]
pub struct DramTier {
    mode: DramMode,
    lru: DList,
    capacity: usize,
    touched: Vec<bool>,
    /// Totals so far.
    pub report: TiersReport,
}

impl DramTier {
    /// An empty DRAM tier of `capacity` units over unit ids `0..units`, in `mode`.
    pub fn new(units: usize, capacity: usize, mode: DramMode) -> Self {
        DramTier {
            mode,
            lru: DList::new(units),
            capacity,
            touched: vec![false; units],
            report: TiersReport {
                mode,
                ..TiersReport::default()
            },
        }
    }

    /// Units resident in VRAM before the run (pins) count as touched: never compulsory.
    pub fn preload(&mut self, u: u32) {
        self.touched[u as usize] = true;
    }

    /// Classify the page-in of unit `u`: true when it is read from SSD (not a DRAM hit).
    /// Pinned: the unit leaves DRAM; page cache: it is (now) the MRU unit of the cache.
    #[inline]
    pub fn page_in(&mut self, u: u32) -> bool {
        let from_ssd = self.classify(u);
        self.touched[u as usize] = true;
        if self.mode == DramMode::PageCache {
            self.insert(u);
        }
        from_ssd
    }

    /// Count the page-in of `u` as a DRAM hit (taking it out of the list) or an SSD read.
    #[inline]
    fn classify(&mut self, u: u32) -> bool {
        if self.lru.contains(u) {
            self.lru.remove(u);
            self.report.dram_hits += 1;
            false
        } else if !self.touched[u as usize] {
            self.report.ssd_compulsory += 1;
            true
        } else {
            self.report.ssd_capacity += 1;
            true
        }
    }

    /// Unit `u` left VRAM: pinned keeps it in DRAM; the page cache is not changed by it.
    #[inline]
    pub fn demote(&mut self, u: u32) {
        if self.mode == DramMode::Pinned {
            self.insert(u);
        }
    }

    /// Put `u` (not in the list) at the MRU end, dropping the LRU unit when over capacity.
    #[inline]
    fn insert(&mut self, u: u32) {
        self.lru.push_head(u);
        if self.lru.len() > self.capacity {
            let old = self.lru.tail().expect("DRAM is not empty");
            self.lru.remove(old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Page-ins 0, 1; unit 0 leaves VRAM; page-ins 0, 2, 1, 2 with room for 2 units: the
    /// classification of each, by hand, for both modes.
    fn walk(mode: DramMode) -> (Vec<bool>, TiersReport) {
        let mut t = DramTier::new(3, 2, mode);
        let mut reads = vec![t.page_in(0), t.page_in(1)];
        t.demote(0);
        reads.extend([t.page_in(0), t.page_in(2), t.page_in(1), t.page_in(2)]);
        (reads, t.report)
    }

    #[test]
    fn pinned_is_exclusive_and_fed_by_demotions() {
        // DRAM holds only demoted units: 0 is a hit (and leaves), 2 and 1 never entered
        let (reads, r) = walk(DramMode::Pinned);
        assert_eq!(reads, [true, true, false, true, true, true]);
        assert_eq!((r.dram_hits, r.ssd_compulsory, r.ssd_capacity), (1, 3, 2));
        assert_eq!(r.mode, DramMode::Pinned);
    }

    #[test]
    fn the_page_cache_is_inclusive_lru_of_reads() {
        // [1, 0] (MRU first); 0 hit -> [0, 1]; 2 read -> [2, 0], 1 dropped; 1 read again
        // -> [1, 2], 0 dropped; 2 hit
        let (reads, r) = walk(DramMode::PageCache);
        assert_eq!(reads, [true, true, false, true, true, false]);
        assert_eq!((r.dram_hits, r.ssd_compulsory, r.ssd_capacity), (2, 3, 1));
        assert_eq!(r.mode, DramMode::PageCache);
    }
}
