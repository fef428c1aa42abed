//! Chunk orders: in which order a layer's experts are packed into chunks or regions.
//!
//! - `index`: expert id order.
//! - `hot`: descending selection count in the profile trace, ties to the lower expert id.
//! - `coact`: experts often selected together share a chunk. The co-activation graph of a
//!   layer has one node per expert and an edge of weight w between two experts selected together
//!   in w tokens of the profile trace (a [`petgraph`] `UnGraph`). petgraph 0.6 offers only
//!   cardinality matchings (`greedy_matching`, `maximum_matching`), no weighted one, so:
//!   - N = 2: greedy maximum-weight matching: edges in descending weight (ties: lower hot rank
//!     of the pair's hotter expert, then of the other), an edge is taken when both ends are
//!     still free. This is the classic 1/2-approximation of a maximum-weight matching.
//!     Experts left unmatched are paired in hot order.
//!   - N > 2: greedy grouping: the hottest unassigned expert seeds a group; the unassigned
//!     expert with the largest summed edge weight to the group's members joins next (ties: the
//!     hotter one), until the group holds N experts or none is left.
//!
//!   Groups are listed in the order they were formed (N > 2), or by the hot rank of their
//!   hotter member (N = 2).

use petgraph::graph::{NodeIndex, UnGraph};
use petgraph::visit::EdgeRef;
use std::collections::HashMap;
use traces::{KeySpace, PhaseSel, Trace};

/// How a layer's experts are ordered before being cut into chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChunkOrder {
    /// Expert id order.
    Index,
    /// Descending selection count in the profile trace; ties to the lower expert id.
    Hot,
    /// Co-activation grouping (see the module doc).
    Coact,
}

impl ChunkOrder {
    /// The spec suffix: `index`, `hot` or `coact`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChunkOrder::Index => "index",
            ChunkOrder::Hot => "hot",
            ChunkOrder::Coact => "coact",
        }
    }

    /// Parse a spec suffix.
    pub fn parse(s: &str) -> Option<ChunkOrder> {
        match s {
            "index" => Some(ChunkOrder::Index),
            "hot" => Some(ChunkOrder::Hot),
            "coact" => Some(ChunkOrder::Coact),
            _ => None,
        }
    }
}

/// One co-activation edge of a layer: experts `a < b` selected together in `tokens` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoactEdge {
    /// The lower expert id of the pair.
    pub a: u16,
    /// The higher expert id of the pair.
    pub b: u16,
    /// Tokens of the profile trace in which the layer's router selected both.
    pub tokens: u64,
}

/// Selection statistics of a profile trace, in the key numbering of its [`KeySpace`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileStats {
    /// Experts of each MoE layer (to check the profile against the evaluated trace).
    pub experts: Vec<u16>,
    /// Selections of each key over the profile's tokens (of the chosen phases).
    pub counts: Vec<u64>,
    /// Per MoE layer, every pair selected together at least once, sorted by (a, b); present
    /// only when asked for (it costs top-k^2 / 2 updates per token and layer).
    pub coact: Option<Vec<Vec<CoactEdge>>>,
}

/// Above this many experts per layer the co-activation counts use a hash map instead of a
/// dense E x E matrix (4096^2 x 8 bytes = 128 MiB would be the dense size).
pub const DENSE_COACT_MAX_EXPERTS: usize = 2048;

impl ProfileStats {
    /// Count selections (and, with `coactivation`, pairs) over the tokens of `phases`.
    pub fn new(trace: &Trace, phases: PhaseSel, coactivation: bool) -> ProfileStats {
        let ks = trace.keyspace();
        let stride = ks.ids_per_token();
        let mut counts = vec![0u64; ks.num_keys()];
        // key base of each position inside a token record
        let base: Vec<u32> = (0..ks.num_moe_layers())
            .flat_map(|m| vec![ks.offsets[m]; ks.top_k[m] as usize])
            .collect();
        for seq in &trace.sequences {
            for &p in phases.phases() {
                for rec in seq.block(p).ids.chunks_exact(stride.max(1)) {
                    for (b, &id) in base.iter().zip(rec) {
                        counts[(b + id as u32) as usize] += 1;
                    }
                }
            }
        }
        let coact = coactivation.then(|| {
            (0..ks.num_moe_layers())
                .map(|m| layer_coactivation(trace, &ks, phases, m))
                .collect()
        });
        ProfileStats {
            experts: ks.experts.clone(),
            counts,
            coact,
        }
    }

    /// Experts of MoE layer `m` of `ks` in hot order: descending count, ties to the lower id.
    pub fn hot_order(&self, ks: &KeySpace, m: usize) -> Vec<u16> {
        let base = ks.offsets[m] as usize;
        let mut ids: Vec<u16> = (0..ks.experts[m]).collect();
        ids.sort_by(|&x, &y| {
            self.counts[base + y as usize]
                .cmp(&self.counts[base + x as usize])
                .then(x.cmp(&y))
        });
        ids
    }

