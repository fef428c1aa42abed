//! What a real-GPU replay executes, as plain data: per (step, MoE layer) group the keys whose
//! experts run, the units paged in and the units evicted, exactly as the simulator's retention
//! driver decided them (the `sim` crate builds this from its engine plans; `validate` never
//! depends on `sim`). Also the pure-CPU layout helpers the replay uses: where each unit and key
//! lives in the reserved address range, the kernel geometry that reads one expert, and the
//! coalescing of page lists into address ranges. Tested on CI without a GPU.

use crate::host::lane_replay::LaneCall;
use kernels::ExpertGeometry;
use policies::{Paging, UnitMap};

/// One (step, MoE layer) group of the replay. `keys`: the distinct selected expert keys
/// (`traces::KeySpace` numbering; one kernel slot each); `page_ins`: units not resident at the
/// group; `evicted`: units evicted after admission (units resident before the group are
/// decommitted at the router, units paged in by this group after its expert compute).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayGroup {
    /// Decode step, from 0.
    pub step: u32,
    /// MoE layer index (dense layers not counted).
    pub moe_layer: u32,
    /// Distinct selected expert keys, one kernel slot each.
    pub keys: Vec<u32>,
    /// Units paged in for this group.
    pub page_ins: Vec<u32>,
    /// Units evicted after admission.
    pub evicted: Vec<u32>,
    /// Expert calls the engine's CPU lane ran for this group, run on the host CPU beside
    /// the GPU's `keys` (a composed replay, [`crate::replay_cpu`]); empty otherwise.
    pub cpu_calls: Vec<LaneCall>,
    /// Units paged in off the critical path (`--cpu-experts misses`): committed and copied
    /// after the group's launches, waited for only by a later group whose GPU keys read them.
    pub background: Vec<u32>,
    /// Bytes of the group's activations crossing PCIe one way for its CPU calls (bf16,
    /// hidden x 2 per token); 0 without CPU calls.
    pub activation_bytes: u64,
}

/// Everything the replay executes, in order (groups step-major, MoE layers in order).
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayPlan {
    /// How units are committed and paged in. VMM units: cuMemCreate + cuMemMap +
    /// cuMemSetAccess per granule, then an H2D copy of the unit's useful bytes from pinned host
    /// memory; eviction = cuMemUnmap + cuMemRelease per granule. OS pages: one managed
    /// allocation the expert kernels fault in on demand; eviction = cuMemPrefetchAsync of the
    /// evicted pages back to host memory (on a side stream).
    pub paging: Paging,
    /// Every group, step-major, MoE layers in order.
    pub groups: Vec<ReplayGroup>,
    /// Units resident before the first step (static pins): committed before timing starts.
    pub preloaded: Vec<u32>,
    /// Decode steps (the groups' `step` runs over `0..steps`), warm-up steps included.
    pub steps: usize,
    /// The first steps, replayed for real (commits, copies, kernels, evictions) but left out of
    /// the measurement: a retention row's cache fills during them
    /// ([`crate::warmup::SteadyRule`] chooses how many). The measured steps are
    /// `warmup_steps..steps`.
    pub warmup_steps: usize,
    /// MoE layers per step (the groups' `moe_layer` runs over `0..moe_layers`).
    pub moe_layers: usize,
    /// Model hidden size: the expert kernels' input width.
    pub hidden: usize,
    /// Non-expert weight bytes read per MoE layer per step (the simulator's non-expert
    /// compute, KV read excluded); 0 = no non-expert kernel.
    pub nonexpert_bytes_per_layer: u64,
}

/// Quantization group of the replay's int4 expert kernels (one f32 scale per 128 weights,
/// the geometry `sim calibrate` measured).
pub const KERNEL_GROUP: usize = 128;

/// The widest int4 expert FFN geometry of input width `hidden` whose bytes fit in
/// `expert_bytes`: `ffn` = the largest multiple of [`KERNEL_GROUP`] with
/// `ExpertGeometry::expert_bytes() <= expert_bytes`, so the kernel reads (nearly) every byte the
/// simulator prices for one expert. `None` when not even `ffn = 128` fits or `hidden` is not a
/// multiple of 128.
pub fn kernel_geometry(hidden: usize, expert_bytes: u64) -> Option<ExpertGeometry> {
    if hidden == 0 || !hidden.is_multiple_of(KERNEL_GROUP) {
        return None;
    }
    let per_ffn = ExpertGeometry::new(hidden, KERNEL_GROUP, KERNEL_GROUP)
        .ok()?
        .expert_bytes() as u64
        / KERNEL_GROUP as u64;
    let mut ffn = (expert_bytes / per_ffn) as usize / KERNEL_GROUP * KERNEL_GROUP;
    while ffn >= KERNEL_GROUP {
        let g = ExpertGeometry::new(hidden, ffn, KERNEL_GROUP).ok()?;
        if g.expert_bytes() as u64 <= expert_bytes {
            return Some(g);
        }
        ffn -= KERNEL_GROUP;
    }
    None
}

