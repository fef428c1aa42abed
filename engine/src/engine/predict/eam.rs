//! `eam`: MoE-Infinity's expert activation matrix (Xue et al., "MoE-Infinity", arXiv
//! 2401.14361). A request's matrix counts, per (MoE layer, expert), the tokens of the request
//! that selected it so far. At each router the current request's matrix is compared by
//! cosine similarity with a store of other requests' matrices and the best match's most
//! counted experts of the target layer are predicted.
//!
//! The store: with a profile trace, the full matrix of each of its sequences (fixed); online,
//! the matrices of the other sequences of the run as far as they have gone (only tokens
//! already routed). Both keep at most [`EAM_SEQUENCES`] live sequences of the run, the least
//! recently stepped one giving way (its counts are dropped). With a batch, a group's keys are
//! the union of its sequences' selections (the plan keeps no per-sequence selection), so each
//! sequence of the step counts that union, and a prediction adds the sequences' best-match
//! rows, each normalised to sum 1.

use super::learn::{cut, push_scored, top_experts, wanted, Learning, ProfileGroups};
use super::{History, Predict, PredictInputs, Seen, Target};
use policies::UnitMap;
use std::collections::HashMap;
use traces::KeySpace;

/// Live sequences of the run whose matrices are kept (and, online, the store's size): a
/// bound on memory chosen for this simulator, not a measurement nor MoE-Infinity's setting;
/// traces with at most this many sequences are matched exactly.
pub const EAM_SEQUENCES: usize = 64;

/// One request's expert activation matrix, sparse: counts of the keys it selected.
#[derive(Clone, Debug, Default)]
struct Matrix {
    counts: HashMap<u32, u32>,
    /// Sum of squared counts.
    norm2: u64,
}

impl Matrix {
    fn get(&self, k: u32) -> u32 {
        self.counts.get(&k).copied().unwrap_or(0)
    }

    /// Count key `k` once more.
    fn add(&mut self, k: u32) {
        let c = self.counts.entry(k).or_insert(0);
        self.norm2 += 2 * *c as u64 + 1;
        *c += 1;
    }
}

/// A live sequence of the run: its matrix and its dot products with every stored matrix
/// (the profile's sequences, or online the other live slots).
#[derive(Clone, Debug)]
struct Live {
    sequence: u32,
    matrix: Matrix,
    dots: Vec<u64>,
    /// Step it last took part in.
    last_step: usize,
}

/// The profile's matrices and, per key, the (matrix, count) pairs that hold it.
struct Library {
    matrices: Vec<Matrix>,
    postings: HashMap<u32, Vec<(u32, u32)>>,
}

impl Library {
    fn learn(profile: &dyn ProfileGroups) -> Library {
        let mut matrices = vec![Matrix::default(); profile.sequences()];
        profile.each_group(&mut |g| {
            for &k in g.keys {
                matrices[g.sequences[0] as usize].add(k);
            }
        });
        let mut postings: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
        for (s, m) in matrices.iter().enumerate() {
            for (&k, &c) in &m.counts {
                postings.entry(k).or_default().push((s as u32, c));
            }
        }
        Library { matrices, postings }
    }
}

/// The `eam` predictor.
pub struct Eam<'a> {
    units: &'a UnitMap,
    ks: &'a KeySpace,
    /// `Some` with a profile trace; `None`: online, the store is `live` itself.
    library: Option<Library>,
    live: Vec<Live>,
    scores: Vec<f64>,
    /// The confidence cut ([`PredictInputs::min_score`]).
    min_score: Option<f64>,
    /// The last prediction's unit scores ([`Predict::scores`]).
    rel: Vec<f64>,
}

impl<'a> Eam<'a> {
    pub fn new(i: PredictInputs<'a>) -> Self {
        Eam {
            units: i.units,
            ks: i.ks,
            library: match i.learning {
                Learning::Profile(p) => Some(Library::learn(p)),
                Learning::Online => None,
            },
            live: Vec::new(),
            scores: Vec::new(),
            min_score: i.min_score,
            rel: Vec::new(),
        }
    }

