//! Co-activation counts accumulated token by token, for a pass that streams a profile trace
//! file: per MoE layer, the tokens in which each pair of experts is selected together (the
//! edges the `coact` chunk order groups by, [`policies::mechanisms::ProfileStats::coact`]).
//! They are sums over tokens, so the file's order gives what the in-memory builder gives.

use anyhow::Result;
use policies::mechanisms::order::{CoactEdge, PairCounts, DENSE_COACT_MAX_EXPERTS};
use traces::KeySpace;

/// Every MoE layer's pair counts over the token records stepped.
pub struct CoactCounts {
    /// Record slice of MoE layer m: `sel[m] .. sel[m + 1]`.
    sel: Vec<usize>,
    layers: Vec<PairCounts>,
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
            layers: ks
                .experts
                .iter()
                .map(|&e| PairCounts::new(e as usize))
                .collect(),
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
        self.layers.into_iter().map(PairCounts::edges).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
