//! Adaptive Replacement Cache.

use super::list::DList;
use super::registry::PolicyEntry;
use super::{Admission, At, EvictionPolicy, Exhausted, Protect};

/// The registry entry of `arc`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "arc",
    aliases: &[],
    debug_name: "Arc",
    summary: "Adaptive Replacement Cache (Megiddo & Modha, FAST 2003)",
    help_note: None,
    needs_profile: false,
    offline: false,
    monotone_in_budget: false,
    in_all: true,
    build: |s| Ok(Box::new(Arc::new(s.units, s.capacity))),
};

/// ARC (Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST 2003).
/// Resident units are split between T1 (seen once recently) and T2 (seen at least twice);
/// ghost lists B1 and B2 remember recently evicted ids of each, and a hit in a ghost list
/// moves the target size `p` of T1 towards the list that would have kept it.
///
/// Adaptation to the caller's protocol (admit first, then evict while over budget): the
/// ghost-hit adaptation of `p` happens on the page-in, and REPLACE runs at eviction time with
/// the paper's rule (evict T1's LRU when |T1| > p, or |T1| == p after a B2 hit). Ghost lists
/// are trimmed to |T1| + |B1| <= c and |T1| + |T2| + |B1| + |B2| <= 2c after every eviction.
/// Protected units are skipped; if the chosen list has none left, the other list is used.
#[derive(Clone, Debug)]
pub struct Arc {
    c: usize,
    p: usize,
    t1: DList,
    t2: DList,
    b1: DList,
    b2: DList,
    last_miss_in_b2: bool,
    exhausted: Exhausted,
}

impl Arc {
    /// An empty ARC of `capacity` units over unit ids `0..units`.
    pub fn new(units: usize, capacity: usize) -> Self {
        Arc {
            c: capacity,
            p: 0,
            t1: DList::new(units),
            t2: DList::new(units),
            b1: DList::new(units),
            b2: DList::new(units),
            last_miss_in_b2: false,
            exhausted: Exhausted::default(),
        }
    }

    fn trim_ghosts(&mut self) {
        while self.t1.len() + self.b1.len() > self.c {
            match self.b1.tail() {
                Some(g) => self.b1.remove(g),
                None => break,
            }
        }
        while self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len() > 2 * self.c {
            if let Some(g) = self.b2.tail() {
                self.b2.remove(g);
            } else if let Some(g) = self.b1.tail() {
                self.b1.remove(g);
            } else {
                break;
            }
        }
    }
}

impl EvictionPolicy for Arc {
    #[inline]
    fn on_hit(&mut self, u: u32, _at: At) {
        if self.t1.contains(u) {
            self.t1.remove(u);
            self.t2.push_head(u);
        } else {
            self.t2.move_to_head(u);
        }
    }

    fn on_miss(&mut self, u: u32, _at: At) -> Admission {
        self.exhausted.reset();
        self.last_miss_in_b2 = false;
        if self.b1.contains(u) {
            let delta = (self.b2.len() / self.b1.len()).max(1);
            self.p = (self.p + delta).min(self.c);
            self.b1.remove(u);
            self.t2.push_head(u);
        } else if self.b2.contains(u) {
            let delta = (self.b1.len() / self.b2.len()).max(1);
            self.p = self.p.saturating_sub(delta);
            self.b2.remove(u);
            self.t2.push_head(u);
            self.last_miss_in_b2 = true;
        } else {
            self.t1.push_head(u);
        }
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        if self.exhausted.covers(&protect) {
            return None;
        }
        let v = self.replace(&protect);
        if v.is_none() {
            self.exhausted.mark(&protect);
        }
        v
    }

    fn work(&self) -> u64 {
        self.t1.walked() + self.t2.walked()
    }
}

impl Arc {
    /// The paper's REPLACE among the units `protect` allows: T1's or T2's oldest, moved to its
    /// ghost list.
    fn replace(&mut self, protect: &Protect<'_>) -> Option<u32> {
        let t1_first = !self.t1.is_empty()
            && (self.t1.len() > self.p || (self.last_miss_in_b2 && self.t1.len() == self.p));
        let from_t1 = |s: &Self| s.t1.oldest_unprotected(protect);
        let from_t2 = |s: &Self| s.t2.oldest_unprotected(protect);
        let (v, in_t1) = if t1_first {
            match from_t1(self) {
                Some(v) => (v, true),
                None => (from_t2(self)?, false),
            }
        } else {
            match from_t2(self) {
                Some(v) => (v, false),
                None => (from_t1(self)?, true),
            }
        };
        if in_t1 {
            self.t1.remove(v);
            self.b1.push_head(v);
        } else {
            self.t2.remove(v);
            self.b2.push_head(v);
        }
        self.trim_ghosts();
        Some(v)
    }
}
