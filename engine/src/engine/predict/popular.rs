//! `static`: the target layer's most selected experts in what the predictor learned from.

use super::learn::{cut, push_scored, top_experts, wanted, Learning};
use super::{History, Predict, PredictInputs, Seen, Target};
use policies::UnitMap;
use traces::KeySpace;

/// Selection counts per key, from the profile trace (frozen) or from the run's groups so
/// far (online); a prediction names the target layer's [`wanted`] most counted experts.
pub struct Static<'a> {
    units: &'a UnitMap,
    ks: &'a KeySpace,
    /// Groups that selected each key.
    counts: Vec<u64>,
    online: bool,
    /// The confidence cut ([`PredictInputs::min_score`]).
    min_score: Option<f64>,
    /// The last prediction's unit scores ([`Predict::scores`]).
    rel: Vec<f64>,
}

impl<'a> Static<'a> {
    pub fn new(i: PredictInputs<'a>) -> Self {
        let mut s = Static {
            units: i.units,
            ks: i.ks,
            counts: vec![0; i.ks.num_keys()],
            online: matches!(i.learning, Learning::Online),
            min_score: i.min_score,
            rel: Vec::new(),
        };
        i.learning.each_profile_group(|g| s.learn(g));
        s
    }

    fn learn(&mut self, g: &Seen<'_>) {
        for &k in g.keys {
            self.counts[k as usize] += 1;
        }
    }
}

impl Predict for Static<'_> {
    fn observe(&mut self, h: &History<'_>) {
        if self.online {
            self.learn(&h.current());
        }
    }

    fn predict(&mut self, h: &History<'_>, t: Target, out: &mut Vec<u32>) {
        let l = t.moe_layer;
        let first = self.ks.offsets[l] as usize;
        let layer = &self.counts[first..first + self.ks.experts[l] as usize];
        let mut top = top_experts(layer, wanted(self.ks, &h.current(), l));
        cut(&mut top, |e| layer[e as usize] as f64, self.min_score);
        push_scored(
            self.units,
            self.ks,
            l,
            &top,
            |e| layer[e as usize] as f64,
            out,
            &mut self.rel,
        );
    }

    fn scores(&self) -> Option<&[f64]> {
        Some(&self.rel)
    }
}
