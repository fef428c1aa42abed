//! Least frequently used, with counts over the whole run.

use super::{Admission, At, EvictionPolicy, Protect};
use std::collections::BTreeSet;

/// LFU: the victim is the resident unit with the fewest accesses so far, ties broken by least
/// recent use (DESIGN.md, cache regime). Counts cover every access of the run and survive
/// eviction (unlike libCacheSim's LFU, which restarts a unit's count when it is inserted
/// again; see `policies/RETENTION.md`). Resident units sit in an ordered set keyed by
/// (count, last access position, unit): O(log n) per access.
#[derive(Clone, Debug)]
pub struct Lfu {
    count: Vec<u64>,
    last: Vec<u32>,
    /// Resident units ordered by (count, last access); the first is the victim.
    order: BTreeSet<(u64, u32, u32)>,
}

impl Lfu {
    /// An empty LFU over unit ids `0..units`, every count 0.
    pub fn new(units: usize) -> Self {
        Lfu {
            count: vec![0; units],
            last: vec![0; units],
            order: BTreeSet::new(),
        }
    }

    #[inline]
    fn touch(&mut self, u: u32, at: At) {
        let i = u as usize;
        self.count[i] += 1;
        self.last[i] = at.pos;
        self.order.insert((self.count[i], at.pos, u));
    }
}

impl EvictionPolicy for Lfu {
    #[inline]
    fn on_hit(&mut self, u: u32, at: At) {
        let i = u as usize;
        self.order.remove(&(self.count[i], self.last[i], u));
        self.touch(u, at);
    }

    #[inline]
    fn on_miss(&mut self, u: u32, at: At) -> Admission {
        self.touch(u, at);
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        let v = *self.order.iter().find(|&&(_, _, u)| !protect.is(u))?;
        self.order.remove(&v);
        Some(v.2)
    }
}
