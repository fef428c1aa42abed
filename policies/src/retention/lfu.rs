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
/// A min-heap of (count, last access position, unit) with one entry per resident unit, raised
/// lazily: a unit's key only grows, so a hit only counts it (O(1)), and an entry whose unit
/// was accessed since its push is re-pushed with the unit's key when it surfaces. Every entry
/// is then at most its unit's key, so the first up-to-date entry to surface is the smallest
/// key; a hit costs at most one re-push, made only if its entry reaches the top before the
/// unit leaves. As in [`super::Belady`], admitted units wait in a side list (`pending`) until
/// an eviction, so protected units (the current group, often with low counts) are not popped
/// and pushed back at every eviction: an eviction moves into the heap only the pending units
/// it has not examined yet in this group (the protected set only grows within a group).
#[derive(Clone, Debug)]
pub struct Lfu {
    count: Vec<u64>,
    last: Vec<u64>,
    resident: Vec<bool>,
    live: usize,
    /// The entries of the resident units not in `pending`, keys as of their push.
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    /// Admitted units with no entry yet.
    pending: Vec<u32>,
    /// `pending[..checked]` were protected when the group `checked_group` last evicted.
    checked: usize,
    checked_group: u32,
    /// Protected units popped by the current eviction, pushed back after it.
    skipped: Vec<u32>,
    /// Heap pops plus pending units examined so far: the work a test bounds per access.
    work: u64,
    exhausted: Exhausted,
}

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
        self.count[u as usize] += 1;
        self.last[u as usize] = at.pos;
    }
}

/// The heap entry of unit `u` with its current key.
#[inline]
fn entry(count: &[u64], last: &[u64], u: u32) -> Reverse<(u64, u64, u32)> {
    Reverse((count[u as usize], last[u as usize], u))
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
        self.pending.push(u);
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
            heap,
            skipped,
            work,
            ..
        } = self;
        let mut victim = None;
        while let Some(Reverse((c, l, v))) = heap.pop() {
            *work += 1;
            if (c, l) != (count[v as usize], last[v as usize]) {
                // accessed since its push: back with its key
                heap.push(entry(count, last, v));
            } else if protect.is(v) {
                skipped.push(v);
            } else {
                victim = Some(v);
                break;
            }
        }
        heap.extend(skipped.drain(..).map(|v| entry(count, last, v)));
        let Some(v) = victim else {
            self.exhausted.mark(&protect);
            return None;
        };
        self.resident[v as usize] = false;
        self.live -= 1;
        Some(v)
    }

    fn work(&self) -> u64 {
        self.work
    }
}

impl Lfu {
    /// Move the pending units `protect` does not cover into the heap. Within one group the
    /// protected set only grows, so units examined at an earlier eviction of the same group
    /// (all protected then) stay protected and are not examined again.
    fn flush_unprotected(&mut self, protect: &Protect<'_>) {
        let Lfu {
            count,
            last,
            heap,
            pending,
            checked,
            checked_group,
            work,
            ..
        } = self;
        if protect.is_none() {
            *work += pending.len() as u64;
            heap.extend(pending.drain(..).map(|v| entry(count, last, v)));
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
            let v = pending[i];
            if protect.is(v) {
                i += 1;
            } else {
                heap.push(entry(count, last, v));
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
