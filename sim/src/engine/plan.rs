//! What the engine prices: per (step, MoE layer) group, the keys selected, the units accessed,
//! the units paged in and the units evicted, as decided by a retention driver (or streaming).
//! Stored flat (one arena of ids, offsets per group) so pricing allocates nothing per group.

/// One group: the accesses of one (step, MoE layer). Its id lists live in `Plans::ids`:
/// keys `[k0, a0)`, accessed units `[a0, p0)`, page-ins `[p0, e0)`, evictions `[e0, end)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupRec {
    pub step: u32,
    pub moe_layer: u32,
    k0: u32,
    a0: u32,
    p0: u32,
    e0: u32,
    end: u32,
}

/// One decode step of the batch: how many sequences produce a token and how many tokens of
/// KV cache they hold together (prompt tokens plus tokens decoded so far, this one included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepRec {
    pub sequences: u32,
    pub kv_tokens: u64,
}

/// The whole replay, in execution order: groups step-major, MoE layers in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plans {
    /// MoE layers per step.
    pub moe_layers: usize,
    pub groups: Vec<GroupRec>,
    pub steps: Vec<StepRec>,
    /// Units resident before the first step (static pins), never page-ins.
    pub preloaded: Vec<u32>,
    ids: Vec<u32>,
}

impl Plans {
    /// Empty plans for a model with `moe_layers` MoE layers.
    pub fn new(moe_layers: usize) -> Self {
        Plans {
            moe_layers,
            ..Default::default()
        }
    }

    /// Start a step with `sequences` sequences holding `kv_tokens` tokens of KV in total.
    pub fn begin_step(&mut self, sequences: u32, kv_tokens: u64) {
        self.steps.push(StepRec {
            sequences,
            kv_tokens,
        });
    }

    /// Append the group of MoE layer `moe_layer` to the current step. `keys`: distinct
    /// selected expert keys (their count prices expert compute); `accessed`: units the
    /// group needs; `page_ins`: those not resident; `evicted`: units evicted after admission.
    pub fn push_group(
        &mut self,
        moe_layer: usize,
        keys: &[u32],
        accessed: &[u32],
        page_ins: &[u32],
        evicted: &[u32],
    ) {
        assert!(!self.steps.is_empty(), "begin_step before push_group");
        let k0 = self.ids.len() as u32;
        self.ids.extend_from_slice(keys);
        let a0 = self.ids.len() as u32;
        self.ids.extend_from_slice(accessed);
        let p0 = self.ids.len() as u32;
        self.ids.extend_from_slice(page_ins);
        let e0 = self.ids.len() as u32;
        self.ids.extend_from_slice(evicted);
        self.groups.push(GroupRec {
            step: (self.steps.len() - 1) as u32,
            moe_layer: moe_layer as u32,
            k0,
            a0,
            p0,
            e0,
            end: self.ids.len() as u32,
        });
    }

    #[inline]
    pub fn keys(&self, g: &GroupRec) -> &[u32] {
        &self.ids[g.k0 as usize..g.a0 as usize]
    }
    #[inline]
    pub fn accessed(&self, g: &GroupRec) -> &[u32] {
        &self.ids[g.a0 as usize..g.p0 as usize]
    }
    #[inline]
    pub fn page_ins(&self, g: &GroupRec) -> &[u32] {
        &self.ids[g.p0 as usize..g.e0 as usize]
    }
    #[inline]
    pub fn evicted(&self, g: &GroupRec) -> &[u32] {
        &self.ids[g.e0 as usize..g.end as usize]
    }

    /// Total page-ins over the plan.
    pub fn total_page_ins(&self) -> u64 {
        self.groups.iter().map(|g| (g.e0 - g.p0) as u64).sum()
    }

    /// Total tokens decoded (sum of sequences over steps).
    pub fn tokens(&self) -> u64 {
        self.steps.iter().map(|s| s.sequences as u64).sum()
    }
}