    /// The live slot of `sequence` at `step`, made (or taken from the least recently
    /// stepped sequence, the lowest slot on a tie) when it has none.
    fn slot(&mut self, sequence: u32, step: usize) -> usize {
        if let Some(i) = self.live.iter().position(|l| l.sequence == sequence) {
            self.live[i].last_step = step;
            return i;
        }
        let width = self
            .library
            .as_ref()
            .map_or(EAM_SEQUENCES, |l| l.matrices.len());
        let fresh = Live {
            sequence,
            matrix: Matrix::default(),
            dots: vec![0; width],
            last_step: step,
        };
        if self.live.len() < EAM_SEQUENCES {
            self.live.push(fresh);
            return self.live.len() - 1;
        }
        let i = (0..self.live.len())
            .min_by_key(|&i| (self.live[i].last_step, i))
            .expect("the store is full");
        self.live[i] = fresh;
        if self.library.is_none() {
            for l in &mut self.live {
                l.dots[i] = 0;
            }
        }
        i
    }

    /// Count `g`'s keys in slot `i`'s matrix and update its dot products.
    fn count(&mut self, i: usize, g: &Seen<'_>) {
        for &k in g.keys {
            self.live[i].matrix.add(k);
            match &self.library {
                Some(lib) => {
                    for &(s, c) in lib.postings.get(&k).map_or(&[][..], Vec::as_slice) {
                        self.live[i].dots[s as usize] += c as u64;
                    }
                }
                None => {
                    for j in (0..self.live.len()).filter(|&j| j != i) {
                        let c = self.live[j].matrix.get(k) as u64;
                        self.live[i].dots[j] += c;
                        self.live[j].dots[i] += c;
                    }
                }
            }
        }
    }

    /// The stored matrix most similar (cosine) to slot `i`'s, `None` when none shares a key.
    fn best_match(&self, i: usize) -> Option<&Matrix> {
        let me = &self.live[i];
        let stored = |j: usize| match &self.library {
            Some(lib) => Some(&lib.matrices[j]),
            None => (j != i && j < self.live.len()).then(|| &self.live[j].matrix),
        };
        let mut best: Option<(f64, &Matrix)> = None;
        for (j, &dot) in me.dots.iter().enumerate() {
            let Some(m) = stored(j).filter(|_| dot > 0) else {
                continue;
            };
            let cos = dot as f64 / ((me.matrix.norm2 as f64) * (m.norm2 as f64)).sqrt();
            if best.is_none_or(|(b, _)| cos > b) {
                best = Some((cos, m));
            }
        }
        best.map(|(_, m)| m)
    }
}

impl Predict for Eam<'_> {
    fn observe(&mut self, h: &History<'_>) {
        let g = h.current();
        for &s in g.sequences {
            let i = self.slot(s, g.step);
            self.count(i, &g);
        }
    }

    fn predict(&mut self, h: &History<'_>, t: Target, out: &mut Vec<u32>) {
        let (cur, ks, l) = (h.current(), self.ks, t.moe_layer);
        let mut scores = std::mem::take(&mut self.scores);
        scores.clear();
        scores.resize(ks.experts[l] as usize, 0.0);
        for &s in cur.sequences {
            let Some(i) = self.live.iter().position(|x| x.sequence == s) else {
                continue;
            };
            let Some(m) = self.best_match(i) else {
                continue;
            };
            let row: Vec<u32> = (0..ks.experts[l]).map(|e| m.get(ks.key(l, e))).collect();
            let total: u64 = row.iter().map(|&c| c as u64).sum();
            for (a, &c) in scores.iter_mut().zip(&row).filter(|_| total > 0) {
                *a += c as f64 / total as f64;
            }
        }
        let mut top = top_experts(&scores, wanted(ks, &cur, l));
        cut(&mut top, |e| scores[e as usize], self.min_score);
        push_scored(
            self.units,
            ks,
            l,
            &top,
            |e| scores[e as usize],
            out,
            &mut self.rel,
        );
        self.scores = scores;
    }

    fn scores(&self) -> Option<&[f64]> {
        Some(&self.rel)
    }
}
