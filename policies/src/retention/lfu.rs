//! Least frequently used, with counts over the whole run.

use super::registry::PolicyEntry;
use super::{Admission, At, EvictionPolicy, Protect};
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
/// O(log n) per access. As in [`super::Belady`], entries of recent accesses wait in a side
/// list until an eviction, so protected units (the current group, often with low counts) are
/// not popped and pushed back at every eviction.
#[derive(Clone, Debug)]
pub struct Lfu {
    count: Vec<u64>,
    last: Vec<u32>,
    resident: Vec<bool>,
    live: usize,
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    pending: Vec<(u64, u32, u32)>,
    skipped: Vec<Reverse<(u64, u32, u32)>>,
}

/// Pending entries flushed into the heap without waiting for an eviction.
const PENDING_LIMIT: usize = 4096;

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
            skipped: Vec::new(),
        }
    }

    #[inline]
    fn touch(&mut self, u: u32, at: At) {
        let i = u as usize;
        self.count[i] += 1;
        self.last[i] = at.pos;
        self.pending.push((self.count[i], at.pos, u));
        if self.pending.len() >= PENDING_LIMIT {
            self.heap.extend(self.pending.drain(..).map(Reverse));
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
        self.resident[u as usize] = true;
        self.live += 1;
        self.touch(u, at);
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        let Lfu {
            count,
            last,
            resident,
            heap,
            pending,
            skipped,
            ..
        } = self;
        let valid = |&(c, l, v): &(u64, u32, u32)| {
            resident[v as usize] && count[v as usize] == c && last[v as usize] == l
        };
        if protect.is_none() {
            heap.extend(pending.drain(..).map(Reverse));
        } else {
            pending.retain(|e| {
                let keep = protect.is(e.2);
                if !keep && valid(e) {
                    heap.push(Reverse(*e));
                }
                keep
            });
        }
        let mut victim = None;
        while let Some(Reverse(e)) = heap.pop() {
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
        let v = victim?;
        resident[v as usize] = false;
        self.live -= 1;
        Some(v)
    }
}
