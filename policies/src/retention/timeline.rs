//! A circular timeline of the next `W` access positions, for Belady's MIN: which unit will be
//! accessed at each upcoming position, as a three-level bitset over a ring of slots.
//!
//! Every access position belongs to exactly one unit, so next-use keys that lie within one
//! window of `W` positions are distinct and map to distinct ring slots (`key mod W`): the
//! timeline stores them with no collisions, and the farthest one is the highest occupied slot
//! in ring order, found with at most three leading-zero counts and no loop. Insert and remove
//! are O(1).

/// The occupied slots of a ring of `W` positions (`W` a power of two from 64 to 2^18) and the
/// unit at each.
#[derive(Clone, Debug)]
pub(crate) struct Timeline {
    /// `W - 1`.
    mask: u32,
    /// Unit whose next use falls on each slot; meaningful only where `bits` is set.
    who: Vec<u32>,
    /// Bit `s % 64` of word `s / 64` is set when slot `s` is occupied.
    bits: Vec<u64>,
    /// Bit `w % 64` of word `w / 64` is set when `bits[w] != 0`.
    mid: Vec<u64>,
    /// Bit `m` is set when `mid[m] != 0` (at most 64 mid words: `W <= 2^18`).
    top: u64,
}

/// Mask of bits `0..=b` of a word.
#[inline]
fn up_to(b: usize) -> u64 {
    u64::MAX >> (63 - b)
}

/// Index of the highest set bit of a non-zero word.
#[inline]
fn top_bit(w: u64) -> usize {
    63 - w.leading_zeros() as usize
}

impl Timeline {
    /// An empty ring of `w` slots; `w` must be a power of two from 64 (one bitset word) to
    /// 2^18 (one top word).
    pub(crate) fn new(w: usize) -> Self {
        assert!(w.is_power_of_two() && (64..=1 << 18).contains(&w));
        Timeline {
            mask: (w - 1) as u32,
            who: vec![0; w],
            bits: vec![0; w / 64],
            mid: vec![0; (w / 64).div_ceil(64)],
            top: 0,
        }
    }

    /// The number of slots, `W`.
    #[inline]
    pub(crate) fn len(&self) -> u32 {
        self.mask + 1
    }

    /// The slot of position `key`.
    #[inline]
    pub(crate) fn slot(&self, key: u64) -> usize {
        (key & self.mask as u64) as usize
    }

    /// The unit at occupied slot `s`.
    #[inline]
    pub(crate) fn unit_at(&self, s: usize) -> u32 {
        self.who[s]
    }

    /// Occupy slot `s` with unit `u` (the slot must be free).
    #[inline]
    pub(crate) fn insert(&mut self, s: usize, u: u32) {
        debug_assert!(self.bits[s >> 6] & (1 << (s & 63)) == 0, "slot {s} taken");
        self.who[s] = u;
        self.bits[s >> 6] |= 1 << (s & 63);
        self.mid[s >> 12] |= 1 << ((s >> 6) & 63);
        self.top |= 1 << (s >> 12);
    }

    /// Free occupied slot `s`.
    #[inline]
    pub(crate) fn remove(&mut self, s: usize) {
        debug_assert!(self.bits[s >> 6] & (1 << (s & 63)) != 0, "slot {s} free");
        let w = s >> 6;
        self.bits[w] &= !(1 << (s & 63));
        if self.bits[w] == 0 {
            self.mid[w >> 6] &= !(1 << (w & 63));
            if self.mid[w >> 6] == 0 {
                self.top &= !(1 << (w >> 6));
            }
        }
    }

    /// The highest occupied slot below `end` (`end <= W`), if any.
    #[inline]
    pub(crate) fn highest_below(&self, end: usize) -> Option<usize> {
        if end == 0 {
            return None;
        }
        // The slot's own word, then lower words of its mid word, then lower mid words.
        let last = end - 1;
        let w = last >> 6;
        let m = self.bits[w] & up_to(last & 63);
        if m != 0 {
            return Some(w << 6 | top_bit(m));
        }
        if w == 0 {
            return None;
        }
        let below = w - 1;
        let mw = below >> 6;
        let m = self.mid[mw] & up_to(below & 63);
        let word = if m != 0 {
            mw << 6 | top_bit(m)
        } else {
            if mw == 0 {
                return None;
            }
            let t = self.top & up_to(mw - 1);
            if t == 0 {
                return None;
            }
            let mw = top_bit(t);
            mw << 6 | top_bit(self.mid[mw])
        };
        Some(word << 6 | top_bit(self.bits[word]))
    }

    /// The occupied slot holding the largest position when positions run from slot `base`
    /// upwards around the ring (slot `base` is the smallest, slot `base - 1` the largest).
    #[inline]
    pub(crate) fn farthest(&self, base: usize) -> Option<usize> {
        self.highest_below(base)
            .or_else(|| self.highest_below(self.len() as usize))
    }

    /// The occupied slot holding the largest position below that of occupied slot `s`, in
    /// the ring order of [`Timeline::farthest`].
    #[inline]
    pub(crate) fn nearer(&self, s: usize, base: usize) -> Option<usize> {
        if s < base {
            self.highest_below(s).or_else(|| {
                self.highest_below(self.len() as usize)
                    .filter(|&t| t >= base)
            })
        } else {
            self.highest_below(s).filter(|&t| t >= base)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Slots in descending ring order from `base`, by brute force.
    fn naive_order(occupied: &[bool], base: usize) -> Vec<usize> {
        let w = occupied.len();
        (1..=w)
            .map(|d| (base + w - d) % w)
            .filter(|&s| occupied[s])
            .collect()
    }

    /// Random occupancies (sparse and dense, clustered at word and summary boundaries) and
    /// bases: walking `farthest` then `nearer` must list exactly the occupied slots in
    /// descending ring order.
    #[test]
    fn ring_order_matches_brute_force() {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
        for round in 0..240 {
            let w = [8192, 64, 1 << 18][round % 3];
            let mut t = Timeline::new(w);
            let mut occupied = vec![false; w];
            let density = [0.00005, 0.01, 0.3][round / 3 % 3];
            for (s, o) in occupied.iter_mut().enumerate() {
                let edge = s % 4096 < 2 || s % 4096 > 4093 || s % 64 == 63 || s % 65536 == 0;
                if rng.gen_bool(density) || (round % 5 == 0 && edge) {
                    *o = true;
                    t.insert(s, s as u32 * 3);
                }
            }
            // Free a few again, so emptied words must leave the summary.
            for (s, o) in occupied.iter_mut().enumerate() {
                if *o && rng.gen_bool(0.2) {
                    *o = false;
                    t.remove(s);
                }
            }
            let base = [0, 1, 63, w / 2, w - 64, w - 1, rng.gen_range(0..w)][round % 7];
            let mut got = Vec::new();
            let mut cur = t.farthest(base);
            while let Some(s) = cur {
                assert_eq!(t.unit_at(s), s as u32 * 3);
                got.push(s);
                cur = t.nearer(s, base);
            }
            assert_eq!(
                got,
                naive_order(&occupied, base),
                "round {round} base {base}"
            );
        }
    }
}
