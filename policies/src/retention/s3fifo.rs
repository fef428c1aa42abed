//! S3-FIFO.

use super::list::DList;
use super::registry::PolicyEntry;
use super::{Admission, At, EvictionPolicy, Exhausted, Protect};

/// The registry entry of `s3fifo`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "s3fifo",
    aliases: &[],
    debug_name: "S3Fifo",
    summary: "S3-FIFO (Yang et al., SOSP 2023)",
    help_note: None,
    needs_profile: false,
    offline: false,
    monotone_in_budget: false,
    in_all: true,
    build: |s| Ok(Box::new(S3Fifo::new(s.units, s.capacity))),
};

/// Share of the budget given to the small FIFO queue (the paper's default, 10%).
/// Source: Yang et al., "FIFO queues are all you need for cache eviction", SOSP 2023, §4.
const SMALL_SHARE_PERCENT: usize = 10;
/// Saturation of the per-unit access counter (2 bits in the paper).
const FREQ_MAX: u8 = 3;

/// S3-FIFO (Yang et al., SOSP 2023): a small FIFO S (10% of the budget, at least one unit)
/// filters one-hit units, a main FIFO M holds the rest with lazy promotion (a unit at M's
/// tail with a non-zero counter is reinserted with the counter decremented), and a ghost
/// FIFO G of ids (as many as the budget) sends units evicted from S straight to M on their
/// next page-in. At S's tail a unit accessed since its insertion moves to M (counter reset);
/// otherwise it is evicted into G. Protected units are skipped in place.
#[derive(Clone, Debug)]
pub struct S3Fifo {
    small_target: usize,
    ghost_cap: usize,
    freq: Vec<u8>,
    small: DList,
    main: DList,
    ghost: DList,
    /// Loop steps of `evict` (promotions and counter decrements included).
    steps: u64,
    exhausted: Exhausted,
}

impl S3Fifo {
    /// An empty S3-FIFO of `capacity` units over unit ids `0..units`.
    pub fn new(units: usize, capacity: usize) -> Self {
        S3Fifo {
            small_target: (capacity * SMALL_SHARE_PERCENT / 100).max(1),
            ghost_cap: capacity,
            freq: vec![0; units],
            small: DList::new(units),
            main: DList::new(units),
            ghost: DList::new(units),
            steps: 0,
            exhausted: Exhausted::default(),
        }
    }

    /// One step of S's eviction: Some(Some(v)) evicted v, Some(None) promoted a unit to M,
    /// None when S has no unprotected unit.
    fn step_small(&mut self, protect: &Protect<'_>) -> Option<Option<u32>> {
        let t = self.small.oldest_unprotected(protect)?;
        self.small.remove(t);
        if self.freq[t as usize] > 0 {
            self.freq[t as usize] = 0;
            self.main.push_head(t);
            Some(None)
        } else {
            self.ghost.push_head(t);
            if self.ghost.len() > self.ghost_cap {
                let g = self.ghost.tail().expect("ghost is not empty");
                self.ghost.remove(g);
            }
            Some(Some(t))
        }
    }

    /// One step of M's eviction, same convention as [`Self::step_small`].
    fn step_main(&mut self, protect: &Protect<'_>) -> Option<Option<u32>> {
        let t = self.main.oldest_unprotected(protect)?;
        self.main.remove(t);
        if self.freq[t as usize] > 0 {
            self.freq[t as usize] -= 1;
            self.main.push_head(t);
            Some(None)
        } else {
            Some(Some(t))
        }
    }
}

impl EvictionPolicy for S3Fifo {
    #[inline]
    fn on_hit(&mut self, u: u32, _at: At) {
        let f = &mut self.freq[u as usize];
        *f = (*f + 1).min(FREQ_MAX);
    }

    fn on_miss(&mut self, u: u32, _at: At) -> Admission {
        self.exhausted.reset();
        self.freq[u as usize] = 0;
        if self.ghost.contains(u) {
            self.ghost.remove(u);
            self.main.push_head(u);
        } else {
            self.small.push_head(u);
        }
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        if self.exhausted.covers(&protect) {
            return None;
        }
        let v = self.evict_step_by_step(&protect);
        if v.is_none() {
            self.exhausted.mark(&protect);
        }
        v
    }

    fn work(&self) -> u64 {
        self.steps + self.small.walked() + self.main.walked()
    }
}

impl S3Fifo {
    fn evict_step_by_step(&mut self, protect: &Protect<'_>) -> Option<u32> {
        // Each step either evicts, promotes S -> M (at most |S| times) or decrements a
        // counter in M (at most FREQ_MAX per unit), so the loop ends.
        loop {
            let prefer_small = self.small.len() >= self.small_target || self.main.is_empty();
            self.steps += 1;
            let step = if prefer_small {
                self.step_small(protect).or_else(|| self.step_main(protect))
            } else {
                self.step_main(protect).or_else(|| self.step_small(protect))
            };
            match step? {
                Some(v) => return Some(v),
                None => continue,
            }
        }
    }
}
