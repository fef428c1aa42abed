//! Belady's MIN: the offline optimum.

use super::registry::PolicyEntry;
use super::timeline::Timeline;
use super::{Admission, At, EvictionPolicy, Protect, NEVER};

/// The registry entry of `belady`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "belady",
    aliases: &["min"],
    debug_name: "Belady",
    summary: "Offline MIN: evict the unit whose next use is farthest",
    help_note: Some("offline MIN, the bound"),
    needs_profile: false,
    offline: true,
    monotone_in_budget: true,
    in_all: true,
    build: |s| Ok(Box::new(Belady::new(s.units))),
};

/// MIN (Belady 1966): the victim is the resident unit whose next use is farthest in the
/// future; units never used again go first. Next uses are precomputed by the caller and
/// passed in [`At::next_use`] as access positions; since a unit appears at most once per group,
/// ordering by next access position is ordering by next use counted in groups, with ties
/// inside one future group broken by the later position in that group (which cannot change
/// page-in counts under group semantics: both tied units are needed by the same group).
/// Among units never used again, the highest unit id goes first.
///
/// Structure: keys `next_use << 30 | unit` (one integer compare orders them, ties included;
/// [`NEVER`] packs as the largest next use, so never-used-again units surface first).
/// The key of an access first waits in a side list; at the next eviction the keys of
/// unprotected units are placed, and those of the current group keep waiting: they are the
/// freshest keys, often the farthest, and would otherwise be stepped over at every eviction.
/// A placed key less than [`Belady::window`] positions ahead of the latest access goes on a
/// `Timeline`, a ring of upcoming positions with a two-level bitset: every position belongs
/// to one unit, so these keys never collide, and the farthest is the highest occupied slot
/// (O(1) insert, remove and maximum). Farther keys, and units never used again, go to an
/// indexed 4-ary max-heap with each unit's slot recorded, so an access removes the unit's old
/// key in place: that key is the unit's next use, which is now, the smallest key of the heap,
/// always a leaf, removed with one swap and a short sift-up. The victim is the larger of the
/// heap's top and the timeline's farthest key. O(1) per access and per eviction on the
/// timeline, O(log n) for keys that reach the heap.
#[derive(Clone, Debug)]
pub struct Belady {
    /// Where each unit's key is: `FREE` (not resident), a heap slot, `IN_PENDING | index`,
    /// or `ON_TIMELINE | ring slot`.
    loc: Vec<u32>,
    /// Near keys: those less than `timeline.len()` positions ahead of their access.
    timeline: Timeline,
    /// Position of the latest access (all resident keys are above it).
    now: u64,
    /// The 4-ary max-heap of keys; the children of slot i are 4i+1 ..= 4i+4.
    heap: Vec<u64>,
    /// Keys not yet placed (units accessed since the last eviction, and the current group's
    /// protected units). The first `held` of them were found protected under the group
    /// `held_group` by the last eviction and need no second look while that group lasts.
    pending: Vec<u64>,
    held: usize,
    held_group: u32,
    /// A group under which an eviction found every resident unit protected; while that group
    /// lasts and nothing is admitted, so will every later one (protection only grows within a
    /// group), and they answer at once instead of stepping over every protected key.
    exhausted_group: u32,
    /// Protected keys stepped over so far (heap tops sent back to waiting, timeline slots
    /// passed): the work a test bounds per access.
    steps: u64,
}

/// `loc` of a unit that is not resident.
const FREE: u32 = u32::MAX;
/// Tag bit of `loc` for a key in `pending` (heap slots and pending indices stay below the
/// tag bits: both are bounded by the unit count).
const IN_PENDING: u32 = 1 << 31;
/// Tag bit of `loc` for a key on the timeline (the ring slot is below it).
const ON_TIMELINE: u32 = 1 << 30;
/// Largest timeline: 2^16 positions (a 256 KiB ring of unit ids and an 8 KiB bitset, within a
/// core's L2 cache). In a 2 M-access sample drawn like the retention throughput benchmark's
/// stream (4,096 units, groups of 8, cubic skew) 99.8% of next uses fall within 2^16
/// positions, 95% within 2^14; any size gives the same victims.
const MAX_WINDOW: usize = 1 << 16;
/// Smallest timeline (the bitset's summary level needs whole words).
const MIN_WINDOW: usize = 1 << 12;
/// Timeline positions per unit of the pool: reuse distances grow with the unit count.
const WINDOW_PER_UNIT: usize = 16;
/// Heap arity: four children per slot halves the depth of a binary heap, and the four
/// children of a slot share one 32-byte span of the array.
const D: usize = 4;

