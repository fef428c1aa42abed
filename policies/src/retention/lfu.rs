//! Least frequently used, with counts over the whole run.

use super::registry::PolicyEntry;
use super::{Admission, At, EvictionPolicy, Exhausted, Protect};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The registry entry of `lfu`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "lfu",
    aliases: &[],
    debug_name: "Lfu",
    summary: "Least frequently used; counts survive eviction; ties by least recent use",
    help_note: Some("counts over the whole run, ties by LRU"),
    needs_profile: false,
    offline: false,
    monotone_in_budget: true,
    in_all: true,
    build: |s| Ok(Box::new(Lfu::new(s.units))),
};

/// LFU: the victim is the resident unit with the fewest accesses so far, ties broken by least
/// recent use (docs/DESIGN.md, cache regime). Counts cover every access of the run and survive
/// eviction (unlike libCacheSim's LFU, which restarts a unit's count when it is inserted
/// again; see `policies/RETENTION.md`).
///
/// A min-heap of (count, last access position, unit) with lazy invalidation: a unit's key
/// only grows, so every access records a fresh entry and entries that no longer match the
/// unit's count and last access (or whose unit left) are dropped when they surface.
/// O(log n) per access, whatever the group size. As in [`super::Belady`], entries of recent
/// accesses wait in a side list (`pending`) until an eviction, so protected units (the current
/// group, often with low counts) are not popped and pushed back at every eviction: an
/// eviction moves into the heap only the pending entries it has not examined yet in this group
/// (the protected set only grows within a group), and a long run of hits compacts `pending`
/// to its valid entries instead of flushing protected ones into the heap.
#[derive(Clone, Debug)]
pub struct Lfu {
    count: Vec<u64>,
    last: Vec<u64>,
    resident: Vec<bool>,
    live: usize,
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    pending: Vec<(u64, u64, u32)>,
    /// `pending[..checked]` were protected when the group `checked_group` last evicted.
    checked: usize,
    checked_group: u32,
    skipped: Vec<Reverse<(u64, u64, u32)>>,
    /// Heap pops plus pending entries examined so far: the work a test bounds per access.
    work: u64,
    exhausted: Exhausted,
}

/// Pending entries beyond twice the resident units that trigger a compaction of `pending`.
const PENDING_SLACK: usize = 4096;

impl Lfu {
    /// An empty LFU over unit ids `0..units`, every count 0.
    pub fn new(units: usize) -> Self {
        Lfu {
            count: vec![0; units],
            last: vec![0; units],
            resident: vec![false; units],
            live: 0,
            heap: BinaryHeap::new(),
            pending: Vec::new(),
            checked: 0,
            checked_group: 0,
            skipped: Vec::new(),
            work: 0,
            exhausted: Exhausted::default(),
        }
    }

    #[inline]
    fn touch(&mut self, u: u32, at: At) {
        let i = u as usize;
        self.count[i] += 1;
        self.last[i] = at.pos;
        self.pending.push((self.count[i], at.pos, u));
        if self.pending.len() >= 2 * self.live + PENDING_SLACK {
            // at most one entry per resident unit is valid: drop the rest
            let (count, last, resident) = (&self.count, &self.last, &self.resident);
            self.work += self.pending.len() as u64;
            self.pending.retain(|&(c, l, v)| {
                resident[v as usize] && count[v as usize] == c && last[v as usize] == l
            });
            self.checked = 0;
        }
        if self.heap.len() > 2 * self.live + 64 {
            let (count, last, resident) = (&self.count, &self.last, &self.resident);
            self.heap.retain(|&Reverse((c, l, v))| {
                resident[v as usize] && count[v as usize] == c && last[v as usize] == l
            });
        }
    }
}

impl EvictionPolicy for Lfu {
    #[inline]
    fn on_hit(&mut self, u: u32, at: At) {
        self.touch(u, at);
    }

    #[inline]
    fn on_miss(&mut self, u: u32, at: At) -> Admission {
        self.exhausted.reset();
        self.resident[u as usize] = true;
        self.live += 1;
        self.touch(u, at);
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        if self.exhausted.covers(&protect) {
            return None;
        }
        self.flush_unprotected(&protect);
        let Lfu {
            count,
            last,
            resident,
            heap,
            skipped,
            work,
            ..
        } = self;
        let valid = |&(c, l, v): &(u64, u64, u32)| {
            resident[v as usize] && count[v as usize] == c && last[v as usize] == l
        };
        let mut victim = None;
        while let Some(Reverse(e)) = heap.pop() {
            *work += 1;
            if !valid(&e) {
                continue;
            }
            if protect.is(e.2) {
                skipped.push(Reverse(e));
                continue;
            }
            victim = Some(e.2);
            break;
        }
        heap.extend(skipped.drain(..));
        let Some(v) = victim else {
            self.exhausted.mark(&protect);
            return None;
        };
        resident[v as usize] = false;
        self.live -= 1;
        Some(v)
    }

    fn work(&self) -> u64 {
        self.work
    }
}

