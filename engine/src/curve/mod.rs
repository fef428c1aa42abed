//! Exact page-in curves: the page-ins of a stack policy (LRU, Belady/MIN) at every budget
//! from one unit to the whole pool, in one pass over the access stream (Mattson, Gecsei,
//! Slutz and Traiger 1970, "Evaluation techniques for storage hierarchies").
//!
//! Both policies are stack algorithms in this project's cache regime, under group and access
//! semantics and at every budget, one group included (docs/DESIGN.md, "Exact curves"): after
//! every group the cache of C units is the top C of one stack whose order does not depend on
//! C, so an access hits at budget C exactly when the unit's depth in the stack at the start
//! of its group (its access, under access semantics) is at most C. A pass records each
//! access's depth per pool; the page-ins at C are the first uses plus the accesses deeper
//! than C. The per-layer split's pools are independent, so its page-ins at a total budget
//! are the sum of the layers' curves at their shares of it.

pub mod lru;
pub mod opt;
pub mod split;
pub mod text;
pub mod vs_belady;

pub use lru::LruStack;
pub use opt::OptStack;

use crate::cache::{Semantics, Split};
use policies::PolicyKind;
use serde::Serialize;

/// One pool's stack, stepped a group (or one access) at a time.
pub trait Stack {
    /// An empty stack over local unit ids `0..units`.
    fn new(units: usize) -> Self;
    /// Write into `depth` each unit's depth (1 = top, 0 = first use) in the stack at the
    /// start of the group, then update the stack by the group. `units` are distinct; `next`
    /// their next uses (stream positions), when the stack reads them; `protect`: the group's
    /// units are protected (group semantics).
    fn step(&mut self, units: &[u32], next: Option<&[u64]>, protect: bool, depth: &mut Vec<u32>);
}

/// One pool's depth counts.
struct PoolDepths<S> {
    stack: S,
    /// `hist[d]`: accesses at depth d (`hist[0]`: first uses).
    hist: Vec<u64>,
    units: Vec<u32>,
    next: Vec<u64>,
    depth: Vec<u32>,
}

/// Records the stack depths of a stream, pool by pool, fed like
/// [`crate::cache::CacheSim::group_next`].
pub struct CurveSim<S> {
    semantics: Semantics,
    pool_of: Vec<u32>,
    local: Vec<u32>,
    pools: Vec<PoolDepths<S>>,
    touched: Vec<u32>,
    accesses: u64,
}

impl<S: Stack> CurveSim<S> {
    /// A recorder over units whose pool is `pool_of[u]` (pools `0..`, local ids in ascending
    /// global id, as the cache regime numbers them).
    pub fn new(pool_of: &[u32], semantics: Semantics) -> Self {
        let pools = pool_of.iter().map(|&p| p as usize + 1).max().unwrap_or(0);
        let mut sizes = vec![0u32; pools];
        let local = pool_of
            .iter()
            .map(|&p| {
                sizes[p as usize] += 1;
                sizes[p as usize] - 1
            })
            .collect();
        let pools = sizes
            .iter()
            .map(|&n| PoolDepths {
                stack: S::new(n as usize),
                hist: vec![0; n as usize + 1],
                units: Vec::new(),
                next: Vec::new(),
                depth: Vec::new(),
            })
            .collect();
        CurveSim {
            semantics,
            pool_of: pool_of.to_vec(),
            local,
            pools,
            touched: Vec::new(),
            accesses: 0,
        }
    }

    /// One group's units (distinct, in selection order) and, for a stack that reads them,
    /// their next uses (stream positions, [`policies::retention::NEVER`] for never).
    pub fn group_next(&mut self, units: &[u32], next: Option<&[u64]>) {
        self.accesses += units.len() as u64;
        if self.semantics == Semantics::Access {
            for (i, &u) in units.iter().enumerate() {
                let p = &mut self.pools[self.pool_of[u as usize] as usize];
                let n = next.map(|n| &n[i..i + 1]);
                p.stack
                    .step(&[self.local[u as usize]], n, false, &mut p.depth);
                p.hist[p.depth[0] as usize] += 1;
            }
            return;
        }
        if self.pools.len() == 1 {
            let p = &mut self.pools[0];
            p.stack.step(units, next, true, &mut p.depth);
            for &d in &p.depth {
                p.hist[d as usize] += 1;
            }
            return;
        }
        for (i, &u) in units.iter().enumerate() {
            let pi = self.pool_of[u as usize];
            let p = &mut self.pools[pi as usize];
            if p.units.is_empty() {
                self.touched.push(pi);
            }
            p.units.push(self.local[u as usize]);
            if let Some(n) = next {
                p.next.push(n[i]);
            }
        }
        for &pi in &self.touched {
            let p = &mut self.pools[pi as usize];
            let n = next.map(|_| &p.next[..]);
            p.stack.step(&p.units, n, true, &mut p.depth);
            for &d in &p.depth {
                p.hist[d as usize] += 1;
            }
            p.units.clear();
            p.next.clear();
        }
        self.touched.clear();
    }

