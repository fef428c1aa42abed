//! Work lists for one launch of the expert kernels: which expert each block reads and which
//! slots it serves. Pure CPU, so the grouping is tested without a GPU.

/// Most slots one work item serves (the kernel keeps this many activation rows in shared
/// memory and accumulators in registers). Compile-time constant of `cuda/moe.cu` (`moe_matvec_t8`).
pub const MAX_SLOTS_PER_ITEM: usize = 8;

/// How a launch maps slots to blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// One work item per slot: an expert named by k slots is read k times (the L2 may absorb repeats).
    PerSlot,
    /// Slots naming the same expert share a work item (up to [`MAX_SLOTS_PER_ITEM`]), so each
    /// distinct expert is read once per item.
    Union,
}

/// A launch's work: `items` holds 4 `u32` per item (expert pointer low, high, first index into
/// `slot_list`, slot count); `slot_list` the slots in item order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkList {
    pub items: Vec<u32>,
    pub slot_list: Vec<u32>,
}

impl WorkList {
    /// Number of work items (grid rows of the launch).
    pub fn len(&self) -> usize {
        self.items.len() / 4
    }
    /// True when there is no slot to compute.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Largest slot count of any item (sizes the shared memory of the launch).
    pub fn max_slots(&self) -> usize {
        self.items
            .chunks_exact(4)
            .map(|i| i[3] as usize)
            .max()
            .unwrap_or(0)
    }

    /// Builds the work list of `variant` for slots whose expert weights start at `expert_ptrs[slot]`
    /// (device addresses). Union items follow the order of each expert's first slot, and an expert
    /// named by more than [`MAX_SLOTS_PER_ITEM`] slots gets several items.
    pub fn build(variant: Variant, expert_ptrs: &[u64]) -> Self {
        Self::build_capped(variant, expert_ptrs, MAX_SLOTS_PER_ITEM)
    }

    /// [`WorkList::build`] with at most `max_slots` (clamped to 1..=[`MAX_SLOTS_PER_ITEM`]) slots
    /// per union item: a launch lowers it when `max_slots` activation rows would not fit in a
    /// block's shared memory.
    pub fn build_capped(variant: Variant, expert_ptrs: &[u64], max_slots: usize) -> Self {
        let max_slots = max_slots.clamp(1, MAX_SLOTS_PER_ITEM);
        let mut groups: Vec<(u64, Vec<u32>)> = Vec::new();
        match variant {
            Variant::PerSlot => {
                groups.extend(
                    expert_ptrs
                        .iter()
                        .enumerate()
                        .map(|(s, &p)| (p, vec![s as u32])),
                );
            }
            Variant::Union => {
                let mut index = std::collections::HashMap::new();
                for (s, &p) in expert_ptrs.iter().enumerate() {
                    let g = *index.entry(p).or_insert_with(|| {
                        groups.push((p, Vec::new()));
                        groups.len() - 1
                    });
                    groups[g].1.push(s as u32);
                }
            }
        }
        let mut list = WorkList {
            items: Vec::new(),
            slot_list: Vec::new(),
        };
        for (ptr, slots) in groups {
            for chunk in slots.chunks(max_slots) {
                list.items.extend([
                    ptr as u32,
                    (ptr >> 32) as u32,
                    list.slot_list.len() as u32,
                    chunk.len() as u32,
                ]);
                list.slot_list.extend_from_slice(chunk);
            }
        }
        list
    }
}
