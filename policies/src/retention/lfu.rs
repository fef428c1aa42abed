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
/// Two structures, split by count:
/// - Counts below [`DENSE_COUNTS`]: one list per count of its resident units in order of last
///   access (an access appends its unit to the next count's list, whose last access is then
///   the latest), and a two-level bitset of the counts with a list. The victim is the head of
///   the lowest list whose head is unprotected: a unit accessed in the current group was
///   appended after every unit of its list not accessed in it, so a protected head means a
///   protected list. Within one group the lists found protected stay so (units join lists
///   only when accessed, protected from then on), and a later search of the group starts
///   above them. O(1) per access and per eviction.
/// - Higher counts: a min-heap of (count, last access, unit) with one entry per resident
///   unit, raised lazily: a hit only counts its unit, and an entry whose unit was accessed
///   since its push is pushed again with the unit's key when it surfaces, so every entry is
///   at most its unit's key and the first up-to-date entry to surface is the smallest. As in
///   [`super::Belady`], units that reach the heap wait in a side list (`pending`) until an
///   eviction, so protected units are not popped and pushed back at every eviction.
///
/// Every count of the lists is below every count of the heap, so the heap is searched only
/// when no list has an unprotected unit.
#[derive(Clone, Debug)]
pub struct Lfu {
    count: Vec<u64>,
    last: Vec<u64>,
    resident: Vec<bool>,
    live: usize,
    /// Counts below this are in the lists ([`DENSE_COUNTS`]; smaller in tests).
    dense: u64,
    lists: CountLists,
    /// Within group `resume.0`, the lists of counts below `resume.1` are empty or protected.
    resume: (u32, u64),
    /// The entries of the resident units with counts of at least `dense` not in `pending`,
    /// keys as of their push.
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    /// Units that reached the heap's counts and have no entry yet.
    pending: Vec<u32>,
    /// `pending[..checked]` were protected when the group `checked_group` last evicted.
    checked: usize,
    checked_group: u32,
    /// Protected units popped by the current eviction, pushed back after it.
    skipped: Vec<u32>,
    /// Lists and heap entries examined plus pending units examined so far: the work a test
    /// bounds per access.
    work: u64,
    exhausted: Exhausted,
}

/// Counts kept in lists rather than the heap: 4,096, the span of a two-level bitset of 64-bit
/// words (64 words and one summary word), so the lowest list at or above a count is two
/// `trailing_zeros` away. A unit past it has been accessed 4,096 times, which makes it an
/// unlikely victim: the heap's lazy keys then cost it nothing per hit.
pub const DENSE_COUNTS: u64 = 4096;

/// Per count below [`DENSE_COUNTS`], the resident units with that count in order of last
/// access, as links between units, and which counts have units.
#[derive(Clone, Debug)]
struct CountLists {
    /// `ends[c]`: the (oldest, newest) unit of count c's list; meaningful while `c` is set in
    /// `words`.
    ends: Vec<(u32, u32)>,
    /// Each unit's (older, newer) neighbours in its list ([`NIL`] at the ends).
    links: Vec<(u32, u32)>,
    /// Bit c % 64 of word c / 64: count c has a list.
    words: [u64; 64],
    /// Bit w: word w is not zero.
    summary: u64,
}

/// No neighbour.
const NIL: u32 = u32::MAX;

impl CountLists {
    fn new(units: usize) -> Self {
        CountLists {
            ends: vec![(NIL, NIL); DENSE_COUNTS as usize],
            links: vec![(NIL, NIL); units],
            words: [0; 64],
            summary: 0,
        }
    }

    /// Append `u` to count `c`'s list.
    #[inline]
    fn push(&mut self, u: u32, c: u64) {
        let (w, b) = ((c / 64) as usize, c % 64);
        if self.words[w] >> b & 1 == 0 {
            self.words[w] |= 1 << b;
            self.summary |= 1 << w;
            self.ends[c as usize] = (u, u);
            self.links[u as usize] = (NIL, NIL);
            return;
        }
        let newest = self.ends[c as usize].1;
        self.links[newest as usize].1 = u;
        self.links[u as usize] = (newest, NIL);
        self.ends[c as usize].1 = u;
    }

    /// Take `u` out of count `c`'s list.
    #[inline]
    fn remove(&mut self, u: u32, c: u64) {
        let (older, newer) = self.links[u as usize];
        let ends = &mut self.ends[c as usize];
        match older {
            NIL => ends.0 = newer,
            o => self.links[o as usize].1 = newer,
        }
        match newer {
            NIL => ends.1 = older,
            n => self.links[n as usize].0 = older,
        }
        if ends.0 == NIL {
            let (w, b) = ((c / 64) as usize, c % 64);
            self.words[w] &= !(1 << b);
            if self.words[w] == 0 {
                self.summary &= !(1 << w);
            }
        }
    }

