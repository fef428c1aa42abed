//! Uniformly random victim.

use super::registry::PolicyEntry;
use super::{Admission, At, EvictionPolicy, Protect};
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
        }
    }

    fn remove_at(&mut self, i: usize) -> u32 {
        let v = self.resident.swap_remove(i);
        if let Some(&moved) = self.resident.get(i) {
            self.slot[moved as usize] = i as u32;
        }
        self.slot[v as usize] = u32::MAX;
        v
    }
}

impl EvictionPolicy for Random {
    #[inline]
    fn on_hit(&mut self, _u: u32, _at: At) {}

    #[inline]
    fn on_miss(&mut self, u: u32, _at: At) -> Admission {
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
            let i = self.rng.gen_range(0..n);
            if !protect.is(self.resident[i]) {
                return Some(self.remove_at(i));
            }
        }
        let open: Vec<usize> = (0..n).filter(|&i| !protect.is(self.resident[i])).collect();
        if open.is_empty() {
            return None;
        }
        let i = open[self.rng.gen_range(0..open.len())];
        Some(self.remove_at(i))
    }
}
