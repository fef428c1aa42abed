//! Co-activation counts accumulated token by token, for a pass that streams a profile trace
//! file: per MoE layer, the tokens in which each pair of experts is selected together (the
//! edges the `coact` chunk order groups by, [`policies::mechanisms::ProfileStats::coact`]).
//! They are sums over tokens, so the file's order gives what the in-memory builder gives.

use anyhow::Result;
use policies::mechanisms::order::{CoactEdge, DENSE_COACT_MAX_EXPERTS};
use std::collections::HashMap;
use traces::KeySpace;

/// One layer's pair counts: the upper triangle of its E x E matrix (pairs a < b, row-major)
/// up to [`DENSE_COACT_MAX_EXPERTS`] experts, as the in-memory builder's dense matrix; a map
/// of the pairs seen above it, as its sparse one (which also counts a pair of an expert with
/// itself, should a record repeat one).
enum Pairs {
    Dense { experts: usize, counts: Vec<u64> },
    Sparse(HashMap<(u16, u16), u64>),
}

/// Index of pair (a, b), a < b, in the upper triangle of an `e` x `e` matrix.
#[inline]
fn tri_index(e: usize, a: usize, b: usize) -> usize {
    a * (2 * e - a - 1) / 2 + (b - a - 1)
}

impl Pairs {
    fn new(experts: usize) -> Pairs {
        if experts <= DENSE_COACT_MAX_EXPERTS {
            Pairs::Dense {
                experts,
                counts: vec![0; experts * experts.saturating_sub(1) / 2],
            }
        } else {
            Pairs::Sparse(HashMap::new())
        }
    }

    /// Count every pair of one token's selection `sel`.
    #[inline]
    fn step(&mut self, sel: &[u16]) {
        for (i, &x) in sel.iter().enumerate() {
            for &y in &sel[i + 1..] {
                let (a, b) = (x.min(y), x.max(y));
                match self {
                    Pairs::Dense { experts, counts } if a < b => {
                        counts[tri_index(*experts, a as usize, b as usize)] += 1
                    }
                    Pairs::Dense { .. } => {}
                    Pairs::Sparse(m) => *m.entry((a, b)).or_default() += 1,
                }
            }
        }
    }

    /// The pairs selected together at least once, sorted by (a, b).
    fn edges(self) -> Vec<CoactEdge> {
        match self {
            Pairs::Dense { experts, counts } => {
                let mut edges = Vec::new();
                for a in 0..experts {
                    for b in a + 1..experts {
                        let tokens = counts[tri_index(experts, a, b)];
                        if tokens > 0 {
                            edges.push(CoactEdge {
                                a: a as u16,
                                b: b as u16,
                                tokens,
                            });
                        }
                    }
                }
                edges
            }
            Pairs::Sparse(m) => {
                let mut edges: Vec<CoactEdge> = m
                    .into_iter()
                    .map(|((a, b), tokens)| CoactEdge { a, b, tokens })
                    .collect();
                edges.sort_by_key(|ed| (ed.a, ed.b));
                edges
            }
        }
    }
}

/// Every MoE layer's pair counts over the token records stepped.
pub struct CoactCounts {
    /// Record slice of MoE layer m: `sel[m] .. sel[m + 1]`.
    sel: Vec<usize>,
    layers: Vec<Pairs>,
}

impl CoactCounts {
    /// Zero counts for traces of key space `ks`; refused with a clear error when the dense
    /// triangles (8 bytes a pair, every layer at once) cannot fit in this machine's memory.
    pub fn new(ks: &KeySpace) -> Result<CoactCounts> {
        let dense: u128 = ks
            .experts
            .iter()
            .map(|&e| e as u128)
            .filter(|&e| e <= DENSE_COACT_MAX_EXPERTS as u128)
            .map(|e| e * e.saturating_sub(1) / 2 * 8)
            .sum();
        traces::resources::check_memory(
            "the co-activation counts of every MoE layer (8 bytes per expert pair)",
            dense,
            "use the hot order (eN:hot) or a smaller model's trace",
        )?;
        Ok(CoactCounts {
            sel: ks.sel_offsets.clone(),
            layers: ks.experts.iter().map(|&e| Pairs::new(e as usize)).collect(),
        })
    }

    /// Count one token record.
    #[inline]
    pub fn step(&mut self, record: &[u16]) {
        for (m, pairs) in self.layers.iter_mut().enumerate() {
            pairs.step(&record[self.sel[m]..self.sel[m + 1]]);
        }
    }

    /// Each MoE layer's edges, sorted by (a, b).
    pub fn finish(self) -> Vec<Vec<CoactEdge>> {
        self.layers.into_iter().map(Pairs::edges).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_triangle_index_enumerates_pairs_in_order() {
        let e = 5;
        let mut i = 0;
        for a in 0..e {
            for b in a + 1..e {
                assert_eq!(tri_index(e, a, b), i, "({a}, {b})");
                i += 1;
            }
        }
        assert_eq!(i, e * (e - 1) / 2);
    }

    #[test]
    fn pairs_are_counted_per_token_by_hand() {
        // one layer of 4 experts, top-3: tokens {0,1,2} and {2,1,3}
        let model = traces::ModelSpec::uniform("t", 1, 4, 3);
        let mut c = CoactCounts::new(&KeySpace::new(&model)).unwrap();
        c.step(&[0, 1, 2]);
        c.step(&[2, 1, 3]);
        let e = |a, b, tokens| CoactEdge { a, b, tokens };
        let want = vec![e(0, 1, 1), e(0, 2, 1), e(1, 2, 2), e(1, 3, 1), e(2, 3, 1)];
        assert_eq!(c.finish(), vec![want]);
    }
}
