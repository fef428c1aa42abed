//! What the engine prices: per (step, MoE layer) group, the keys selected, the units accessed,
//! the units paged in and the units evicted, as decided by a retention driver (or streaming).
//! Stored flat (one arena of ids, offsets per group) so pricing allocates nothing per group.

/// One group: the accesses of one (step, MoE layer). Its id lists live in `Plans::ids`:
/// keys `[k0, a0)`, accessed units `[a0, p0)`, page-ins `[p0, e0)`, evictions `[e0, end)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupRec {
    pub step: u32,
    pub moe_layer: u32,
    /// Routed (token, expert) slots of the group: top-k x tokens, over the batch's chunks
    /// (equal to the distinct keys for one token per step; above them when tokens share experts).
    pub slots: u32,
    k0: u32,
    a0: u32,
    p0: u32,
    e0: u32,
    end: u32,
}

/// One step of the batch: how many sequences take part, how many tokens of KV cache they
/// hold together (prompt tokens plus tokens processed so far, this step's included), how many
/// tokens the step produces (one per sequence, more when verified drafts are accepted or a
/// prompt chunk is processed) and whether it processes prompt tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepRec {
    pub sequences: u32,
    pub kv_tokens: u64,
    pub tokens: u32,
    pub prefill: bool,
}

/// The whole replay, in execution order: groups step-major, MoE layers in order. A plan
/// recorded window by window ([`Plans::retire`]) holds only its latest steps: `groups[0]` is
/// group `base_group` of the replay and `steps[0]` step `base_step`; group and step numbers
/// ([`GroupRec::step`], [`Plans::group`], [`History`]) count from the replay's start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plans {
    /// MoE layers per step.
    pub moe_layers: usize,
    /// The retained groups (all of them unless [`Plans::retire`] dropped a prefix).
    pub groups: Vec<GroupRec>,
    /// The retained steps.
    pub steps: Vec<StepRec>,
    /// Replay numbers of `groups[0]` and `steps[0]` (0 until [`Plans::retire`]).
    pub base_group: usize,
    pub base_step: usize,
    /// Units resident before the first step (static pins), never page-ins.
    pub preloaded: Vec<u32>,
    /// Whether the plan has a DRAM tier behind VRAM (`--dram`): its page-ins are DRAM hits
    /// except those in `ssd_reads`.
    pub tiered: bool,
    /// Whether that tier is the OS page cache (`--dram-mode page-cache`): every VMM page-in
    /// and prefetch copies from pageable memory.
    pub page_cache: bool,
    /// (group number, unit) of every page-in read from SSD, in group order (with `tiered`).
    pub ssd_reads: Vec<(u32, u32)>,
    ids: Vec<u32>,
    /// The sequence of each request of each step, step-major: step `s`'s are
    /// `step_seqs[seq_end[s - 1] .. seq_end[s]]` (prefetch predictors that track a sequence read them).
    step_seqs: Vec<u32>,
    seq_end: Vec<u32>,
}

impl Plans {
    /// Empty plans for a model with `moe_layers` MoE layers.
    pub fn new(moe_layers: usize) -> Self {
        Plans {
            moe_layers,
            ..Default::default()
        }
    }

    /// Start a step with `sequences` sequences holding `kv_tokens` tokens of KV in total;
    /// they are sequences `0 .. sequences` (a fixed batch, as hand-made plans have).
    pub fn begin_step(&mut self, sequences: u32, kv_tokens: u64) {
        self.step_seqs.extend(0..sequences);
        self.push_step(StepRec {
            sequences,
            kv_tokens,
            tokens: sequences,
            prefill: false,
        });
    }

    /// Start a step whose requests belong to sequences `seqs` (trace sequence indices, in
    /// batch order), holding `kv_tokens` tokens of KV in total, one token each.
    pub fn begin_step_of(&mut self, seqs: &[u32], kv_tokens: u64) {
        self.begin_chunk_step(seqs, kv_tokens, seqs.len() as u32, false);
    }

    /// Start a step of the chunks of sequences `seqs` (in batch order) holding `kv_tokens`
    /// tokens of KV in total and producing `tokens` tokens; `prefill` when it processes
    /// prompt tokens.
    pub fn begin_chunk_step(&mut self, seqs: &[u32], kv_tokens: u64, tokens: u32, prefill: bool) {
        self.step_seqs.extend_from_slice(seqs);
        self.push_step(StepRec {
            sequences: seqs.len() as u32,
            kv_tokens,
            tokens,
            prefill,
        });
    }

    fn push_step(&mut self, step: StepRec) {
        self.seq_end.push(self.step_seqs.len() as u32);
        self.steps.push(step);
    }

    /// The sequences of step `s`'s requests, in batch order.
    pub fn step_sequences(&self, s: usize) -> &[u32] {
        let s = s - self.base_step;
        let start = if s == 0 { 0 } else { self.seq_end[s - 1] };
        &self.step_seqs[start as usize..self.seq_end[s] as usize]
    }

    /// Group number `gi` of the replay (it must be retained).
    #[inline]
    pub fn group(&self, gi: usize) -> GroupRec {
        self.groups[gi - self.base_group]
    }

    /// Group number `gi`, or `None` when it is not recorded yet (or was retired).
    #[inline]
    pub fn get_group(&self, gi: usize) -> Option<&GroupRec> {
        self.groups.get(gi.checked_sub(self.base_group)?)
    }

    /// Step number `s` of the replay (it must be retained).
    #[inline]
    pub fn step(&self, s: usize) -> StepRec {
        self.steps[s - self.base_step]
    }

    /// The number the next recorded group gets: groups recorded so far, retired included.
    #[inline]
    pub fn end_group(&self) -> usize {
        self.base_group + self.groups.len()
    }