/// Address layout of every unit and key inside one reserved range (VMM) or one managed
/// allocation (OS pages), offsets in bytes from its base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Offset of unit u (units back to back, each `committed_bytes` long).
    pub unit_offset: Vec<u64>,
    /// Offset of key k's expert bytes, aligned down to 256 B (the kernels' 16-byte loads).
    pub key_offset: Vec<u64>,
    /// Bytes of the whole range.
    pub total_bytes: u64,
}

impl Layout {
    /// Units back to back in unit order; inside a multi-expert unit (`eN`, `region:R`) its keys
    /// sit in ascending key order, `expert_bytes` apart (the order inside a unit does not change
    /// what is committed or copied); an OS-paged key starts at its first page.
    pub fn of(map: &UnitMap) -> Layout {
        let mut unit_offset = Vec::with_capacity(map.units.len());
        let mut at = 0u64;
        for u in &map.units {
            unit_offset.push(at);
            at += u.committed_bytes;
        }
        let mut next_in_unit = vec![0u64; map.units.len()];
        let key_offset = (0..map.key_first.len() as u32)
            .map(|k| {
                let u = map.key_first[k as usize] as usize;
                let inside = if map.key_count[k as usize] == 1 {
                    let o = next_in_unit[u];
                    next_in_unit[u] += map.expert_bytes;
                    o
                } else {
                    0
                };
                (unit_offset[u] + inside) / 256 * 256
            })
            .collect();
        Layout {
            unit_offset,
            key_offset,
            total_bytes: at,
        }
    }
}

/// Coalesces unit ids into maximal runs of consecutive ids, as (first, count), in ascending
/// order (an OS-paged expert's pages are consecutive units, so one run per expert; one
/// cuMemPrefetchAsync per run instead of one per page).
pub fn runs(units: &[u32]) -> Vec<(u32, u32)> {
    let mut v = units.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for u in v {
        match out.last_mut() {
            Some((f, n)) if *f + *n == u => *n += 1,
            _ => out.push((u, 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use policies::units::UnitInfo;

    fn unit(useful: u64, committed: u64, experts: u32) -> UnitInfo {
        UnitInfo {
            useful_bytes: useful,
            committed_bytes: committed,
            experts,
            first_moe_layer: 0,
            last_moe_layer: 0,
        }
    }

    #[test]
    fn geometry_fills_the_expert_bytes() {
        // hidden 1024, ffn f: bytes = f*1024 (gate+up int4) + 1024*f/2 (down) +
        // 2f*8*4 + 1024*(f/128)*4 (scales) = 1632 f. 16 MiB / 1632 = 10280.2 -> f = 10240.
        let g = kernel_geometry(1024, 16 << 20).unwrap();
        assert_eq!((g.hidden, g.ffn), (1024, 10240));
        assert_eq!(g.expert_bytes(), 1632 * 10240);
        // exactly one group's worth fits; one byte less does not
        assert_eq!(kernel_geometry(1024, 1632 * 128).unwrap().ffn, 128);
        assert!(kernel_geometry(1024, 1632 * 128 - 1).is_none());
        assert!(kernel_geometry(1000, 16 << 20).is_none());
    }

    #[test]
    fn layout_places_units_back_to_back_and_keys_inside() {
        // e2 of 3 MiB experts: two 6 MiB units (3 granules), keys 0,1 in unit 0, keys 2,3 in unit 1
        let mib = 1u64 << 20;
        let map = UnitMap {
            spec: "e2:index".into(),
            paging: Paging::Vmm,
            expert_bytes: 3 * mib,
            granule_bytes: 2 * mib,
            key_first: vec![0, 0, 1, 1],
            key_count: vec![1; 4],
            units: vec![unit(6 * mib, 6 * mib, 2), unit(6 * mib, 6 * mib, 2)],
        };
        let l = Layout::of(&map);
        assert_eq!(l.unit_offset, vec![0, 6 * mib]);
        assert_eq!(l.key_offset, vec![0, 3 * mib, 6 * mib, 9 * mib]);
        assert_eq!(l.total_bytes, 12 * mib);
        // os pages of 4 KiB, expert of 10000 B: 3 pages per key, key k at page 3k
        let map = UnitMap {
            spec: "os4k".into(),
            paging: Paging::Os,
            expert_bytes: 10_000,
            granule_bytes: 4096,
            key_first: vec![0, 3],
            key_count: vec![3, 3],
            units: (0..6).map(|_| unit(4096, 4096, 1)).collect(),
        };
        let l = Layout::of(&map);
        assert_eq!(l.key_offset, vec![0, 3 * 4096]);
        assert_eq!(l.total_bytes, 6 * 4096);
    }

    #[test]
    fn key_offsets_align_down_to_256() {
        let map = UnitMap {
            spec: "e2:index".into(),
            paging: Paging::Vmm,
            expert_bytes: 1000,
            granule_bytes: 4096,
            key_first: vec![0, 0],
            key_count: vec![1, 1],
            units: vec![unit(2000, 4096, 2)],
        };
        assert_eq!(Layout::of(&map).key_offset, vec![0, 768]);
    }

    #[test]
    fn runs_coalesce_consecutive_ids() {
        assert_eq!(
            runs(&[7, 3, 4, 5, 9, 8, 4, 20]),
            vec![(3, 3), (7, 3), (20, 1)]
        );
        assert!(runs(&[]).is_empty());
    }
}