/// Bits of a key below its next use: the unit id (units are below 2^30, as `loc`'s tag bits
/// require).
const UNIT_BITS: u32 = 30;
/// A key's next-use field for [`NEVER`]: the largest value of its 34 bits, above every real
/// position.
const KEY_NEVER: u64 = (1 << (64 - UNIT_BITS)) - 1;
/// The last access position a stream may reach: 2^34 - 2^18 - 2 (17.2 G accesses, 37 M
/// DeepSeek-V3 tokens at 464 accesses a token), so that [`KEY_NEVER`] stays more than the
/// largest timeline (2^18 positions) ahead of every access and never lands on the timeline.
/// A caller refuses a longer stream before replaying it.
const MAX_POSITION: u64 = KEY_NEVER - (1 << 18) - 2;

/// The key `next_use << 30 | unit`: one integer compare orders keys by next use, then unit.
#[inline]
fn pack(next_use: u64, unit: u32) -> u64 {
    debug_assert!(next_use <= MAX_POSITION || next_use == NEVER);
    next_use.min(KEY_NEVER) << UNIT_BITS | unit as u64
}

#[inline]
fn unit_of(key: u64) -> u32 {
    (key & ((1 << UNIT_BITS) - 1)) as u32
}

/// The next use (or [`KEY_NEVER`]) of a key.
#[inline]
fn next_of(key: u64) -> u64 {
    key >> UNIT_BITS
}

impl Belady {
    /// The last access position a stream replayed by MIN may reach: 2^34 - 2^18 - 2.
    pub const MAX_POSITION: u64 = MAX_POSITION;

    /// An empty MIN cache over unit ids `0..units`, with a timeline of
    /// [`Belady::window`] positions. Panics when `units` reaches 2^30 (the unit's slot
    /// index shares a `u32` with two tag bits).
    pub fn new(units: usize) -> Self {
        Self::with_window(units, Self::window(units))
    }

    /// [`Belady::new`] with a timeline of `window` positions (a power of two from 64 to 2^18).
    fn with_window(units: usize, window: usize) -> Self {
        assert!(
            units < ON_TIMELINE as usize,
            "Belady supports at most 2^30 - 1 units per pool, got {units}"
        );
        Belady {
            loc: vec![FREE; units],
            timeline: Timeline::new(window),
            now: 0,
            heap: Vec::new(),
            pending: Vec::new(),
            held: 0,
            held_group: 0,
            exhausted_group: 0,
            steps: 0,
        }
    }

    /// Positions covered by the timeline of a pool of `units` units: 16 per unit, as a power
    /// of two between 2^12 and 2^16. Any size gives the same victims; this one only decides
    /// how many keys take the heap path.
    pub fn window(units: usize) -> usize {
        (units.saturating_mul(WINDOW_PER_UNIT))
            .next_power_of_two()
            .clamp(MIN_WINDOW, MAX_WINDOW)
    }

    /// Place a waiting key on the timeline when it lies less than one window ahead of the
    /// latest access, else in the heap.
    #[inline]
    fn place(&mut self, key: u64) {
        let (next_use, u) = (next_of(key), unit_of(key));
        if next_use > self.now && next_use - self.now < self.timeline.len() as u64 {
            let s = self.timeline.slot(next_use);
            self.timeline.insert(s, u);
            self.loc[u as usize] = ON_TIMELINE | s as u32;
        } else {
            self.heap_push(key);
        }
    }

    /// Record the access at `pos` of resident unit `u`.
    #[inline]
    fn touch(&mut self, u: u32, pos: u64, next_use: u64) {
        let l = self.loc[u as usize];
        if l & ON_TIMELINE != 0 && l != FREE {
            // The key being replaced is this very position.
            debug_assert_eq!(l & !ON_TIMELINE, self.timeline.slot(pos) as u32);
            self.timeline.remove((l & !ON_TIMELINE) as usize);
        } else if l & IN_PENDING != 0 {
            debug_assert!(l != FREE, "on_hit for a unit that is not resident");
            // Accessed again before any eviction: drop the waiting key.
            self.remove_pending((l & !IN_PENDING) as usize);
        } else {
            self.remove_at(l as usize);
        }
        self.now = pos;
        self.push_pending(pack(next_use, u));
    }

