//! Uniformly random victim.

use super::registry::PolicyEntry;
use super::{Admission, At, EvictionPolicy, Exhausted, Protect};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// The registry entry of `random`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "random",
    aliases: &[],
    debug_name: "Random",
    summary: "Uniformly random victim (seeded PCG)",
    help_note: Some("seeded"),
    needs_profile: false,
    offline: false,
    monotone_in_budget: false,
    in_all: true,
    build: |s| Ok(Box::new(Random::new(s.units, s.seed, s.pool))),
};

/// Random: the victim is drawn uniformly among the unprotected resident units, from a PCG
/// generator seeded with (`seed`, stream = pool index), so results are reproducible and the
/// per-layer pools draw independent sequences.
#[derive(Clone, Debug)]
pub struct Random {
    /// Resident units in arbitrary order; `slot[u]` is u's index in it.
    resident: Vec<u32>,
    slot: Vec<u32>,
    rng: Pcg64,
    /// Draws and entries scanned so far.
    steps: u64,
    exhausted: Exhausted,
    /// The unprotected positions of `resident` in the current group, once a search fell back
    /// to an exact draw in it; kept up to date by the group's evictions.
    open: Option<OpenPositions>,
}

/// The positions of `resident` holding unprotected units in group `group`, as a Fenwick tree
/// of 0/1 flags, so that "the k-th unprotected position" costs O(log n) and the exact draw
/// picks what the ascending list of those positions would give at index k.
#[derive(Clone, Debug)]
struct OpenPositions {
    group: u32,
    /// 1-based Fenwick tree over the flags.
    tree: Vec<u32>,
    flags: Vec<bool>,
    count: usize,
}

impl OpenPositions {
    fn new(group: u32, flags: Vec<bool>) -> Self {
        let n = flags.len();
        let mut tree = vec![0u32; n + 1];
        for i in 1..=n {
            tree[i] += flags[i - 1] as u32;
            let parent = i + (i & i.wrapping_neg());
            if parent <= n {
                tree[parent] += tree[i];
            }
        }
        let count = flags.iter().filter(|&&f| f).count();
        OpenPositions {
            group,
            tree,
            flags,
            count,
        }
    }

    fn set(&mut self, i: usize, open: bool) {
        if self.flags[i] == open {
            return;
        }
        self.flags[i] = open;
        let (add, mut j) = (open, i + 1);
        if open {
            self.count += 1;
        } else {
            self.count -= 1;
        }
        while j < self.tree.len() {
            if add {
                self.tree[j] += 1;
            } else {
                self.tree[j] -= 1;
            }
            j += j & j.wrapping_neg();
        }
    }

    /// The position of the `k`-th (0-based) open flag; `k < count`.
    fn kth(&self, k: usize) -> usize {
        let n = self.flags.len();
        let (mut pos, mut rest) = (0usize, k as u32);
        let mut step = n.next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next <= n && self.tree[next] <= rest {
                rest -= self.tree[next];
                pos = next;
            }
            step >>= 1;
        }
        pos
    }
}

/// Draws that may hit a protected unit before falling back to an exact draw among the
/// unprotected ones (keeps the common case O(1) and the result uniform either way).
const REJECTION_TRIES: usize = 8;

impl Random {
    /// An empty random cache over unit ids `0..units`; `seed` and `stream` pick the sequence.
    pub fn new(units: usize, seed: u64, stream: u64) -> Self {
        let mut seed_bytes = [0u8; 32];
        seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
        seed_bytes[16..24].copy_from_slice(&stream.to_le_bytes());
        Random {
            resident: Vec::new(),
            slot: vec![u32::MAX; units],
            rng: Pcg64::from_seed(seed_bytes),
            steps: 0,
            exhausted: Exhausted::default(),
            open: None,
        }
    }

    fn remove_at(&mut self, i: usize) -> u32 {
        let last = self.resident.len() - 1;
        let v = self.resident.swap_remove(i);
        if let Some(&moved) = self.resident.get(i) {
            self.slot[moved as usize] = i as u32;
        }
        self.slot[v as usize] = u32::MAX;
        if let Some(open) = &mut self.open {
            // the last position's unit moved to `i`, and the last position is gone
            let moved_open = open.flags[last];
            open.set(last, false);
            if i < last {
                open.set(i, moved_open);
            } else {
                open.set(i, false);
            }
        }
        v
    }
}

impl EvictionPolicy for Random {
    #[inline]
    fn on_hit(&mut self, _u: u32, _at: At) {
        // an access may protect a unit: the open positions are recomputed when next needed
        self.open = None;
    }

    #[inline]
    fn on_miss(&mut self, u: u32, _at: At) -> Admission {
        self.exhausted.reset();
        self.open = None;
        self.slot[u as usize] = self.resident.len() as u32;
        self.resident.push(u);
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        let n = self.resident.len();
        if n == 0 {
            return None;
        }
        for _ in 0..REJECTION_TRIES {
            self.steps += 1;
            let i = self.rng.gen_range(0..n);
            if !protect.is(self.resident[i]) {
                return Some(self.remove_at(i));
            }
        }
        // Known to be all protected: the draws above were still made, so the generator's
        // sequence (and every later victim) is the same as with the scan.
        if self.exhausted.covers(&protect) {
            return None;
        }
        // An exact draw among the unprotected positions, in ascending order: the positions
        // are found once per group (O(n)) and kept up to date by its evictions (O(log n)).
        let group = protect.group();
        if self.open.as_ref().is_none_or(|o| o.group != group) {
            self.steps += n as u64;
            let flags = self.resident.iter().map(|&u| !protect.is(u)).collect();
            self.open = Some(OpenPositions::new(group, flags));
        }
        let open = self.open.as_ref().expect("just built");
        if open.count == 0 {
            self.exhausted.mark(&protect);
            return None;
        }
        let k = self.rng.gen_range(0..open.count);
        let i = open.kth(k);
        self.steps += open.tree.len().ilog2() as u64 + 1;
        Some(self.remove_at(i))
    }

    fn work(&self) -> u64 {
        self.steps
    }
}