impl Lfu {
    /// Move the pending entries `protect` does not cover into the heap (dropping invalid
    /// ones). Within one group the protected set only grows, so entries examined at an earlier
    /// eviction of the same group (all protected then) stay protected and are not examined
    /// again.
    fn flush_unprotected(&mut self, protect: &Protect<'_>) {
        let Lfu {
            count,
            last,
            resident,
            heap,
            pending,
            checked,
            checked_group,
            work,
            ..
        } = self;
        let valid = |&(c, l, v): &(u64, u64, u32)| {
            resident[v as usize] && count[v as usize] == c && last[v as usize] == l
        };
        if protect.is_none() {
            *work += pending.len() as u64;
            heap.extend(pending.drain(..).filter(valid).map(Reverse));
            *checked = 0;
            return;
        }
        if protect.group() != *checked_group {
            *checked_group = protect.group();
            *checked = 0;
        }
        let mut i = *checked;
        while i < pending.len() {
            *work += 1;
            let e = pending[i];
            if protect.is(e.2) {
                i += 1;
            } else {
                if valid(&e) {
                    heap.push(Reverse(e));
                }
                pending.swap_remove(i);
            }
        }
        *checked = pending.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retention::NEVER;
    use rand::seq::index::sample;
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64;

    /// Drive `lfu` through `groups` groups of `size` distinct units out of `units` (seeded),
    /// with group semantics under `capacity`; the work per access.
    fn work_per_access(units: usize, size: usize, groups: u32, capacity: usize) -> f64 {
        let mut lfu = Lfu::new(units);
        let mut rng = Pcg64::seed_from_u64(5);
        let mut stamp = vec![0u32; units];
        let mut pos = 0u64;
        for g in 1..=groups {
            for u in sample(&mut rng, units, size).into_iter().map(|u| u as u32) {
                stamp[u as usize] = g;
                let at = At {
                    pos,
                    next_use: NEVER,
                };
                pos += 1;
                if lfu.resident[u as usize] {
                    lfu.on_hit(u, at);
                } else {
                    lfu.on_miss(u, at);
                }
            }
            while lfu.live > capacity {
                let v = lfu.evict(Protect::new(&stamp, g));
                assert!(v.is_some(), "a unit outside the group is resident");
            }
        }
        lfu.work() as f64 / pos as f64
    }

    /// Groups of thousands of units (an `os4k` page group of 8 granite experts is 6,144): the
    /// work per access stays a small constant (each access adds one pending entry, examined
    /// once, and at most a few heap pops), not the group size.
    #[test]
    fn work_per_access_does_not_grow_with_the_group() {
        let small = work_per_access(20_000, 64, 400, 6_000);
        let large = work_per_access(20_000, 6_144, 40, 6_200);
        assert!(small < 8.0, "{small} operations per access");
        assert!(large < 8.0, "{large} operations per access");
    }

    /// LFU by its definition, by scanning: the resident unit outside the protected group with
    /// the fewest accesses, ties by the earliest last access.
    struct Scan {
        count: Vec<u64>,
        last: Vec<u64>,
        resident: Vec<bool>,
    }

    impl Scan {
        fn victim(&self, protect: &Protect<'_>) -> Option<u32> {
            (0..self.count.len() as u32)
                .filter(|&u| self.resident[u as usize] && !protect.is(u))
                .min_by_key(|&u| (self.count[u as usize], self.last[u as usize]))
        }
    }

    /// Seeded streams of groups (skewed, so counts differ and repeat) under both semantics and
    /// every budget from 1 unit to all of them, driven as the cache driver drives a policy
    /// (group semantics: evict after the group, protecting it, and fall back to no
    /// protection): every victim is the scan's.
    #[test]
    fn victims_are_those_of_the_definition() {
        let units = 24usize;
        for seed in 0..6u64 {
            for capacity in 1..=units {
                for group_semantics in [true, false] {
                    let mut rng = Pcg64::seed_from_u64(seed);
                    let mut lfu = Lfu::new(units);
                    let mut scan = Scan {
                        count: vec![0; units],
                        last: vec![0; units],
                        resident: vec![false; units],
                    };
                    let (mut stamp, mut pos, mut live) = (vec![0u32; units], 0u64, 0usize);
                    for g in 1..=300u32 {
                        let size = rng.gen_range(1..=6);
                        let mut group: Vec<u32> = Vec::new();
                        while group.len() < size {
                            let u = (rng.gen_range(0.0f64..1.0).powi(3) * units as f64) as u32;
                            if !group.contains(&u) {
                                group.push(u);
                            }
                        }
                        for &u in &group {
                            stamp[u as usize] = g;
                            let at = At {
                                pos,
                                next_use: NEVER,
                            };
                            let i = u as usize;
                            scan.count[i] += 1;
                            scan.last[i] = pos;
                            pos += 1;
                            if scan.resident[i] {
                                lfu.on_hit(u, at);
                            } else {
                                scan.resident[i] = true;
                                live += 1;
                                lfu.on_miss(u, at);
                            }
                            while !group_semantics && live > capacity {
                                let want = scan.victim(&Protect::none());
                                assert_eq!(lfu.evict(Protect::none()), want);
                                scan.resident[want.unwrap() as usize] = false;
                                live -= 1;
                            }
                        }
                        while group_semantics && live > capacity {
                            let protect = Protect::new(&stamp, g);
                            let (got, want) = match scan.victim(&protect) {
                                Some(w) => (lfu.evict(protect), w),
                                None => {
                                    assert_eq!(lfu.evict(protect), None);
                                    let w = scan.victim(&Protect::none()).unwrap();
                                    (lfu.evict(Protect::none()), w)
                                }
                            };
                            assert_eq!(got, Some(want), "seed {seed}, capacity {capacity}");
                            scan.resident[want as usize] = false;
                            live -= 1;
                        }
                    }
                }
            }
        }
    }
}
