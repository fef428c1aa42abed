//! Exact weighted draws without replacement for the generator's fallback: a Fenwick (binary
//! indexed) tree of the weights still in play, so a draw and a removal cost O(log E) instead of
//! the O(E) a weighted index rebuilt per draw costs. Used for the rest of a selection once
//! rejection sampling keeps hitting chosen experts (high skew, or top-k near the expert count).

use rand::Rng;
use rand_pcg::Pcg64;

/// Weights by index (popularity rank), with removed indices at weight 0.
pub(super) struct RemainingWeights {
    /// Fenwick tree: `tree[i]` (1-based) sums the weights of indices (i - lowbit(i), i].
    tree: Vec<f64>,
    /// The weights themselves, 0 once removed (the exact value a removal subtracts).
    weights: Vec<f64>,
}

impl RemainingWeights {
    /// The weights `weights[i]`, except those with `removed(i)`, in O(E).
    pub(super) fn new(weights: &[f64], removed: impl Fn(usize) -> bool) -> Self {
        let weights: Vec<f64> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| if removed(i) { 0.0 } else { w })
            .collect();
        let n = weights.len();
        let mut tree = vec![0.0; n + 1];
        for i in 1..=n {
            tree[i] += weights[i - 1];
            let parent = i + (i & i.wrapping_neg());
            if parent <= n {
                tree[parent] += tree[i];
            }
        }
        RemainingWeights { tree, weights }
    }

    /// Takes index `i` out of play (no-op if it already is).
    pub(super) fn remove(&mut self, i: usize) {
        let w = std::mem::take(&mut self.weights[i]);
        let mut j = i + 1;
        while j < self.tree.len() {
            self.tree[j] -= w;
            j += j & j.wrapping_neg();
        }
    }

    /// One index drawn with probability proportional to its weight among those in play; `None`
    /// when none has weight left.
    pub(super) fn sample(&self, rng: &mut Pcg64) -> Option<usize> {
        let n = self.weights.len();
        let total: f64 = {
            let (mut s, mut j) = (0.0, n);
            while j > 0 {
                s += self.tree[j];
                j -= j & j.wrapping_neg();
            }
            s
        };
        if total <= 0.0 || !total.is_finite() {
            return None;
        }
        // Descend to the first index whose prefix sum exceeds u.
        let mut u = rng.gen::<f64>() * total;
        let (mut pos, mut step) = (0usize, n.next_power_of_two());
        while step > 0 {
            let next = pos + step;
            if next <= n && self.tree[next] <= u {
                u -= self.tree[next];
                pos = next;
            }
            step >>= 1;
        }
        // Subtractions round: never return an index out of play (weight 0); take the nearest
        // one in play instead, which only a rounding-width sliver of u can reach.
        let hit = pos.min(n - 1);
        if self.weights[hit] > 0.0 {
            return Some(hit);
        }
        (hit..n)
            .chain((0..hit).rev())
            .find(|&i| self.weights[i] > 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn draws_follow_the_remaining_weights() {
        // weights 1, 2, 3, 4 with index 2 removed: probabilities 1/7, 2/7, 0, 4/7
        let mut r = RemainingWeights::new(&[1.0, 2.0, 3.0, 4.0], |i| i == 2);
        let mut rng = Pcg64::seed_from_u64(7);
        let mut counts = [0u32; 4];
        let n = 70_000;
        for _ in 0..n {
            counts[r.sample(&mut rng).unwrap()] += 1;
        }
        assert_eq!(counts[2], 0);
        for (i, want) in [(0, 1.0 / 7.0), (1, 2.0 / 7.0), (3, 4.0 / 7.0)] {
            let got = counts[i] as f64 / n as f64;
            // binomial standard deviation at n = 70,000 is below 0.0019; allow 4 of them
            assert!((got - want).abs() < 0.0076, "index {i}: {got} vs {want}");
        }
        // removing the rest leaves only index 1, then nothing
        r.remove(0);
        r.remove(3);
        r.remove(3);
        assert!((0..100).all(|_| r.sample(&mut rng) == Some(1)));
        r.remove(1);
        assert_eq!(r.sample(&mut rng), None);
    }

    #[test]
    fn every_index_is_reachable_at_any_size() {
        // sizes that are and are not powers of two; each draw then removal empties the tree
        for n in [1usize, 2, 3, 5, 8, 13, 64, 100] {
            let w: Vec<f64> = (1..=n).map(|r| (r as f64).powf(-1.2)).collect();
            let mut r = RemainingWeights::new(&w, |_| false);
            let mut rng = Pcg64::seed_from_u64(n as u64);
            let mut seen = vec![false; n];
            for _ in 0..n {
                let i = r.sample(&mut rng).unwrap();
                assert!(!seen[i], "index {i} drawn twice at n = {n}");
                seen[i] = true;
                r.remove(i);
            }
            assert_eq!(r.sample(&mut rng), None);
        }
    }
}