    /// The lowest count at or above `c` with a list.
    #[inline]
    fn lowest_from(&self, c: u64) -> Option<u64> {
        if c >= DENSE_COUNTS {
            return None;
        }
        let (w, b) = ((c / 64) as usize, c % 64);
        let here = self.words[w] & (u64::MAX << b);
        if here != 0 {
            return Some(w as u64 * 64 + here.trailing_zeros() as u64);
        }
        let above = self.summary & u64::MAX.checked_shl(w as u32 + 1).unwrap_or(0);
        (above != 0).then(|| {
            let w = above.trailing_zeros() as usize;
            w as u64 * 64 + self.words[w].trailing_zeros() as u64
        })
    }

    /// The oldest unit of count `c`'s list (which has one).
    #[inline]
    fn oldest(&self, c: u64) -> u32 {
        self.ends[c as usize].0
    }
}

impl Lfu {
    /// An empty LFU over unit ids `0..units`, every count 0.
    pub fn new(units: usize) -> Self {
        Self::with_dense(units, DENSE_COUNTS)
    }

    /// [`Lfu::new`] with the lists holding counts below `dense` (at most [`DENSE_COUNTS`]).
    fn with_dense(units: usize, dense: u64) -> Self {
        Lfu {
            count: vec![0; units],
            last: vec![0; units],
            resident: vec![false; units],
            live: 0,
            dense: dense.min(DENSE_COUNTS),
            lists: CountLists::new(units),
            resume: (0, 0),
            heap: BinaryHeap::new(),
            pending: Vec::new(),
            checked: 0,
            checked_group: 0,
            skipped: Vec::new(),
            work: 0,
            exhausted: Exhausted::default(),
        }
    }

    /// Count an access at `at` of the resident unit `u` (its count before it is `before`, or
    /// `None` for a unit just admitted), moving it to the list of its new count or, past the
    /// lists, to `pending`.
    #[inline]
    fn touch(&mut self, u: u32, at: At, before: Option<u64>) {
        let i = u as usize;
        let c = self.count[i] + 1;
        self.count[i] = c;
        self.last[i] = at.pos;
        if let Some(b) = before.filter(|&b| b < self.dense) {
            self.lists.remove(u, b);
        }
        if c < self.dense {
            self.lists.push(u, c);
        } else if before.is_none_or(|b| b < self.dense) {
            self.pending.push(u);
        }
    }

    /// The oldest unit of the lowest list whose oldest unit `protect` allows, taken out of
    /// its list.
    fn evict_listed(&mut self, protect: &Protect<'_>) -> Option<u32> {
        let group = protect.group();
        let mut from = if group != 0 && self.resume.0 == group {
            self.resume.1
        } else {
            0
        };
        let mut found = None;
        while let Some(c) = self.lists.lowest_from(from) {
            self.work += 1;
            let u = self.lists.oldest(c);
            if !protect.is(u) {
                found = Some((u, c));
                break;
            }
            from = c + 1;
        }
        let (u, c) = match found {
            Some(f) => f,
            None => {
                self.resume = (group, self.dense);
                return None;
            }
        };
        self.resume = (group, c);
        self.lists.remove(u, c);
        Some(u)
    }

    /// The unit of the smallest up-to-date heap entry that `protect` allows, its entry taken.
    fn evict_heaped(&mut self, protect: &Protect<'_>) -> Option<u32> {
        self.flush_unprotected(protect);
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
        victim
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
        let before = self.count[u as usize];
        self.touch(u, at, Some(before));
    }

    #[inline]
    fn on_miss(&mut self, u: u32, at: At) -> Admission {
        self.exhausted.reset();
        self.resident[u as usize] = true;
        self.live += 1;
        self.touch(u, at, None);
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        if self.exhausted.covers(&protect) {
            return None;
        }
        let victim = self
            .evict_listed(&protect)
            .or_else(|| self.evict_heaped(&protect));
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
    fn work_per_access(units: usize, size: usize, groups: u32, capacity: usize, dense: u64) -> f64 {
        let mut lfu = Lfu::with_dense(units, dense);
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
        // the lists, the heap, and units moving from the lists to the heap
        for dense in [DENSE_COUNTS, 0, 3] {
            let small = work_per_access(20_000, 64, 400, 6_000, dense);
            let large = work_per_access(20_000, 6_144, 40, 6_200, dense);
            assert!(small < 8.0, "{small} operations per access, dense {dense}");
            assert!(large < 8.0, "{large} operations per access, dense {dense}");
        }
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
    /// protection): every victim is the scan's, with every count in the lists, every count in
    /// the heap, and units moving from one to the other.
    #[test]
    fn victims_are_those_of_the_definition() {
        let units = 24usize;
        for (seed, dense) in (0..6u64).flat_map(|s| [DENSE_COUNTS, 0, 5, 40].map(|d| (s, d))) {
            for capacity in 1..=units {
                for group_semantics in [true, false] {
                    let mut rng = Pcg64::seed_from_u64(seed);
                    let mut lfu = Lfu::with_dense(units, dense);
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
                            assert_eq!(
                                got,
                                Some(want),
                                "seed {seed}, capacity {capacity}, dense {dense}"
                            );
                            scan.resident[want as usize] = false;
                            live -= 1;
                        }
                    }
                }
            }
        }
    }
}