    /// Remove the waiting key at index `i`, keeping the held keys a prefix of `pending`:
    /// a held slot is refilled from the end of the held prefix, whose slot is refilled from
    /// the end of the list.
    #[inline]
    fn remove_pending(&mut self, i: usize) {
        let last = self.pending.len() - 1;
        if i < self.held {
            let h = self.held - 1;
            self.pending[i] = self.pending[h];
            self.pending[h] = self.pending[last];
            self.held = h;
        } else {
            self.pending[i] = self.pending[last];
        }
        self.pending.pop();
        for j in [i, self.held] {
            if let Some(&moved) = self.pending.get(j) {
                self.loc[unit_of(moved) as usize] = IN_PENDING | j as u32;
            }
        }
    }

    #[inline]
    fn push_pending(&mut self, key: u64) {
        self.loc[unit_of(key) as usize] = IN_PENDING | self.pending.len() as u32;
        self.pending.push(key);
    }

    /// Remove the key at heap slot `i`.
    #[inline]
    fn remove_at(&mut self, i: usize) {
        let last = self.heap.pop().expect("remove_at on an empty heap");
        if i < self.heap.len() {
            // The removed key is usually the heap minimum (a leaf), so the last key only
            // needs to move up; when it was not, the moved key may need to go down instead.
            let removed = self.heap[i];
            self.heap[i] = last;
            if last > removed {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
    }

    /// Insert `key` into the heap.
    #[inline]
    fn heap_push(&mut self, key: u64) {
        self.heap.push(key);
        self.sift_up(self.heap.len() - 1);
    }

    /// Remove and return the largest key; the caller updates its unit's `loc`.
    #[inline]
    fn heap_pop(&mut self) -> Option<u64> {
        let last = self.heap.pop()?;
        if self.heap.is_empty() {
            return Some(last);
        }
        let top = std::mem::replace(&mut self.heap[0], last);
        self.sift_down(0);
        Some(top)
    }

    /// Move the key at slot `i` up to its place, recording every slot it passes.
    #[inline]
    fn sift_up(&mut self, mut i: usize) {
        let heap = &mut self.heap[..];
        let key = heap[i];
        while i > 0 {
            let parent = (i - 1) / D;
            let pk = heap[parent];
            if pk >= key {
                break;
            }
            heap[i] = pk;
            self.loc[unit_of(pk) as usize] = i as u32;
            i = parent;
        }
        heap[i] = key;
        self.loc[unit_of(key) as usize] = i as u32;
    }

    /// Move the key at slot `i` down to its place, recording every slot it passes.
    #[inline]
    fn sift_down(&mut self, mut i: usize) {
        let heap = &mut self.heap[..];
        let n = heap.len();
        let key = heap[i];
        loop {
            let first = D * i + 1;
            if first >= n {
                break;
            }
            // The largest child: branch-free over a full set of four children.
            let (mut best, mut bk) = (first, heap[first]);
            if first + D <= n {
                let c = &heap[first..first + D];
                let (a, ak) = if c[1] > c[0] { (1, c[1]) } else { (0, c[0]) };
                let (b, bk2) = if c[3] > c[2] { (3, c[3]) } else { (2, c[2]) };
                (best, bk) = if bk2 > ak {
                    (first + b, bk2)
                } else {
                    (first + a, ak)
                };
            } else {
                for (j, &ck) in heap[first..].iter().enumerate().skip(1) {
                    if ck > bk {
                        (best, bk) = (first + j, ck);
                    }
                }
            }
            if bk <= key {
                break;
            }
            heap[i] = bk;
            self.loc[unit_of(bk) as usize] = i as u32;
            i = best;
        }
        heap[i] = key;
        self.loc[unit_of(key) as usize] = i as u32;
    }
}

impl Belady {
    /// Protected keys stepped over by evictions so far, for tests that bound the work per
    /// access (a count of operations, not a time).
    pub fn steps(&self) -> u64 {
        self.steps
    }
}

impl EvictionPolicy for Belady {
    fn work(&self) -> u64 {
        self.steps
    }

    #[inline]
    fn on_hit(&mut self, u: u32, at: At) {
        self.touch(u, at.pos, at.next_use);
    }

    #[inline]
    fn on_miss(&mut self, u: u32, at: At) -> Admission {
        debug_assert_eq!(self.loc[u as usize], FREE, "on_miss for a resident unit");
        self.exhausted_group = 0;
        self.now = at.pos;
        self.push_pending(pack(at.next_use, u));
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        if protect.group() != 0 && protect.group() == self.exhausted_group {
            return None;
        }
        // Place the waiting keys of unprotected units; protected ones keep waiting
        // (compacted to the front of `pending`). Keys held under the same group are still
        // protected (a group's protection only grows), so only the rest is looked at: without
        // this, groups of thousands of units (os4k pages) cost a scan per eviction.
        let mut pending = std::mem::take(&mut self.pending);
        let group = protect.group();
        let start = if group != 0 && group == self.held_group {
            self.held
        } else {
            0
        };
        let mut kept = start;
        for j in start..pending.len() {
            let key = pending[j];
            if protect.is(unit_of(key)) {
                pending[kept] = key;
                self.loc[unit_of(key) as usize] = IN_PENDING | kept as u32;
                kept += 1;
            } else {
                self.place(key);
            }
        }
        pending.truncate(kept);
        self.pending = pending;
        self.held = kept;
        self.held_group = group;
        // Protected units can be placed after a fallback eviction without protection earlier
        // in the same group: those at the top of the heap go back to waiting, those on the
        // timeline are stepped over.
        while let Some(&top) = self.heap.first() {
            if !protect.is(unit_of(top)) {
                break;
            }
            self.steps += 1;
            self.heap_pop();
            self.push_pending(top);
        }
        // The farthest unprotected key of the timeline; ring slot `base` holds position
        // `now`, whose key was removed by that access, so every key lies above it.
        let base = self.timeline.slot(self.now);
        let mut near = self.timeline.farthest(base);
        while let Some(s) = near {
            if !protect.is(self.timeline.unit_at(s)) {
                break;
            }
            self.steps += 1;
            near = self.timeline.nearer(s, base);
        }
        let near_key = near.map(|s| {
            let ahead = (s as u32).wrapping_sub(base as u32) & (self.timeline.len() - 1);
            pack(self.now + ahead as u64, self.timeline.unit_at(s))
        });
        let victim = match (self.heap.first().copied(), near_key) {
            (Some(far), Some(near)) if near > far => {
                self.timeline.remove(near_slot(near, &self.timeline));
                near
            }
            (Some(_), _) => self.heap_pop().expect("non-empty heap"),
            (None, Some(near)) => {
                self.timeline.remove(near_slot(near, &self.timeline));
                near
            }
            (None, None) => {
                self.exhausted_group = protect.group();
                return None;
            }
        };
        let u = unit_of(victim);
        self.loc[u as usize] = FREE;
        Some(u)
    }
}

/// The ring slot of a timeline key.
#[inline]
fn near_slot(key: u64, t: &Timeline) -> usize {
    t.slot(next_of(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The MIN rule by brute force: the largest (next use, unit) among resident units that
    /// `protect` allows.
    struct Naive {
        next: Vec<Option<u64>>,
    }

    impl Naive {
        fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
            let v = (0..self.next.len() as u32)
                .filter(|&u| !protect.is(u))
                .filter_map(|u| self.next[u as usize].map(|n| (n, u)))
                .max()?
                .1;
            self.next[v as usize] = None;
            Some(v)
        }
    }

    /// Random groups over 60 units (a hot third drawn nine times in ten) with random budgets
    /// and timelines of 64, 128 and 4,096 positions (keys wrap around the ring and many take
    /// the heap path), both semantics, against the brute force: every victim must agree,
    /// including budgets below one group (the fallback without protection) and
    /// never-used-again units. A third of the streams start past 2^32 (at 3 * 2^32 + 12,345,
    /// not a multiple of any timeline) and one as near [`MAX_POSITION`] as it fits: the keys'
    /// 34-bit positions order them as the brute force's u64 positions do.
    #[test]
    fn victims_match_brute_force() {
        for seed in 0..90u64 {
            let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
            let units = 60u32;
            let stream: Vec<Vec<u32>> = (0..700)
                .map(|_| {
                    let mut g: Vec<u32> = Vec::new();
                    let size = rng.gen_range(1..=10);
                    while g.len() < size {
                        let u = if rng.gen_bool(0.9) {
                            rng.gen_range(0..units / 3)
                        } else {
                            rng.gen_range(units / 3..units)
                        };
                        if !g.contains(&u) {
                            g.push(u);
                        }
                    }
                    g
                })
                .collect();
            let flat: Vec<u32> = stream.iter().flatten().copied().collect();
            let start = match seed % 5 {
                1 | 3 => (3 << 32) + 12_345,
                4 if seed == 89 => MAX_POSITION + 1 - flat.len() as u64,
                _ => 0,
            };
            let mut next_use = vec![NEVER; flat.len()];
            for (p, &u) in flat.iter().enumerate() {
                next_use[p] = flat[p + 1..]
                    .iter()
                    .position(|&v| v == u)
                    .map_or(NEVER, |d| start + (p + 1 + d) as u64);
            }
            let cap = rng.gen_range(1..=24usize);
            let access = seed % 2 == 0;
            let window = [64, 128, 4096][seed as usize % 3];
            let mut fast = Belady::with_window(units as usize, window);
            let mut naive = Naive {
                next: vec![None; units as usize],
            };
            let mut resident = vec![false; units as usize];
            let mut len = 0usize;
            let mut stamp = vec![0u32; units as usize];
            let mut pos = 0usize;
            for (g, group) in stream.iter().enumerate() {
                let current = g as u32 + 1;
                for &u in group {
                    stamp[u as usize] = current;
                    let at = At {
                        pos: start + pos as u64,
                        next_use: next_use[pos],
                    };
                    pos += 1;
                    if resident[u as usize] {
                        fast.on_hit(u, at);
                    } else {
                        assert_eq!(fast.on_miss(u, at), Admission::Retain);
                        resident[u as usize] = true;
                        len += 1;
                    }
                    naive.next[u as usize] = Some(at.next_use);
                    while access && len > cap {
                        let v = fast.evict(Protect::none());
                        assert_eq!(v, naive.evict(Protect::none()), "seed {seed} pos {pos}");
                        resident[v.unwrap() as usize] = false;
                        len -= 1;
                    }
                }
                while len > cap {
                    let protect = Protect::new(&stamp, current);
                    let mut v = fast.evict(protect);
                    assert_eq!(v, naive.evict(protect), "seed {seed} group {g}");
                    if v.is_none() {
                        v = fast.evict(Protect::none());
                        assert_eq!(v, naive.evict(Protect::none()), "seed {seed} group {g}");
                    }
                    resident[v.unwrap() as usize] = false;
                    len -= 1;
                }
            }
        }
    }

    /// A budget of one unit under groups of 6,144 (`os4k` pages of a granite group, `--budget
    /// 1`): once the group's protection leaves no victim, later evictions of the group do not
    /// step over its protected keys again; the steps per access stay a small constant.
    #[test]
    fn a_budget_below_the_group_does_not_step_over_the_group_per_eviction() {
        let (units, size) = (20_000u32, 6_144usize);
        let mut b = Belady::new(units as usize);
        let mut rng = rand_pcg::Pcg64::seed_from_u64(9);
        let mut stamp = vec![0u32; units as usize];
        let mut resident = vec![false; units as usize];
        let (mut live, mut pos) = (0usize, 0u64);
        for g in 1..=6u32 {
            let group = rand::seq::index::sample(&mut rng, units as usize, size);
            for u in group.into_iter().map(|u| u as u32) {
                stamp[u as usize] = g;
                let at = At {
                    pos,
                    next_use: NEVER,
                };
                pos += 1;
                if resident[u as usize] {
                    b.on_hit(u, at);
                } else {
                    b.on_miss(u, at);
                    resident[u as usize] = true;
                    live += 1;
                }
            }
            while live > 1 {
                let v = b
                    .evict(Protect::new(&stamp, g))
                    .or_else(|| b.evict(Protect::none()))
                    .expect("a resident unit to evict");
                resident[v as usize] = false;
                live -= 1;
            }
        }
        let per_access = b.steps() as f64 / pos as f64;
        assert!(per_access < 4.0, "{per_access} steps per access");
    }
}
