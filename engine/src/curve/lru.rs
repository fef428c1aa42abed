//! LRU stack distances (Mattson et al. 1970) over a Fenwick tree of last-use times:
//! O(log n) per access, memory O(units) whatever the stream's length.

use super::Stack;

/// The LRU stack of one pool. A unit's depth is one plus the number of units whose last use
/// is later than its own: the Fenwick tree counts the units by last-use time, and times are
/// renumbered in order (compacted) when they run out, so the tree holds 4 x units slots.
#[derive(Clone, Debug)]
pub struct LruStack {
    /// Last-use time of each unit (1-based), 0 for never used.
    last: Vec<u32>,
    /// The unit last used at each time (valid where `last[who[t]] == t`).
    who: Vec<u32>,
    /// Fenwick tree over times `1..tree.len()`: 1 where a unit's last use is.
    tree: Vec<u32>,
    /// The latest time handed out.
    clock: u32,
    /// Units used at least once.
    live: u32,
}

impl LruStack {
    /// An empty stack over unit ids `0..units`.
    pub fn new(units: usize) -> Self {
        let slots = units.saturating_mul(4).max(16) + 1;
        LruStack {
            last: vec![0; units],
            who: vec![0; slots],
            tree: vec![0; slots],
            clock: 0,
            live: 0,
        }
    }

    fn add(&mut self, mut i: usize, up: bool) {
        while i < self.tree.len() {
            if up {
                self.tree[i] += 1;
            } else {
                self.tree[i] -= 1;
            }
            i += i & i.wrapping_neg();
        }
    }

    /// Units whose last use is at a time `<= t`.
    fn prefix(&self, mut i: usize) -> u32 {
        let mut s = 0;
        while i > 0 {
            s += self.tree[i];
            i &= i - 1;
        }
        s
    }

    /// Depth of `u` in the stack (1 = most recent), `None` when never used.
    pub fn depth(&self, u: u32) -> Option<u32> {
        let t = self.last[u as usize];
        (t != 0).then(|| self.live - self.prefix(t as usize) + 1)
    }

    /// Make `u` the most recent unit.
    pub fn touch(&mut self, u: u32) {
        if self.clock as usize + 1 >= self.tree.len() {
            self.compact();
        }
        self.clock += 1;
        let t = self.last[u as usize];
        if t == 0 {
            self.live += 1;
        } else {
            self.add(t as usize, false);
        }
        self.add(self.clock as usize, true);
        self.who[self.clock as usize] = u;
        self.last[u as usize] = self.clock;
    }

    /// Renumber the live units' times `1..=live` in their order and rebuild the tree (linear).
    fn compact(&mut self) {
        let mut n = 0usize;
        for t in 1..=self.clock as usize {
            let u = self.who[t];
            if self.last[u as usize] as usize == t {
                n += 1;
                self.who[n] = u;
                self.last[u as usize] = n as u32;
            }
        }
        self.clock = n as u32;
        self.tree.fill(0);
        for i in 1..self.tree.len() {
            self.tree[i] += (i <= n) as u32;
            let j = i + (i & i.wrapping_neg());
            if j < self.tree.len() {
                self.tree[j] += self.tree[i];
            }
        }
    }
}

impl Stack for LruStack {
    fn new(units: usize) -> Self {
        LruStack::new(units)
    }

    /// The group's depths all from the stack at the group's start (its units are distinct),
    /// then each unit made most recent in selection order. Protection changes nothing for
    /// LRU: the current group's units are the most recent ones anyway.
    fn step(&mut self, units: &[u32], _next: Option<&[u64]>, _protect: bool, depth: &mut Vec<u32>) {
        depth.clear();
        depth.extend(units.iter().map(|&u| self.depth(u).unwrap_or(0)));
        for &u in units {
            self.touch(u);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depths_follow_recency_across_compactions() {
        // 3 units, 16+1 slots: a cycle a b c a b c ... passes several compactions; every
        // access after the first three is at depth 3 (the other two were used since).
        let mut s = LruStack::new(3);
        for i in 0..100u32 {
            let u = i % 3;
            let d = s.depth(u);
            assert_eq!(d, if i < 3 { None } else { Some(3) }, "access {i}");
            s.touch(u);
        }
        // a b a: b is at depth 2 after a was used again; a at depth 1.
        let mut s = LruStack::new(4);
        s.touch(0);
        s.touch(1);
        s.touch(0);
        assert_eq!(
            (s.depth(0), s.depth(1), s.depth(2)),
            (Some(1), Some(2), None)
        );
    }
}
