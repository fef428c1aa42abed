//! The predictors that learn nothing: `none`, `oracle` (the bound) and `prev-token`.

use super::{History, Predict, PredictInputs, Target};

/// `none`.
pub struct NoPrefetch;

impl Predict for NoPrefetch {
    fn predict(&mut self, _h: &History<'_>, _t: Target, _out: &mut Vec<u32>) {}
}

/// `oracle`: the target group's page-ins as the plan decided them (the only predictor that
/// looks past the current group).
pub struct Oracle;

impl Predict for Oracle {
    fn predict(&mut self, _h: &History<'_>, t: Target, out: &mut Vec<u32>) {
        out.extend_from_slice(t.page_ins)
    }
}

/// `prev-token`: the units the target's MoE layer accessed one step before the target's
/// step (group `target - moe_layers`, never after the current group since the window is at
/// most one step).
pub struct PrevToken;

impl PrevToken {
    pub fn new(_: PredictInputs<'_>) -> Self {
        PrevToken
    }
}

impl Predict for PrevToken {
    fn predict(&mut self, h: &History<'_>, t: Target, out: &mut Vec<u32>) {
        if let Some(g) = t.group.checked_sub(h.moe_layers()).and_then(|g| h.group(g)) {
            out.extend_from_slice(g.accessed);
        }
    }
}
