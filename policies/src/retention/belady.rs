//! Belady's MIN: the offline optimum.

use super::{Admission, At, EvictionPolicy, Protect, NEVER};
use std::collections::BinaryHeap;

/// MIN (Belady 1966): the victim is the resident unit whose next use is farthest in the
/// future; units never used again go first. Next uses are precomputed by the caller and
/// passed in [`At::next_use`] as access positions; since a unit appears at most once per group,
/// ordering by next access position is ordering by next use counted in groups, with ties
/// inside one future group broken by the later position in that group (which cannot change
/// page-in counts under group semantics: both tied units are needed by the same group).
/// Among units never used again, the highest unit id goes first.
///
/// A max-heap of (next use, unit) with lazy invalidation: every access records a fresh entry
/// and stale entries (the unit was accessed again or evicted since) are dropped when they
/// surface. O(log n) per access; the heap is rebuilt when stale entries outnumber live ones.
/// Entries of recent accesses wait in a side list until an eviction, and only those of
/// unprotected units enter the heap then: the current group's units (often never used again,
/// so at the very top) would otherwise be popped and pushed back at every eviction.
#[derive(Clone, Debug)]
pub struct Belady {
    /// Current next use of each resident unit; `None` when not resident.
    next: Vec<Option<u32>>,
    /// Entries `next_use << 32 | unit`, packed so one integer compare orders them.
    heap: BinaryHeap<u64>,
    /// Entries not yet in the heap (recent accesses).
    pending: Vec<u64>,
    live: usize,
    /// Entries popped because protected, to push back after a victim is found.
    skipped: Vec<u64>,
}

#[inline]
fn pack(next_use: u32, unit: u32) -> u64 {
    (next_use as u64) << 32 | unit as u64
}

/// True when heap entry `e` still holds its unit's current next use.
#[inline]
fn live_entry(next: &[Option<u32>], e: u64) -> bool {
    next[e as u32 as usize] == Some((e >> 32) as u32)
}

/// Pending entries flushed into the heap without waiting for an eviction (bounds memory
/// when nothing is evicted for a long time).
const PENDING_LIMIT: usize = 4096;

impl Belady {
    /// An empty MIN cache over unit ids `0..units`.
    pub fn new(units: usize) -> Self {
        Belady {
            next: vec![None; units],
            heap: BinaryHeap::new(),
            pending: Vec::new(),
            live: 0,
            skipped: Vec::new(),
        }
    }

    #[inline]
    fn set(&mut self, u: u32, next_use: u32) {
        self.next[u as usize] = Some(next_use);
        self.pending.push(pack(next_use, u));
        if self.pending.len() >= PENDING_LIMIT {
            self.heap.extend(self.pending.drain(..));
        }
        if self.heap.len() > 2 * self.live + 64 {
            let next = &self.next;
            self.heap.retain(|&e| live_entry(next, e));
        }
    }
}

impl EvictionPolicy for Belady {
    #[inline]
    fn on_hit(&mut self, u: u32, at: At) {
        self.set(u, at.next_use);
    }

    #[inline]
    fn on_miss(&mut self, u: u32, at: At) -> Admission {
        self.live += 1;
        self.set(u, at.next_use);
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        let Belady {
            next,
            heap,
            pending,
            skipped,
            ..
        } = self;
        if protect.is_none() {
            heap.extend(pending.drain(..));
        } else {
            pending.retain(|&e| {
                let keep = protect.is(e as u32);
                if !keep && live_entry(next, e) {
                    heap.push(e);
                }
                keep
            });
        }
        let mut victim = None;
        while let Some(e) = heap.pop() {
            if !live_entry(next, e) {
                continue; // stale
            }
            let u = e as u32;
            if protect.is(u) {
                skipped.push(e);
                continue;
            }
            victim = Some(u);
            break;
        }
        heap.extend(skipped.drain(..));
        let v = victim?;
        next[v as usize] = None;
        self.live -= 1;
        Some(v)
    }
}

// NEVER sorts above every real position, so never-used-again units surface first.
const _: () = assert!(NEVER == u32::MAX);