    /// Co-activation groups of at most `n` experts for MoE layer `m` (see the module doc);
    /// `None` when the profile has no co-activation counts.
    pub fn coact_groups(&self, ks: &KeySpace, m: usize, n: usize) -> Option<Vec<Vec<u16>>> {
        let edges = &self.coact.as_ref()?[m];
        let hot = self.hot_order(ks, m);
        let e = ks.experts[m] as usize;
        let mut rank = vec![0usize; e];
        for (r, &x) in hot.iter().enumerate() {
            rank[x as usize] = r;
        }
        let mut g: UnGraph<u16, u64> = UnGraph::with_capacity(e, edges.len());
        for x in 0..e {
            g.add_node(x as u16);
        }
        for ed in edges {
            g.add_edge(
                NodeIndex::new(ed.a as usize),
                NodeIndex::new(ed.b as usize),
                ed.tokens,
            );
        }
        Some(if n <= 1 {
            hot.iter().map(|&x| vec![x]).collect()
        } else if n == 2 {
            greedy_matching(&g, &hot, &rank)
        } else {
            greedy_groups(&g, &hot, &rank, n)
        })
    }
}

/// Pairs of MoE layer `m` selected together, counted over tokens.
fn layer_coactivation(trace: &Trace, ks: &KeySpace, phases: PhaseSel, m: usize) -> Vec<CoactEdge> {
    let stride = ks.ids_per_token().max(1);
    let (lo, hi) = (ks.sel_offsets[m], ks.sel_offsets[m + 1]);
    let mut pairs = PairCounts::new(ks.experts[m] as usize);
    for s in &trace.sequences {
        for &p in phases.phases() {
            for rec in s.block(p).ids.chunks_exact(stride) {
                pairs.step(&rec[lo..hi]);
            }
        }
    }
    pairs.edges()
}

/// One MoE layer's co-activation counts, token by token: the upper triangle of its E x E
/// matrix (pairs a < b, row-major, 8 bytes a pair) up to [`DENSE_COACT_MAX_EXPERTS`]
/// experts; above it a map of the pairs seen (which also counts a pair of an expert with
/// itself, should a record repeat one, and never emits it as an edge of the dense form).
pub enum PairCounts {
    /// The triangle's counts, pairs (a, b) with a < b in row-major order.
    Dense { experts: usize, counts: Vec<u64> },
    /// The count of each pair (a <= b) seen.
    Sparse(HashMap<(u16, u16), u64>),
}

/// Index of pair (a, b), a < b, in the upper triangle of an `e` x `e` matrix.
#[inline]
fn tri_index(e: usize, a: usize, b: usize) -> usize {
    a * (2 * e - a - 1) / 2 + (b - a - 1)
}

impl PairCounts {
    /// Zero counts for a layer of `experts` experts.
    pub fn new(experts: usize) -> PairCounts {
        if experts <= DENSE_COACT_MAX_EXPERTS {
            PairCounts::Dense {
                experts,
                counts: vec![0; experts * experts.saturating_sub(1) / 2],
            }
        } else {
            PairCounts::Sparse(HashMap::new())
        }
    }

    /// Count every pair of one token's selection `sel`.
    #[inline]
    pub fn step(&mut self, sel: &[u16]) {
        for (i, &x) in sel.iter().enumerate() {
            for &y in &sel[i + 1..] {
                let (a, b) = (x.min(y), x.max(y));
                match self {
                    PairCounts::Dense { experts, counts } if a < b => {
                        counts[tri_index(*experts, a as usize, b as usize)] += 1
                    }
                    PairCounts::Dense { .. } => {}
                    PairCounts::Sparse(m) => *m.entry((a, b)).or_default() += 1,
                }
            }
        }
    }

