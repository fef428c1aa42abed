//! What the learning predictors learn from, and the helpers they share: the profile trace as
//! a stream of groups, how many experts a prediction names, the ranking of experts by a
//! score and the units that hold them.

use super::Seen;
use crate::cache::stream::round_robin_requests;
use policies::UnitMap;
use serde::Serialize;
use traces::{KeySpace, PhaseSel, Trace};

/// Where `static`, `next-layer` and `eam` learn from.
#[derive(Clone, Copy)]
pub enum Learning<'a> {
    /// The profile trace's groups (`--profile-trace`), learned once before the replay; the
    /// evaluated run teaches nothing.
    Profile(&'a dyn ProfileGroups),
    /// The evaluated run itself, online: each group is learned at its router, so a
    /// prediction uses that group and the earlier ones only.
    Online,
}

impl Learning<'_> {
    /// Feed `learn` the profile's groups ([`ProfileGroups::each_group`]); nothing online.
    pub fn each_profile_group(&self, mut learn: impl FnMut(&Seen<'_>)) {
        if let Learning::Profile(p) = self {
            p.each_group(&mut learn);
        }
    }
}

/// A profile trace as the groups a predictor learns from: the tokens of the run's phases in
/// the order the engine replays a trace one request per step (round-robin over sequences,
/// every MoE layer of a token in order), each group one token's selection of one layer, its
/// step counting requests from 0. Held in memory ([`LoadedProfile`]) or read from the file
/// each time a predictor learns (`sim::bounded`), so a profile trace of any length costs the
/// predictor's own state only.
pub trait ProfileGroups: Sync {
    /// Sequences of the profile trace (`eam` keeps one matrix per sequence).
    fn sequences(&self) -> usize;

    /// Feed `learn` every group, in order.
    fn each_group(&self, learn: &mut dyn FnMut(&Seen<'_>));
}

/// A profile trace in memory: its tokens of `phases`.
pub struct LoadedProfile<'a> {
    pub trace: &'a Trace,
    pub phases: PhaseSel,
}

impl ProfileGroups for LoadedProfile<'_> {
    fn sequences(&self) -> usize {
        self.trace.sequences.len()
    }

    fn each_group(&self, learn: &mut dyn FnMut(&Seen<'_>)) {
        profile_groups(self.trace, self.phases, learn);
    }
}

/// What a run's prefetch output says the predictor's knowledge came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LearnsFrom {
    /// The profile trace only.
    Profile,
    /// The evaluated trace's earlier tokens only.
    Online,
    /// The plan's future (the oracle bound).
    Future,
}

impl LearnsFrom {
    /// The word results files write.
    pub fn as_str(self) -> &'static str {
        match self {
            LearnsFrom::Profile => "profile",
            LearnsFrom::Online => "online",
            LearnsFrom::Future => "future",
        }
    }
}

/// Feed `learn` the groups of `trace` (tokens of `phases`) in the order the engine replays a
/// trace one request per step: round-robin over sequences, every MoE layer of a token in
/// order. Each group holds one token's selection; its step counts requests from 0.
fn profile_groups(trace: &Trace, phases: PhaseSel, mut learn: impl FnMut(&Seen<'_>)) {
    let ks = trace.keyspace();
    let mut keys = Vec::new();
    for (step, r) in round_robin_requests(trace, phases).iter().enumerate() {
        let sequences = [r.sequence];
        for m in 0..ks.num_moe_layers() {
            let sel = trace.selection(&ks, r.sequence as usize, r.phase, r.token as usize, m);
            keys.clear();
            keys.extend(sel.iter().map(|&e| ks.key(m, e)));
            learn(&Seen {
                step,
                moe_layer: m,
                keys: &keys,
                accessed: &[],
                sequences: &sequences,
            });
        }
    }
}

/// Experts a prediction for MoE layer `target` names, from the current group `cur`: the
/// current group's distinct keys scaled by the layers' top-k ratio, so the target's top-k
/// for one sequence and about the batch's union for several; at most the layer's experts.
pub fn wanted(ks: &KeySpace, cur: &Seen<'_>, target: usize) -> usize {
    let kc = (ks.top_k[cur.moe_layer] as usize).max(1);
    let kt = ks.top_k[target] as usize;
    ((cur.keys.len() * kt + kc / 2) / kc).min(ks.experts[target] as usize)
}

/// The `n` experts with the highest positive `scores` (one per expert of a layer), highest
/// first, ties to the lower id.
pub fn top_experts<T: Copy + PartialOrd + Default>(scores: &[T], n: usize) -> Vec<u16> {
    let zero = T::default();
    let mut ids: Vec<u16> = (0..scores.len() as u16)
        .filter(|&e| scores[e as usize] > zero)
        .collect();
    ids.sort_by(|&a, &b| {
        scores[b as usize]
            .partial_cmp(&scores[a as usize])
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    ids.truncate(n);
    ids
}

/// Apply the confidence cut `min` to `top` (experts highest first, as [`top_experts`] gives
/// them): keep those whose `score` is at least `min` times the best one's, so a score reads
/// as a fraction of the prediction's best, in (0, 1]. `None` keeps every one.
pub fn cut(top: &mut Vec<u16>, score: impl Fn(u16) -> f64, min: Option<f64>) {
    let (Some(min), Some(&best)) = (min, top.first()) else {
        return;
    };
    let floor = min * score(best);
    top.retain(|&e| score(e) >= floor);
}

/// Append the units holding experts `experts` of MoE layer `layer` (a unit holding several
/// of them is named more than once; the engine prefetches it once), and to `rel` each
/// appended unit's score as a fraction of the first (best) expert's: the scores the
/// confidence cut compares, for the run's cut curve.
#[allow(clippy::too_many_arguments)]
pub fn push_scored(
    units: &UnitMap,
    ks: &KeySpace,
    layer: usize,
    experts: &[u16],
    score: impl Fn(u16) -> f64,
    out: &mut Vec<u32>,
    rel: &mut Vec<f64>,
) {
    rel.clear();
    let Some(&best) = experts.first() else {
        return;
    };
    let best = score(best);
    for &e in experts {
        let before = out.len();
        out.extend(units.units_of(ks.key(layer, e)));
        let r = if best > 0.0 { score(e) / best } else { 1.0 };
        rel.extend(std::iter::repeat_n(r, out.len() - before));
    }
}
