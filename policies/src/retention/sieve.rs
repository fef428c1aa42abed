//! SIEVE.

use super::list::{DList, NIL};
use super::registry::PolicyEntry;
use super::{Admission, At, EvictionPolicy, Exhausted, Protect};

/// The registry entry of `sieve`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "sieve",
    aliases: &[],
    debug_name: "Sieve",
    summary: "SIEVE (Zhang et al., NSDI 2024): FIFO queue, visited bits, a hand from old to new",
    help_note: None,
    needs_profile: false,
    offline: false,
    monotone_in_budget: false,
    in_all: false,
    build: |s| Ok(Box::new(Sieve::new(s.units))),
};

/// SIEVE (Zhang et al., "SIEVE is Simpler than LRU: an Efficient Turn-Key Eviction
/// Algorithm for Web Caches", NSDI 2024): one FIFO queue, new units at the head, and a
/// visited bit per unit that a hit sets (a hit moves nothing). To evict, a hand walks from
/// where it last stopped (first from the tail) towards the head, clearing visited bits, and
/// evicts the first unvisited unit; the hand then rests on that unit's newer neighbour and
/// wraps from the head back to the tail.
///
/// Adaptation to the caller's protocol (admit first, then evict while over budget): the
/// newly admitted unit is already at the head when the hand runs, so when every older unit
/// was visited the hand reaches it and evicts it (libCacheSim, which evicts before inserting,
/// wraps to the tail instead; see `policies/RETENTION.md`). Protected units are skipped in
/// place and keep their bits.
#[derive(Clone, Debug)]
pub struct Sieve {
    /// Resident units, newest admission at the head.
    queue: DList,
    visited: Vec<bool>,
    /// Where the next eviction starts (a resident unit), or [`NIL`] for the tail.
    hand: u32,
    /// Units the hand has passed so far.
    steps: u64,
    exhausted: Exhausted,
}

impl Sieve {
    /// An empty SIEVE over unit ids `0..units`.
    pub fn new(units: usize) -> Self {
        Sieve {
            queue: DList::new(units),
            visited: vec![false; units],
            hand: NIL,
            steps: 0,
            exhausted: Exhausted::default(),
        }
    }

    /// The unit after `u` in the hand's direction (towards the head), wrapping to the tail.
    fn step(&self, u: u32) -> u32 {
        match self.queue.towards_head(u) {
            Some(n) => n,
            None => self.queue.tail().expect("the queue holds u"),
        }
    }
}

impl EvictionPolicy for Sieve {
    #[inline]
    fn on_hit(&mut self, u: u32, _at: At) {
        self.visited[u as usize] = true;
    }

    #[inline]
    fn on_miss(&mut self, u: u32, _at: At) -> Admission {
        self.exhausted.reset();
        self.queue.push_head(u);
        self.visited[u as usize] = false;
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        if self.exhausted.covers(&protect) {
            return None;
        }
        let mut cur = if self.hand == NIL {
            self.queue.tail()?
        } else {
            self.hand
        };
        // One lap clears every unprotected bit, so the second lap finds a victim; a lap with
        // no unprotected unit means there is none.
        let len = self.queue.len();
        let mut unprotected = false;
        for walked in 0..=2 * len {
            self.steps += 1;
            if walked == len && !unprotected {
                self.exhausted.mark(&protect);
                return None;
            }
            if !protect.is(cur) {
                unprotected = true;
                if !self.visited[cur as usize] {
                    self.hand = self.queue.towards_head(cur).unwrap_or(NIL);
                    self.queue.remove(cur);
                    return Some(cur);
                }
                self.visited[cur as usize] = false;
            }
            cur = self.step(cur);
        }
        unreachable!("a second lap over cleared bits finds an unprotected unit")
    }

    fn work(&self) -> u64 {
        self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u32 = 0;
    const B: u32 = 1;
    const C: u32 = 2;
    const D: u32 = 3;
    const E: u32 = 4;
    const F: u32 = 5;

    /// Access semantics by hand: hit or admit, then evict while over `cap`.
    fn run(cap: usize, accesses: &[u32]) -> (usize, Vec<u32>) {
        let mut s = Sieve::new(6);
        let mut resident = [false; 6];
        let (mut misses, mut evicted) = (0, Vec::new());
        for (pos, &u) in accesses.iter().enumerate() {
            let at = At {
                pos: pos as u64,
                next_use: super::super::NEVER,
            };
            if resident[u as usize] {
                s.on_hit(u, at);
                continue;
            }
            misses += 1;
            assert_eq!(s.on_miss(u, at), Admission::Retain);
            resident[u as usize] = true;
            while s.queue.len() > cap {
                let v = s.evict(Protect::none()).unwrap();
                resident[v as usize] = false;
                evicted.push(v);
            }
        }
        (misses, evicted)
    }

    #[test]
    fn hand_computed_access_sequence() {
        // Budget 3; queues are written head (newest) .. tail; * marks a visited unit.
        // A B C        misses: [C B A]
        // A            hit: [C B A*]
        // D            miss: [D C B A*]; the hand starts at the tail: A* cleared, B
        //              unvisited -> evict B; the hand rests on C. [D C A]
        // B            miss: [B D C A]; hand at C, unvisited -> evict C; hand on D. [B D A]
        // A D          hits: [B D* A*]
        // E            miss: [E B D* A*]; hand at D*: cleared; B unvisited -> evict B; the
        //              hand rests on B's newer neighbour E. [E D A*]
        // F            miss: [F E D A*]; hand at E, unvisited -> evict E (the unit admitted
        //              one access ago: the hand had passed the older ones). [F D A*]
        // 7 misses (A B C D B E F), victims B C B E.
        let (misses, evicted) = run(3, &[A, B, C, A, D, B, A, D, E, F]);
        assert_eq!(misses, 7);
        assert_eq!(evicted, vec![B, C, B, E]);
    }

    #[test]
    fn the_hand_wraps_and_may_take_the_newcomer() {
        // Budget 2. A B, hits A B: [B* A*]. C: [C B* A*]; the hand clears A* and B*, then
        // meets C (unvisited, at the head) and evicts it: admit-then-evict lets the newcomer
        // go when every older unit was visited. The hand wraps to the tail. [B A]
        // D: [D B A]; hand at the tail: A unvisited -> evict A. [D B]
        let (misses, evicted) = run(2, &[A, B, A, B, C, D]);
        assert_eq!(misses, 4);
        assert_eq!(evicted, vec![C, A]);
    }

    #[test]
    fn protected_units_are_skipped_with_their_bits() {
        let mut s = Sieve::new(4);
        let at = At {
            pos: 0,
            next_use: super::super::NEVER,
        };
        for u in [A, B, C] {
            s.on_miss(u, at);
        }
        s.on_hit(A, at);
        // [C B A*]; A and B protected: the hand passes A (bit kept) and B, takes C.
        let stamp = [1, 1, 0, 0];
        assert_eq!(s.evict(Protect::new(&stamp, 1)), Some(C));
        assert!(s.visited[A as usize]);
        // Everything protected: no victim.
        let stamp = [1, 1, 1, 1];
        assert_eq!(s.evict(Protect::new(&stamp, 1)), None);
        // Unprotected: A* is cleared, B goes.
        assert_eq!(s.evict(Protect::none()), Some(B));
        assert!(!s.visited[A as usize]);
    }
}
