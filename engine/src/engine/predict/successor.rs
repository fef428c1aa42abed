//! `next-layer`: the successor table. For each expert e of MoE layer L, how often each
//! expert e' of layer L + w (w = the window; past the last layer, the next step's layer
//! L + w - layers) was selected w groups after e, counted in the counters of
//! `traces::stats` (the statistic `sim trace stats` reports as next-layer predictability
//! for w = 1). A prediction sums the rows of the current group's experts and names the
//! [`wanted`] experts with the highest totals.

use super::learn::{cut, push_scored, top_experts, wanted, Learning};
use super::{History, Predict, PredictInputs, Seen, Target};
use policies::UnitMap;
use std::collections::VecDeque;
use traces::stats::SuccessorTable;
use traces::KeySpace;

/// The successor tables of one window, learned from the profile trace or online.
pub struct NextLayer<'a> {
    units: &'a UnitMap,
    ks: &'a KeySpace,
    window: usize,
    /// Table of each source MoE layer L: its experts x the experts of layer (L + w) mod M.
    tables: Vec<SuccessorTable>,
    /// The last `window` groups learned: (MoE layer, expert ids), oldest first.
    recent: VecDeque<(usize, Vec<u16>)>,
    online: bool,
    /// The confidence cut ([`PredictInputs::min_score`]).
    min_score: Option<f64>,
    /// Summed rows of a prediction (one per target expert).
    scores: Vec<u64>,
    /// The last prediction's unit scores ([`Predict::scores`]).
    rel: Vec<f64>,
}

impl<'a> NextLayer<'a> {
    pub fn new(i: PredictInputs<'a>) -> Self {
        let (ks, m) = (i.ks, i.ks.num_moe_layers());
        let pairs = (0..m).map(|l| {
            let t = (l + i.window) % m.max(1);
            (ks.experts[l] as usize, ks.experts[t] as usize)
        });
        let mut s = NextLayer {
            units: i.units,
            ks,
            window: i.window.max(1),
            tables: SuccessorTable::for_pairs(pairs),
            recent: VecDeque::new(),
            online: matches!(i.learning, Learning::Online),
            min_score: i.min_score,
            scores: Vec::new(),
            rel: Vec::new(),
        };
        i.learning.each_profile_group(|g| s.learn(g));
        s
    }

    /// Pair group `g` with the group `window` places before it, then remember `g`.
    fn learn(&mut self, g: &Seen<'_>) {
        let ids: Vec<u16> = g.keys.iter().map(|&k| self.ks.split(k).1).collect();
        if self.recent.len() == self.window {
            let (layer, before) = self.recent.pop_front().expect("window >= 1");
            self.tables[layer].add_pairs(&before, &ids);
        }
        self.recent.push_back((g.moe_layer, ids));
    }
}

impl Predict for NextLayer<'_> {
    fn observe(&mut self, h: &History<'_>) {
        if self.online {
            self.learn(&h.current());
        }
    }

    fn predict(&mut self, h: &History<'_>, t: Target, out: &mut Vec<u32>) {
        let cur = h.current();
        let table = &self.tables[cur.moe_layer];
        self.scores.clear();
        self.scores.resize(self.ks.experts[t.moe_layer] as usize, 0);
        for &k in cur.keys {
            table.add_row(self.ks.split(k).1, &mut self.scores);
        }
        let mut top = top_experts(&self.scores, wanted(self.ks, &cur, t.moe_layer));
        cut(&mut top, |e| self.scores[e as usize] as f64, self.min_score);
        let scores = &self.scores;
        push_scored(
            self.units,
            self.ks,
            t.moe_layer,
            &top,
            |e| scores[e as usize] as f64,
            out,
            &mut self.rel,
        );
    }

    fn scores(&self) -> Option<&[f64]> {
        Some(&self.rel)
    }
}