    /// Each pool's page-ins at every capacity.
    pub fn finish(self) -> Vec<PoolCurve> {
        self.pools.iter().map(|p| PoolCurve::of(&p.hist)).collect()
    }

    /// Accesses fed so far.
    pub fn accesses(&self) -> u64 {
        self.accesses
    }
}

/// The policies with an exact curve: the stack policies whose stack this module has.
pub const CURVE_POLICIES: [PolicyKind; 2] = [PolicyKind::Lru, PolicyKind::Belady];

/// A [`CurveSim`] of one of [`CURVE_POLICIES`].
pub enum Recorder {
    Lru(CurveSim<LruStack>),
    Belady(CurveSim<OptStack>),
}

impl Recorder {
    /// A recorder of `kind`'s depths; an error naming the policies with a curve otherwise.
    pub fn new(kind: PolicyKind, pool_of: &[u32], semantics: Semantics) -> Result<Self, String> {
        match kind {
            PolicyKind::Lru => Ok(Recorder::Lru(CurveSim::new(pool_of, semantics))),
            PolicyKind::Belady => Ok(Recorder::Belady(CurveSim::new(pool_of, semantics))),
            other => Err(format!(
                "no exact curve for `{other}`: only the stack policies lru and belady have one; run `sim sweep --evict {other} --budget ...` for its page-ins at chosen budgets"
            )),
        }
    }

    /// The policy recorded.
    pub fn kind(&self) -> PolicyKind {
        match self {
            Recorder::Lru(_) => PolicyKind::Lru,
            Recorder::Belady(_) => PolicyKind::Belady,
        }
    }

    /// Whether [`Recorder::group_next`] needs the group's next uses.
    pub fn reads_next_use(&self) -> bool {
        matches!(self, Recorder::Belady(_))
    }

    /// One group ([`CurveSim::group_next`]).
    pub fn group_next(&mut self, units: &[u32], next: Option<&[u64]>) {
        match self {
            Recorder::Lru(s) => s.group_next(units, None),
            Recorder::Belady(s) => s.group_next(units, next),
        }
    }

    /// The curve of the bank under `split`.
    pub fn finish(self, split: Split) -> PolicyCurve {
        let kind = self.kind();
        let pools = match self {
            Recorder::Lru(s) => s.finish(),
            Recorder::Belady(s) => s.finish(),
        };
        PolicyCurve::new(kind, split, pools)
    }
}

/// The curves of one trace: what `sim curve --json` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CurveReport {
    pub trace: String,
    /// The mechanism (`--policy`).
    pub mechanism: String,
    pub phase: traces::PhaseSel,
    pub split: Split,
    pub semantics: Semantics,
    /// Units in the bank (the largest budget).
    pub units: usize,
    /// Committed bytes of the largest unit: a budget in bytes holds that many bytes per unit.
    pub largest_unit_bytes: u64,
    pub tokens: u64,
    pub accesses: u64,
    pub curves: Vec<PolicyCurve>,
}

impl CurveReport {
    /// The curve of `kind`, when recorded.
    pub fn curve(&self, kind: PolicyKind) -> Option<&PolicyCurve> {
        self.curves.iter().find(|c| c.evict == kind)
    }
}

