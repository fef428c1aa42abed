//! Prefetch predictors: at the router of group `gi`, name the units group `gi + window` will
//! need, so the engine can page them in early.

use super::plan::Plans;
use policies::UnitMap;
use traces::KeySpace;

/// `--predictor`: how the units of a future group are guessed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PredictorKind {
    /// No prefetch: every page-in is on demand.
    #[default]
    None,
    /// The exact page-ins of the target group (the bound no real predictor beats).
    Oracle,
    /// The units the same layer accessed in the previous step.
    PrevToken,
    /// The most frequently accessed units of the target layer over the whole run, as many as
    /// the layer accesses per group on average.
    Static,
    /// The expert ids the current layer selected, looked up in the target layer.
    NextLayer,
}

/// A predictor bound to one replay.
pub struct Predictor<'a> {
    kind: PredictorKind,
    plans: &'a Plans,
    units: &'a UnitMap,
    ks: &'a KeySpace,
    /// `static`: top units of each MoE layer.
    top: Vec<Vec<u32>>,
}

impl<'a> Predictor<'a> {
    pub fn new(
        kind: PredictorKind,
        plans: &'a Plans,
        units: &'a UnitMap,
        ks: &'a KeySpace,
    ) -> Self {
        let mut top = Vec::new();
        if kind == PredictorKind::Static {
            let m = plans.moe_layers;
            let mut counts = vec![0u64; units.num_units()];
            let mut per_layer = vec![(0u64, 0u64); m]; // (accessed units, groups)
            for g in &plans.groups {
                let acc = plans.accessed(g);
                for &u in acc {
                    counts[u as usize] += 1;
                }
                let e = &mut per_layer[g.moe_layer as usize];
                e.0 += acc.len() as u64;
                e.1 += 1;
            }
            for (layer, &(acc, groups)) in per_layer.iter().enumerate() {
                let want = if groups == 0 {
                    0
                } else {
                    ((acc as f64 / groups as f64).round()) as usize
                };
                let mut cand: Vec<u32> = (0..units.num_units() as u32)
                    .filter(|&u| {
                        let i = &units.units[u as usize];
                        i.first_moe_layer as usize <= layer
                            && layer <= i.last_moe_layer as usize
                            && counts[u as usize] > 0
                    })
                    .collect();
                // most accessed first, ties by unit id: deterministic
                cand.sort_by(|&a, &b| counts[b as usize].cmp(&counts[a as usize]).then(a.cmp(&b)));
                cand.truncate(want);
                top.push(cand);
            }
        }
        Predictor {
            kind,
            plans,
            units,
            ks,
            top,
        }
    }

    pub fn kind(&self) -> PredictorKind {
        self.kind
    }

    /// Append to `out` the units predicted for group `gt`, predicting at group `gi`.
    pub fn predict(&self, gi: usize, gt: usize, out: &mut Vec<u32>) {
        let p = self.plans;
        let target = &p.groups[gt];
        match self.kind {
            PredictorKind::None => {}
            PredictorKind::Oracle => out.extend_from_slice(p.page_ins(target)),
            PredictorKind::PrevToken => {
                if gt >= p.moe_layers {
                    out.extend_from_slice(p.accessed(&p.groups[gt - p.moe_layers]));
                }
            }
            PredictorKind::Static => out.extend_from_slice(&self.top[target.moe_layer as usize]),
            PredictorKind::NextLayer => {
                let mt = target.moe_layer as usize;
                for &k in p.keys(&p.groups[gi]) {
                    let (_, e) = self.ks.split(k);
                    if e < self.ks.experts[mt] {
                        out.extend(self.units.units_of(self.ks.key(mt, e)));
                    }
                }
            }
        }
    }
}
