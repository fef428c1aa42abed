//! The Belady/MIN stack (Mattson et al. 1970's OPT stack algorithm, generalised to groups
//! admitted together): the cache of C units is the stack's top C after every group.

use super::Stack;
use policies::retention::NEVER;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Where a unit is not on the stack.
const ABSENT: u32 = u32::MAX;

/// The MIN stack of one pool, over local unit ids. The priority after a group is the one
/// `policies::retention::Belady` evicts by, read backwards: under group semantics the
/// current group's units first, then by next use (nearer first; next use in stream
/// positions, so a tie in groups is broken by the position in the group, as the policy's
/// keys do), then by unit id (lower first: the policy evicts the highest id among units
/// never used again). A total order that does not depend on the budget, hence the inclusion
/// property (the cache of C units holds the cache of C - 1 units) and the stack.
///
/// Update (O(depth log g) for a group of g units whose deepest unit is at depth `depth`):
/// the cache of C units after the group is the best C of its cache before it and the group;
/// walking the levels down, the new unit at level C is the best of the units rejected so far
/// and the old unit at level C, kept in a heap. Below the deepest unit of the group nothing
/// is rejected and the stack is unchanged.
#[derive(Clone, Debug)]
pub struct OptStack {
    stack: Vec<u32>,
    at: Vec<u32>,
    next: Vec<u64>,
    stamp: Vec<u32>,
    group: u32,
    heap: BinaryHeap<Reverse<(bool, u64, u32)>>,
}

impl OptStack {
    /// The priority of `u` (smaller is kept): (not protected, next use, unit).
    fn prio(&self, u: u32, protect: bool) -> Reverse<(bool, u64, u32)> {
        let own = protect && self.stamp[u as usize] == self.group;
        Reverse((!own, self.next[u as usize], u))
    }
}

impl Stack for OptStack {
    fn new(units: usize) -> Self {
        OptStack {
            stack: Vec::new(),
            at: vec![ABSENT; units],
            next: vec![NEVER; units],
            stamp: vec![0; units],
            group: 0,
            heap: BinaryHeap::new(),
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
            self.next[u as usize] = n;
        }
        for &u in units {
            let p = self.prio(u, protect);
            self.heap.push(p);
        }
        let mut i = 0;
        while !self.heap.is_empty() {
            if let Some(&s) = self.stack.get(i) {
                if self.stamp[s as usize] != self.group {
                    let p = self.prio(s, protect);
                    self.heap.push(p);
                }
            }
            let Reverse((_, _, u)) = self.heap.pop().expect("not empty");
            if i < self.stack.len() {
                self.stack[i] = u;
            } else {
                self.stack.push(u);
            }
            self.at[u as usize] = i as u32;
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