/// The curves of `kinds` over an in-memory workload (its stream and next uses) with `map`'s
/// units under `split` and `semantics`: one pass over the stream for all of them.
pub fn of_workload(
    w: &crate::cache::Workload,
    map: &policies::UnitMap,
    kinds: &[PolicyKind],
    split: Split,
    semantics: Semantics,
) -> Result<Vec<PolicyCurve>, crate::cache::CacheError> {
    let pool_of = crate::cache::driver::pool_layout(map, split)?;
    let mut recs = kinds
        .iter()
        .map(|&k| Recorder::new(k, &pool_of, semantics))
        .collect::<Result<Vec<_>, _>>()
        .map_err(crate::cache::CacheError::Input)?;
    let (mut next, mut pos) = (Vec::new(), 0usize);
    let reads_next = recs.iter().any(Recorder::reads_next_use);
    for g in 0..w.stream.num_groups() {
        let units = w.stream.group(g);
        if reads_next {
            next.clear();
            next.extend(w.next_use[pos..pos + units.len()].iter().map(|&n| {
                if n == crate::cache::stream::NEVER_U32 {
                    policies::retention::NEVER
                } else {
                    n as u64
                }
            }));
        }
        pos += units.len();
        for r in &mut recs {
            r.group_next(units, reads_next.then_some(&next[..]));
        }
    }
    Ok(recs.into_iter().map(|r| r.finish(split)).collect())
}

/// One pool's page-ins at every capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolCurve {
    /// Accesses to the pool's units.
    pub accesses: u64,
    /// `page_ins[c - 1]`: page-ins with a capacity of c units, c = 1 ..= the pool's units.
    pub page_ins: Vec<u64>,
}

impl PoolCurve {
    /// From depth counts (`hist[0]` first uses, `hist[d]` at depth d): page-ins at c are the
    /// first uses plus the accesses deeper than c.
    fn of(hist: &[u64]) -> PoolCurve {
        let units = hist.len() - 1;
        let mut page_ins = vec![0u64; units];
        let mut deeper = 0u64;
        for c in (1..=units).rev() {
            page_ins[c - 1] = hist[0] + deeper;
            deeper += hist[c];
        }
        PoolCurve {
            accesses: hist.iter().sum(),
            page_ins,
        }
    }

    /// Page-ins at a capacity of `c` units (at least 1; above the pool, the whole pool's).
    pub fn at(&self, c: usize) -> u64 {
        match self.page_ins.len() {
            0 => 0,
            n => self.page_ins[c.clamp(1, n) - 1],
        }
    }
}

/// One policy's curve over a bank of units under one split.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyCurve {
    pub evict: PolicyKind,
    /// `page_ins[b - 1]`: page-ins at a budget of b units, b = 1 ..= the bank's units (the
    /// per-layer split: the sum of the layers' page-ins at their shares of b,
    /// [`crate::cache::budget::split_per_layer`] of `b` units).
    pub page_ins: Vec<u64>,
    /// The knee of `page_ins` ([`PolicyCurve::knee_of`]), a budget in units.
    pub knee: Option<usize>,
    /// Each MoE layer's curve under the per-layer split (left out under the global split,
    /// whose one pool's curve is `page_ins`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<PoolCurve>>,
}

impl PolicyCurve {
    /// The bank's curve from its pools' curves under `split`.
    pub fn new(evict: PolicyKind, split: Split, pools: Vec<PoolCurve>) -> PolicyCurve {
        let sizes: Vec<usize> = pools.iter().map(|p| p.page_ins.len()).collect();
        let total: usize = sizes.iter().sum();
        let page_ins = match split {
            Split::Global => pools
                .first()
                .map(|p| p.page_ins.clone())
                .unwrap_or_default(),
            Split::PerLayer => (1..=total)
                .map(|b| {
                    let budget = crate::cache::Budget::Units(b as u64);
                    let caps = crate::cache::budget::split_per_layer(&budget, b, total, &sizes);
                    pools.iter().zip(caps).map(|(p, c)| p.at(c)).sum()
                })
                .collect(),
        };
        PolicyCurve {
            evict,
            knee: Self::knee_of(&page_ins),
            page_ins,
            layers: (split == Split::PerLayer).then_some(pools),
        }
    }

    /// Page-ins at a budget of `b` units (1 ..= the bank).
    pub fn at(&self, b: usize) -> u64 {
        self.page_ins[b.clamp(1, self.page_ins.len()) - 1]
    }

    /// The knee: the budget farthest below the chord from the curve's first point to its last
    /// (both axes scaled to [0, 1]; the first such budget on a tie), the point of "Kneedle"
    /// (Satopää et al. 2011) for a decreasing convex curve. `None` for a bank of one unit or
    /// a flat curve.
    pub fn knee_of(page_ins: &[u64]) -> Option<usize> {
        let n = page_ins.len();
        let (first, last) = (*page_ins.first()? as f64, *page_ins.last()? as f64);
        if n < 2 || first == last {
            return None;
        }
        let gap = |b: usize| {
            let x = (b - 1) as f64 / (n - 1) as f64;
            let y = (page_ins[b - 1] as f64 - last) / (first - last);
            (1.0 - x) - y
        };
        let mut best = (1, gap(1));
        for b in 2..=n {
            let g = gap(b);
            if g > best.1 {
                best = (b, g);
            }
        }
        Some(best.0)
    }
}