    /// The pairs selected together at least once, sorted by (a, b).
    pub fn edges(self) -> Vec<CoactEdge> {
        match self {
            PairCounts::Dense { experts, counts } => {
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
            PairCounts::Sparse(m) => {
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

/// Greedy maximum-weight matching, then leftover experts paired in hot order.
fn greedy_matching(g: &UnGraph<u16, u64>, hot: &[u16], rank: &[usize]) -> Vec<Vec<u16>> {
    let mut order: Vec<(u64, usize, usize, u16, u16)> = g
        .edge_indices()
        .map(|ei| {
            let (x, y) = g.edge_endpoints(ei).expect("edge index from the graph");
            let (x, y) = (g[x], g[y]);
            let (p, q) = if rank[x as usize] < rank[y as usize] {
                (x, y)
            } else {
                (y, x)
            };
            (g[ei], rank[p as usize], rank[q as usize], p, q)
        })
        .collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut mate: Vec<Option<u16>> = vec![None; hot.len()];
    for &(_, _, _, p, q) in &order {
        if mate[p as usize].is_none() && mate[q as usize].is_none() {
            mate[p as usize] = Some(q);
            mate[q as usize] = Some(p);
        }
    }
    let mut done = vec![false; hot.len()];
    let mut groups = Vec::new();
    let mut single: Option<u16> = None;
    for &x in hot {
        if done[x as usize] {
            continue;
        }
        done[x as usize] = true;
        match mate[x as usize] {
            Some(y) => {
                done[y as usize] = true;
                groups.push(vec![x, y]);
            }
            None => match single.take() {
                Some(s) => groups.push(vec![s, x]),
                None => single = Some(x),
            },
        }
    }
    groups.extend(single.map(|s| vec![s]));
    // leftover pairs were pushed when their second member came up; list all by hotter member
    groups.sort_by_key(|grp| rank[grp[0] as usize]);
    groups
}

/// Seeded greedy grouping into groups of `n` (see the module doc).
fn greedy_groups(g: &UnGraph<u16, u64>, hot: &[u16], rank: &[usize], n: usize) -> Vec<Vec<u16>> {
    let e = hot.len();
    let mut assigned = vec![false; e];
    let mut affinity = vec![0u64; e];
    let mut groups = Vec::new();
    for &seed in hot {
        if assigned[seed as usize] {
            continue;
        }
        affinity.iter_mut().for_each(|a| *a = 0);
        let mut group = Vec::with_capacity(n);
        let mut member = seed;
        loop {
            assigned[member as usize] = true;
            group.push(member);
            for ed in g.edges(NodeIndex::new(member as usize)) {
                let other = if ed.source().index() == member as usize {
                    ed.target().index()
                } else {
                    ed.source().index()
                };
                affinity[other] += *ed.weight();
            }
            if group.len() == n {
                break;
            }
            // hot order scan keeps ties on the hotter expert
            let next = hot
                .iter()
                .filter(|&&c| !assigned[c as usize])
                .max_by(|&&a, &&b| {
                    affinity[a as usize]
                        .cmp(&affinity[b as usize])
                        .then(rank[b as usize].cmp(&rank[a as usize]))
                });
            match next {
                Some(&c) => member = c,
                None => break,
            }
        }
        groups.push(group);
    }
    groups
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
    use crate::mechanisms::testutil::trace;

    /// 1 layer, 6 experts, top-3. Counts: 0:3, 1:3, 2:2, 3:1, 4:1, 5:2.
    fn t() -> Trace {
        trace(
            1,
            6,
            &[
                vec![vec![0, 1, 2]],
                vec![vec![0, 1, 5]],
                vec![vec![0, 1, 3]],
                vec![vec![2, 4, 5]],
            ],
        )
    }

    #[test]
    fn hot_order_breaks_ties_to_lower_id() {
        let tr = t();
        let p = ProfileStats::new(&tr, PhaseSel::Decode, false);
        assert_eq!(p.counts, vec![3, 3, 2, 1, 1, 2]);
        assert_eq!(p.hot_order(&tr.keyspace(), 0), vec![0, 1, 2, 5, 3, 4]);
    }

    #[test]
    fn coactivation_counts_pairs_per_token() {
        let tr = t();
        let p = ProfileStats::new(&tr, PhaseSel::Decode, true);
        let e = &p.coact.as_ref().unwrap()[0];
        let w = |a, b| {
            e.iter()
                .find(|x| x.a == a && x.b == b)
                .map_or(0, |x| x.tokens)
        };
        assert_eq!(w(0, 1), 3);
        assert_eq!(w(2, 5), 1);
        assert_eq!(w(0, 4), 0);
        // 4 tokens x 3 pairs = 12 pair occurrences, (0,1) in three of them: 10 distinct edges
        assert_eq!(e.len(), 10);
    }

    #[test]
    fn greedy_matching_pairs_strongest_first() {
        let tr = t();
        let ks = tr.keyspace();
        let p = ProfileStats::new(&tr, PhaseSel::Decode, true);
        // edges: (0,1)=3, every other pair 1. (0,1)=3 first; then weight-1 edges by hot rank: hot = 0,1,2,5,3,4; ranks 0..5.
        // remaining free: 2,5,3,4; edges among them with weight 1: (2,5) ranks (2,3), (2,4) ranks
        // (2,5), (4,5) ranks (3,5); (1,3),(0,3) blocked. Pick (2,5), then (3,4) has no edge:
        // leftover 3,4 paired in hot order.
        let groups = p.coact_groups(&ks, 0, 2).unwrap();
        assert_eq!(groups, vec![vec![0, 1], vec![2, 5], vec![3, 4]]);
    }

    #[test]
    fn greedy_groups_of_three() {
        let tr = t();
        let ks = tr.keyspace();
        let p = ProfileStats::new(&tr, PhaseSel::Decode, true);
        // seed 0: affinity 1:3, 2:1, 5:1, 3:1 -> 1 joins; affinity adds 1's edges: 2:2, 5:2, 3:2
        // tie between 2 (rank 2), 5 (rank 3), 3 (rank 4) -> 2. Next seed 5: affinity 2 done;
        // 4:1 -> 4? 5's edges: (0,5),(1,5),(2,5),(4,5) -> 4 joins (1) over 3 (0); then 3.
        let groups = p.coact_groups(&ks, 0, 3).unwrap();
        assert_eq!(groups, vec![vec![0, 1, 2], vec![5, 4, 3]]);
    }
}
