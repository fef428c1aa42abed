//! The curve-optimal per-layer split: from each MoE layer's exact page-in curve, the layer
//! budgets (each from 1 unit to the layer's units) summing to at most a total that minimise
//! the page-ins summed over layers. The layers' pools are independent, so the page-ins of an
//! allocation are the sum of each layer's curve at its budget.
//!
//! Where every curve is convex (the page-ins a unit saves never grow with the budget), giving
//! each next unit to the layer it saves most is optimal (the greedy algorithm for separable
//! convex resource allocation, Ibaraki and Katoh 1988, "Resource Allocation Problems", ch. 4);
//! otherwise a dynamic program over (layers, units) is exact, in O(layers x total x largest
//! layer) time.

use super::PoolCurve;
use serde::Serialize;

/// How an allocation was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Every curve convex: the greedy on marginal gains.
    Greedy,
    /// Some curve not convex: the dynamic program.
    DynamicProgramming,
}

/// Layer budgets and their page-ins.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Allocation {
    /// Units per layer, in layer order.
    pub layer_units: Vec<usize>,
    /// The sum of the layers' page-ins at those budgets.
    pub page_ins: u64,
    pub method: Method,
}

/// Whether `c`'s savings per unit never grow with the budget.
pub fn is_convex(c: &PoolCurve) -> bool {
    let p = &c.page_ins;
    p.windows(3)
        .all(|w| w[0].saturating_sub(w[1]) >= w[1].saturating_sub(w[2]))
}

/// The allocation of at most `total` units over `layers` (each at least 1 unit) with the
/// fewest page-ins; `None` when `total` is below one unit per layer. Ties go to the lower
/// layer (greedy) or the smaller budget of the earlier layers (dynamic program), so the
/// answer is deterministic.
pub fn optimal(layers: &[PoolCurve], total: usize) -> Option<Allocation> {
    if total < layers.len() {
        return None;
    }
    if layers.iter().all(is_convex) {
        Some(greedy(layers, total))
    } else {
        Some(dynamic(layers, total))
    }
}

/// The sum of the layers' page-ins at `units`.
pub fn page_ins_at(layers: &[PoolCurve], units: &[usize]) -> u64 {
    layers.iter().zip(units).map(|(l, &c)| l.at(c)).sum()
}

fn greedy(layers: &[PoolCurve], total: usize) -> Allocation {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut units = vec![1usize; layers.len()];
    // (saving of the layer's next unit, lower layer first)
    let gain = |l: usize, c: usize| layers[l].at(c) - layers[l].at(c + 1);
    let mut heap: BinaryHeap<(u64, Reverse<usize>)> = (0..layers.len())
        .filter(|&l| layers[l].page_ins.len() > 1)
        .map(|l| (gain(l, 1), Reverse(l)))
        .collect();
    let mut left = total - layers.len();
    while left > 0 {
        let Some((_, Reverse(l))) = heap.pop() else {
            break;
        };
        units[l] += 1;
        left -= 1;
        if units[l] < layers[l].page_ins.len() {
            heap.push((gain(l, units[l]), Reverse(l)));
        }
    }
    Allocation {
        page_ins: page_ins_at(layers, &units),
        layer_units: units,
        method: Method::Greedy,
    }
}

fn dynamic(layers: &[PoolCurve], total: usize) -> Allocation {
    // best[b]: fewest page-ins of the layers so far with at most b units; choice[l][b]: the
    // units of layer l in it
    let mut best = vec![0u64; total + 1];
    let mut choice: Vec<Vec<usize>> = Vec::with_capacity(layers.len());
    let mut used = 0usize; // the fewest units the layers so far need
    for layer in layers {
        used += 1;
        let mut next = vec![u64::MAX; total + 1];
        let mut pick = vec![0usize; total + 1];
        for b in used..=total {
            for c in 1..=layer.page_ins.len().max(1).min(b + 1 - used) {
                let prev = best[b - c];
                if prev == u64::MAX {
                    continue;
                }
                let v = prev + layer.at(c);
                if v < next[b] {
                    next[b] = v;
                    pick[b] = c;
                }
            }
        }
        best = next;
        choice.push(pick);
    }
    let mut units = vec![0usize; layers.len()];
    let mut b = total;
    for l in (0..layers.len()).rev() {
        units[l] = choice[l][b];
        b -= units[l];
    }
    Allocation {
        page_ins: best[total],
        layer_units: units,
        method: Method::DynamicProgramming,
    }
}

/// One total budget of one policy split three ways: `sim curve --allocate`'s row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SplitComparison {
    pub evict: policies::PolicyKind,
    /// The total budget, in units.
    pub budget_units: usize,
    /// Page-ins with one pool of that many units.
    pub global_page_ins: u64,
    /// Page-ins with the equal per-layer split of it (as `--split per-layer --budget <units>`).
    pub per_layer_page_ins: u64,
    /// The curve-optimal layer budgets; `None` below one unit per layer.
    pub curve_optimal: Option<Allocation>,
}