/// The smallest budget at which `slow`'s page-ins are at most `target`; `None` when no budget
/// of the bank reaches it. (With `slow` LRU and `target` MIN's page-ins at a budget: the
/// budget LRU needs to do as well as the optimum, its cost in VRAM.)
pub fn budget_reaching(slow: &PolicyCurve, target: u64) -> Option<usize> {
    // Page-ins of a stack policy never increase with the budget: a binary search.
    let i = slow.page_ins.partition_point(|&p| p > target);
    (i < slow.page_ins.len()).then_some(i + 1)
}

/// Belady/MIN's page-ins at `budget` (as given; resolved over the bank of `min`'s units of
/// at most `largest_unit_bytes`) under `split` (per-layer: at the run's own layer shares),
/// with the budget in units.
pub fn belady_at(
    min: &PolicyCurve,
    budget: &crate::cache::Budget,
    split: Split,
    largest_unit_bytes: u64,
) -> Result<(usize, u64), crate::cache::budget::BudgetError> {
    let units = min.page_ins.len();
    let b = budget.resolve(units, largest_unit_bytes)?;
    let belady = match (split, &min.layers) {
        (Split::PerLayer, Some(layers)) => {
            let sizes: Vec<usize> = layers.iter().map(|l| l.page_ins.len()).collect();
            let caps = crate::cache::budget::split_per_layer(budget, b, units, &sizes);
            layers.iter().zip(caps).map(|(l, c)| l.at(c)).sum()
        }
        _ => min.at(b),
    };
    Ok((b, belady))
}

/// The smallest budget in `1..=units` at which `page_ins(b) <= target`, by bisection (`None`
/// when the whole bank does not reach it): exact for page-ins that do not rise with the
/// budget, else a budget that reaches it. `page_ins` is called about log2(units) times.
pub fn bisect_budget<E>(
    units: usize,
    target: u64,
    mut page_ins: impl FnMut(usize) -> Result<u64, E>,
) -> Result<Option<usize>, E> {
    if units == 0 || page_ins(units)? > target {
        return Ok(None);
    }
    let (mut lo, mut hi) = (0usize, units); // page_ins(hi) <= target; lo below every answer
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if page_ins(mid)? <= target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_curve_counts_deeper_accesses() {
        // 2 first uses, 3 accesses at depth 1, none at depth 2, 1 at depth 3 (of 3 units):
        // c = 1 and c = 2: 2 + 1 (the access at depth 3); c = 3: the 2 first uses.
        let c = PoolCurve::of(&[2, 3, 0, 1]);
        assert_eq!(c.page_ins, [3, 3, 2]);
        assert_eq!(c.accesses, 6);
        assert_eq!((c.at(0), c.at(9)), (3, 2));
    }

    #[test]
    fn knee_and_reaching_budget() {
        // 10, 4, 3, 2, 1: the chord from (0, 1) to (1, 0); budget 2 is at x = 0.25,
        // y = 3/9: gap 0.75 - 0.333 = 0.417, the largest (budget 3: 0.5 - 2/9 = 0.278).
        let curve = PolicyCurve::new(
            PolicyKind::Lru,
            Split::Global,
            vec![PoolCurve::of(&[1, 0, 6, 1, 1, 1])],
        );
        assert_eq!(curve.page_ins, [10, 4, 3, 2, 1]);
        assert_eq!(curve.knee, Some(2));
        assert_eq!(budget_reaching(&curve, 3), Some(3));
        assert_eq!(budget_reaching(&curve, 10), Some(1));
        assert_eq!(budget_reaching(&curve, 0), None);
        // bisection over the same page-ins finds the same budgets
        let f = |b: usize| Ok::<u64, ()>(curve.at(b));
        assert_eq!(bisect_budget(5, 3, f), Ok(Some(3)));
        assert_eq!(bisect_budget(5, 10, f), Ok(Some(1)));
        assert_eq!(bisect_budget(5, 0, f), Ok(None));
        assert_eq!(bisect_budget(0, 9, f), Ok(None));
    }
}