    /// Drop every step before step number `step` (which must be retained or the next one)
    /// with its groups, ids and SSD reads, so a plan recorded and priced window by window
    /// holds a bounded tail; numbers of the kept groups and steps do not change. Returns the
    /// entries dropped from `ssd_reads`.
    pub fn retire(&mut self, step: usize) -> usize {
        let drop_steps = step - self.base_step;
        let drop_groups = self.groups.partition_point(|g| (g.step as usize) < step);
        let id0 = self
            .groups
            .get(drop_groups)
            .map_or(self.ids.len() as u32, |g| g.k0);
        let seq0 = if drop_steps == 0 {
            0
        } else {
            self.seq_end[drop_steps - 1]
        };
        self.base_group += drop_groups;
        let ssd = self
            .ssd_reads
            .partition_point(|&(g, _)| (g as usize) < self.base_group);
        self.ssd_reads.drain(..ssd);
        self.groups.drain(..drop_groups);
        for g in &mut self.groups {
            for o in [&mut g.k0, &mut g.a0, &mut g.p0, &mut g.e0, &mut g.end] {
                *o -= id0;
            }
        }
        self.ids.drain(..id0 as usize);
        self.steps.drain(..drop_steps);
        self.seq_end.drain(..drop_steps);
        self.seq_end.iter_mut().for_each(|e| *e -= seq0);
        self.step_seqs.drain(..seq0 as usize);
        self.base_step = step;
        ssd
    }

    /// What a prefetch predictor may see at group `now`: groups up to `now` (those retained)
    /// and their steps.
    pub fn history(&self, now: usize) -> History<'_> {
        let g = &self.groups[now - self.base_group];
        let step = g.step as usize - self.base_step;
        History {
            moe_layers: self.moe_layers,
            base_group: self.base_group,
            base_step: self.base_step,
            groups: &self.groups[..=now - self.base_group],
            ids: &self.ids[..g.end as usize],
            step_seqs: &self.step_seqs[..self.seq_end[step] as usize],
            seq_end: &self.seq_end[..=step],
        }
    }

    /// Append the group of MoE layer `moe_layer` to the current step. `keys`: distinct
    /// selected expert keys (their count prices expert compute); `accessed`: units the
    /// group needs; `page_ins`: those not resident; `evicted`: units evicted after admission.
    /// One slot per key (one token per sequence).
    pub fn push_group(
        &mut self,
        moe_layer: usize,
        keys: &[u32],
        accessed: &[u32],
        page_ins: &[u32],
        evicted: &[u32],
    ) {
        let slots = keys.len() as u32;
        self.push_group_slots(moe_layer, keys, slots, [accessed, page_ins, evicted]);
    }

    /// [`Plans::push_group`] of a group of `slots` routed (token, expert) slots, with its
    /// `[accessed, page_ins, evicted]` units.
    pub fn push_group_slots(
        &mut self,
        moe_layer: usize,
        keys: &[u32],
        slots: u32,
        [accessed, page_ins, evicted]: [&[u32]; 3],
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
            step: (self.base_step + self.steps.len() - 1) as u32,
            moe_layer: moe_layer as u32,
            slots,
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

    /// Total page-ins over the retained groups (the whole plan unless retired).
    pub fn total_page_ins(&self) -> u64 {
        self.groups.iter().map(|g| (g.e0 - g.p0) as u64).sum()
    }

    /// Total tokens produced by the retained steps (sum of the steps' tokens: one per sequence per step without
    /// verification or prompt chunks).
    pub fn tokens(&self) -> u64 {
        self.steps.iter().map(|s| s.tokens as u64).sum()
    }
}

/// The past of a replay as a prefetch predictor sees it at group `now`: groups `0 ..= now`
/// (keys, accessed units, page-ins; the router of `now` has just picked its keys) and the
/// sequences of their steps. It holds only those prefixes of the plan, so nothing it returns
/// can come from a later group: a predictor built on it cannot read the future.
#[derive(Clone, Copy)]
pub struct History<'a> {
    moe_layers: usize,
    /// Replay numbers of `groups[0]` and of the first step `seq_end` covers.
    base_group: usize,
    base_step: usize,
    groups: &'a [GroupRec],
    ids: &'a [u32],
    step_seqs: &'a [u32],
    seq_end: &'a [u32],
}

/// One group as [`History`] shows it.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    pub step: usize,
    pub moe_layer: usize,
    /// Distinct selected keys (the batch's union).
    pub keys: &'a [u32],
    /// Units the group accessed.
    pub accessed: &'a [u32],
    /// The sequences of the group's step, in batch order.
    pub sequences: &'a [u32],
}

impl<'a> History<'a> {
    /// The index of the current group.
    pub fn now(&self) -> usize {
        self.base_group + self.groups.len() - 1
    }

    /// MoE layers per step.
    pub fn moe_layers(&self) -> usize {
        self.moe_layers
    }

    /// Group `g`, or `None` when it comes after the current one (or, in a plan recorded
    /// window by window, before the retained tail, which holds at least the last step).
    pub fn group(&self, g: usize) -> Option<Seen<'a>> {
        let r = self.groups.get(g.checked_sub(self.base_group)?)?;
        let step = r.step as usize - self.base_step;
        let start = if step == 0 { 0 } else { self.seq_end[step - 1] };
        Some(Seen {
            step: r.step as usize,
            moe_layer: r.moe_layer as usize,
            keys: &self.ids[r.k0 as usize..r.a0 as usize],
            accessed: &self.ids[r.a0 as usize..r.p0 as usize],
            sequences: &self.step_seqs[start as usize..self.seq_end[step] as usize],
        })
    }

    /// The current group.
    pub fn current(&self) -> Seen<'a> {
        self.group(self.now())
            .expect("a history holds its current group")
    }
}
