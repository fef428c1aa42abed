//! Profile statistics accumulated token by token, for passes that stream a trace file: the
//! selection counts the `hot` chunk order ranks experts by, and the per-unit statistics the
//! pinning policies rank units by. Both are sums over tokens, so the file's order (sequence by
//! sequence) gives what the in-memory builders give over the round-robin order.

use crate::cache::ProfileStats as UnitProfile;
use policies::mechanisms::ProfileStats as KeyProfile;
use policies::UnitMap;
use traces::KeySpace;

/// Key of each id position of a token record: `base[i] + id`.
fn key_bases(ks: &KeySpace) -> Vec<u32> {
    (0..ks.num_moe_layers())
        .flat_map(|m| vec![ks.offsets[m]; ks.top_k[m] as usize])
        .collect()
}

/// Selections of each key ([`KeyProfile::counts`]), without co-activation.
pub struct KeyCounts {
    base: Vec<u32>,
    experts: Vec<u16>,
    counts: Vec<u64>,
}

impl KeyCounts {
    /// Counters for traces of key space `ks`, all zero.
    pub fn new(ks: &KeySpace) -> KeyCounts {
        KeyCounts {
            base: key_bases(ks),
            experts: ks.experts.clone(),
            counts: vec![0; ks.num_keys()],
        }
    }

    /// Count one token record.
    #[inline]
    pub fn step(&mut self, record: &[u16]) {
        for (b, &id) in self.base.iter().zip(record) {
            self.counts[(b + id as u32) as usize] += 1;
        }
    }

    /// The statistics of every token counted.
    pub fn finish(self) -> KeyProfile {
        KeyProfile {
            experts: self.experts,
            counts: self.counts,
            coact: None,
        }
    }
}

/// The statistics of a batch-1 stream ([`UnitProfile::from_stream`]): groups (token, MoE
/// layer) accessing each unit, and whether each unit is accessed in every token.
pub struct UnitCounts<'a> {
    map: &'a UnitMap,
    /// Key base of MoE layer m, and its slice of a record.
    offsets: Vec<u32>,
    sel: Vec<usize>,
    counts: Vec<u64>,
    tokens_with: Vec<u64>,
    group_stamp: Vec<u32>,
    token_stamp: Vec<u32>,
    groups: u32,
    token_gen: u32,
    tokens: u64,
}

impl<'a> UnitCounts<'a> {
    /// Counters over `map`'s units for traces of key space `ks`, all zero.
    pub fn new(ks: &KeySpace, map: &'a UnitMap) -> UnitCounts<'a> {
        let n = map.num_units();
        UnitCounts {
            map,
            offsets: ks.offsets[..ks.num_moe_layers()].to_vec(),
            sel: ks.sel_offsets.clone(),
            counts: vec![0; n],
            tokens_with: vec![0; n],
            group_stamp: vec![0; n],
            token_stamp: vec![0; n],
            groups: 0,
            token_gen: 0,
            tokens: 0,
        }
    }

    /// Count one token record.
    pub fn step(&mut self, record: &[u16]) {
        self.tokens += 1;
        // stamps are generation numbers from 1; restart them before they would wrap
        if self.token_gen == u32::MAX || self.groups >= u32::MAX - self.offsets.len() as u32 {
            self.restart_stamps();
        }
        self.token_gen += 1;
        let t = self.token_gen;
        for (m, &base) in self.offsets.iter().enumerate() {
            self.groups += 1;
            let g = self.groups;
            for &e in &record[self.sel[m]..self.sel[m + 1]] {
                for u in self.map.units_of(base + e as u32) {
                    let u = u as usize;
                    if self.group_stamp[u] != g {
                        self.group_stamp[u] = g;
                        self.counts[u] += 1;
                        if self.token_stamp[u] != t {
                            self.token_stamp[u] = t;
                            self.tokens_with[u] += 1;
                        }
                    }
                }
            }
        }
    }

    /// Zero the stamps (only the current token's matter, and it is over).
    #[cold]
    fn restart_stamps(&mut self) {
        self.group_stamp.fill(0);
        self.token_stamp.fill(0);
        self.groups = 0;
        self.token_gen = 0;
    }

    /// The statistics of every token counted.
    pub fn finish(self) -> UnitProfile {
        let steps = self.tokens;
        UnitProfile {
            counts: self.counts,
            always_on: self
                .tokens_with
                .iter()
                .map(|&n| steps > 0 && n == steps)
                .collect(),
            tokens: self.tokens,
        }
    }
}