/// Each policy of `global` (global-split curves) and `per_layer` (per-layer curves of the
/// same trace) at each of `budgets`.
pub fn compare(
    global: &super::CurveReport,
    per_layer: &super::CurveReport,
    budgets: &[usize],
) -> Vec<SplitComparison> {
    let mut out = Vec::new();
    for g in &global.curves {
        let Some(p) = per_layer.curve(g.evict) else {
            continue;
        };
        let layers = p.layers.as_deref().unwrap_or_default();
        for &b in budgets {
            out.push(SplitComparison {
                evict: g.evict,
                budget_units: b,
                global_page_ins: g.at(b),
                per_layer_page_ins: p.at(b),
                curve_optimal: optimal(layers, b),
            });
        }
    }
    out
}

/// The text of [`compare`]'s rows: page-ins per split, and the optimal layer budgets.
pub fn table(rows: &[SplitComparison]) -> String {
    use std::fmt::Write;
    let mut s = format!(
        "{:<8} {:>8} {:>14} {:>14} {:>14}  {}\n",
        "policy", "units", "global", "per-layer", "curve-optimal", "method: layer budgets"
    );
    for r in rows {
        let (opt, how) = match &r.curve_optimal {
            Some(a) => (
                a.page_ins.to_string(),
                format!(
                    "{}: {}",
                    match a.method {
                        Method::Greedy => "greedy",
                        Method::DynamicProgramming => "dynamic programming",
                    },
                    a.layer_units
                        .iter()
                        .map(|u| u.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            ),
            None => ("-".into(), "below one unit per layer".into()),
        };
        let _ = writeln!(
            s,
            "{:<8} {:>8} {:>14} {:>14} {:>14}  {how}",
            r.evict.name(),
            r.budget_units,
            r.global_page_ins,
            r.per_layer_page_ins,
            opt
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(p: &[u64]) -> PoolCurve {
        PoolCurve {
            accesses: p[0],
            page_ins: p.to_vec(),
        }
    }

    /// Every allocation of at most `total` units, each layer 1 ..= its units: the fewest
    /// page-ins, by enumeration.
    fn brute(layers: &[PoolCurve], total: usize) -> Option<u64> {
        fn go(layers: &[PoolCurve], left: usize) -> Option<u64> {
            let Some((first, rest)) = layers.split_first() else {
                return Some(0);
            };
            (1..=first.page_ins.len().min(left))
                .filter_map(|c| Some(first.at(c) + go(rest, left - c)?))
                .min()
        }
        go(layers, total)
    }

    #[test]
    fn greedy_and_dynamic_program_equal_brute_force() {
        // convex: 9 5 3 2 / 6 3 1 / 4 4 (flat)
        let convex = [curve(&[9, 5, 3, 2]), curve(&[6, 3, 1]), curve(&[4, 4])];
        // not convex (a cliff at the working set): 8 8 8 1 / 5 2 1 / 7 7 0
        let cliff = [curve(&[8, 8, 8, 1]), curve(&[5, 2, 1]), curve(&[7, 7, 0])];
        for total in 0..=10 {
            let a = optimal(&convex, total);
            assert_eq!(
                a.as_ref().map(|a| a.page_ins),
                brute(&convex, total),
                "{total}"
            );
            if let Some(a) = a {
                assert_eq!(a.method, Method::Greedy);
                assert!(a.layer_units.iter().sum::<usize>() <= total);
                assert_eq!(a.page_ins, page_ins_at(&convex, &a.layer_units));
            }
            let b = optimal(&cliff, total);
            assert_eq!(
                b.as_ref().map(|b| b.page_ins),
                brute(&cliff, total),
                "{total}"
            );
            if let Some(b) = b {
                assert_eq!(b.method, Method::DynamicProgramming);
                assert!(b.layer_units.iter().sum::<usize>() <= total);
                assert_eq!(b.page_ins, page_ins_at(&cliff, &b.layer_units));
            }
        }
        // by hand: 5 units over the convex curves: 1 each (9 + 6 + 4 = 19), then the savings
        // 4 (layer 0) and 3 (layer 1): 5 + 3 + 4 = 12 at [2, 2, 1]
        let a = optimal(&convex, 5).unwrap();
        assert_eq!((a.layer_units.clone(), a.page_ins), (vec![2, 2, 1], 12));
        // the cliff: 7 units: [4, 1, 2]? 1 + 5 + 7 = 13; [1, 3, 3]: 8 + 1 + 0 = 9; best 9
        assert_eq!(optimal(&cliff, 7).unwrap().page_ins, 9);
        assert!(!is_convex(&cliff[0]) && is_convex(&convex[2]));
    }
}
