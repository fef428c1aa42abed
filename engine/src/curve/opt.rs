//! The Belady/MIN stack (Mattson et al. 1970's OPT stack algorithm, generalised to groups
//! admitted together): the cache of C units is the stack's top C after every group.

use super::Stack;
use policies::retention::NEVER;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Where a unit is not on the stack.
const ABSENT: u32 = u32::MAX;
/// Bits of a key below its next use: the local unit id, as the policy's keys pack it.
const UNIT_BITS: u32 = 30;
/// A key's next-use field for [`NEVER`], above every real position (the policy's too).
const KEY_NEVER: u64 = (1 << (64 - UNIT_BITS)) - 1;

/// The key `next_use << 30 | unit` of `policies::retention::Belady`: one integer compare
/// orders units by next use, then id.
fn pack(next_use: u64, unit: u32) -> u64 {
    next_use.min(KEY_NEVER) << UNIT_BITS | unit as u64
}

/// The MIN stack of one pool, over local unit ids. The priority after a group is the one
/// `policies::retention::Belady` evicts by, read backwards: under group semantics the
/// current group's units first, then by next use (nearer first; next use in stream
/// positions, so a tie in groups is broken by the position in the group, as the policy's
/// keys do), then by unit id (lower first: the policy evicts the highest id among units
/// never used again). A total order that does not depend on the budget, hence the inclusion
/// property (the cache of C units holds the cache of C - 1 units) and the stack.
///
/// Update: the cache of C units after the group is the best C of its cache before it and
/// the group; walking the levels down, the new unit at level C is the best of the units
/// rejected so far (a heap, which starts as the group) and the old unit at level C. A level
/// changes only where its old unit is worse than the best rejected one or is one of the
/// group's; a tree of the levels' keys (their maximum per range) finds the next such level
/// in O(log units), so a group costs O((g + changed levels) log units), and below the
/// group's deepest unit nothing changes.
#[derive(Clone, Debug)]
pub struct OptStack {
    stack: Vec<u32>,
    at: Vec<u32>,
    key: Vec<u64>,
    stamp: Vec<u32>,
    group: u32,
    /// Rejected units: (not protected, key), the smallest kept first.
    heap: BinaryHeap<Reverse<(bool, u64)>>,
    levels: MaxTree,
}

impl OptStack {
    /// The priority of `u` (smaller is kept): (not protected, key).
    fn prio(&self, u: u32, protect: bool) -> Reverse<(bool, u64)> {
        let own = protect && self.stamp[u as usize] == self.group;
        Reverse((!own, self.key[u as usize]))
    }

    /// Put `u` at level `i`.
    fn place(&mut self, i: usize, u: u32) {
        if i < self.stack.len() {
            self.stack[i] = u;
        } else {
            self.stack.push(u);
        }
        self.at[u as usize] = i as u32;
        self.levels.set(i, self.key[u as usize] + 1);
    }
}

impl Stack for OptStack {
    fn new(units: usize) -> Self {
        OptStack {
            stack: Vec::new(),
            at: vec![ABSENT; units],
            key: (0..units as u32).map(|u| pack(NEVER, u)).collect(),
            stamp: vec![0; units],
            group: 0,
            heap: BinaryHeap::new(),
            levels: MaxTree::new(units),
        }
    }

    fn step(&mut self, units: &[u32], next: Option<&[u64]>, protect: bool, depth: &mut Vec<u32>) {
        let next = next.expect("the MIN stack reads next uses");
        depth.clear();
        depth.extend(units.iter().map(|&u| self.at[u as usize].wrapping_add(1)));
        self.group += 1;
        self.heap.clear();
        for (&u, &n) in units.iter().zip(next) {
            self.stamp[u as usize] = self.group;
            self.key[u as usize] = pack(n, u);
            let p = self.prio(u, protect);
            self.heap.push(p);
            if let Some(&at) = self.at.get(u as usize).filter(|&&a| a != ABSENT) {
                // the group's old levels always change: a stop for the walk
                self.levels.set(at as usize, u64::MAX);
            }
        }
        let mut i = 0;
        while let Some(&Reverse((unprotected, best))) = self.heap.peek() {
            // the next level whose unit is worse than the best rejected one, or the group's
            let bar = if unprotected { best + 1 } else { 0 };
            let Some(j) = self
                .levels
                .first_above(i, bar)
                .filter(|&j| j < self.stack.len())
            else {
                // below the stack: the rest, new units, in priority order
                while let Some(Reverse((_, k))) = self.heap.pop() {
                    let u = (k & ((1 << UNIT_BITS) - 1)) as u32;
                    self.place(self.stack.len(), u);
                }
                break;
            };
            let old = self.stack[j];
            if self.stamp[old as usize] != self.group {
                let p = self.prio(old, protect);
                self.heap.push(p);
            }
            let Reverse((_, k)) = self.heap.pop().expect("not empty");
            self.place(j, (k & ((1 << UNIT_BITS) - 1)) as u32);
            i = j + 1;
        }
    }
}

/// The maximum of values over ranges of levels: a complete binary tree over a power of two
/// of leaves (0 for an empty level).
#[derive(Clone, Debug)]
struct MaxTree {
    size: usize,
    t: Vec<u64>,
}

impl MaxTree {
    fn new(levels: usize) -> Self {
        let size = levels.next_power_of_two().max(1);
        MaxTree {
            size,
            t: vec![0; 2 * size],
        }
    }

    fn set(&mut self, level: usize, v: u64) {
        let mut i = level + self.size;
        self.t[i] = v;
        while i > 1 {
            i >>= 1;
            self.t[i] = self.t[2 * i].max(self.t[2 * i + 1]);
        }
    }

    /// The first level `>= from` whose value is above `bar`.
    fn first_above(&self, from: usize, bar: u64) -> Option<usize> {
        if from >= self.size {
            return None;
        }
        let mut i = from + self.size;
        loop {
            if self.t[i] > bar {
                break;
            }
            // up while a right child; then the right sibling, wholly after `from`
            while i & 1 == 1 {
                i >>= 1;
            }
            if i == 0 {
                return None;
            }
            i += 1;
        }
        while i < self.size {
            i = if self.t[2 * i] > bar {
                2 * i
            } else {
                2 * i + 1
            };
        }
        Some(i - self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_above_finds_the_first_larger_level() {
        let mut t = MaxTree::new(6);
        for (i, v) in [5, 1, 7, 2, 9, 3].into_iter().enumerate() {
            t.set(i, v);
        }
        assert_eq!(t.first_above(0, 4), Some(0));
        assert_eq!(t.first_above(1, 4), Some(2));
        assert_eq!(t.first_above(3, 7), Some(4));
        assert_eq!(t.first_above(5, 3), None);
        assert_eq!(t.first_above(9, 0), None);
    }

    #[test]
    fn access_by_access_min_by_hand() {
        // Stream a b c a b (positions 0..5), one access a group, no protection.
        // next uses: a@0 -> 3, b@1 -> 4, c@2 -> never, a@3 -> never, b@4 -> never.
        // After a, b, c the stack by priority is a(3) b(4) c(never): MIN with 1 unit keeps a
        // (c's own next use is never, so c is not kept), with 2 units a and b.
        let mut s = OptStack::new(3);
        let mut d = Vec::new();
        let steps: [(u32, u64, u32); 5] = [
            (0, 3, 0),
            (1, 4, 0),
            (2, NEVER, 0),
            (0, NEVER, 1),
            (1, NEVER, 2),
        ];
        for (u, n, want) in steps {
            s.step(&[u], Some(&[n]), false, &mut d);
            assert_eq!(d, [want], "access of {u}");
        }
    }
}
