//! The result of a mechanism: every expert instance (key) mapped to commit units.

use crate::mechanisms::Paging;
use serde::{Deserialize, Serialize};

/// One commit unit: what a mechanism commits and maps as one piece.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitInfo {
    /// Expert bytes inside the unit.
    pub useful_bytes: u64,
    /// Bytes committed for the unit: useful bytes rounded up to the granule (VMM) or page (OS).
    pub committed_bytes: u64,
    /// Expert instances (keys) with bytes inside the unit.
    pub experts: u32,
    /// First and last MoE layer index (KeySpace numbering) of the experts inside; equal unless
    /// the unit spans layers (regions).
    pub first_moe_layer: u32,
    /// Last MoE layer index of the experts inside (see `first_moe_layer`).
    pub last_moe_layer: u32,
}

/// Every key's units. Key k occupies units `key_first[k] .. key_first[k] + key_count[k]`
/// (one unit for `e*` and `region:*`, a run of pages for `os*`). Keys follow
/// `traces::KeySpace` numbering.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitMap {
    /// The resolved mechanism spec, e.g. `e2:hot`.
    pub spec: String,
    /// How the units are committed (VMM granules or OS pages), as the mechanism states it.
    pub paging: Paging,
    /// Bytes of one expert.
    pub expert_bytes: u64,
    /// Commit granularity in bytes (VMM granule, or OS page size for `os*`).
    pub granule_bytes: u64,
    /// Per key (`num_keys` entries): index into `units` of the key's first unit.
    pub key_first: Vec<u32>,
    /// Per key (`num_keys` entries): units the key occupies, >= 1.
    pub key_count: Vec<u32>,
    /// Every commit unit of the model, indexed by unit id.
    pub units: Vec<UnitInfo>,
}

impl UnitMap {
    /// Units of key `k`.
    #[inline]
    pub fn units_of(&self, k: u32) -> std::ops::Range<u32> {
        let f = self.key_first[k as usize];
        f..f + self.key_count[k as usize]
    }

    /// Number of units.
    pub fn num_units(&self) -> usize {
        self.units.len()
    }

    /// A map in which every key lies in exactly one unit, `key_first[k]` (e* and region:*).
    pub fn one_unit_per_key(
        spec: String,
        paging: Paging,
        expert_bytes: u64,
        granule_bytes: u64,
        key_first: Vec<u32>,
        units: Vec<UnitInfo>,
    ) -> UnitMap {
        UnitMap {
            spec,
            paging,
            expert_bytes,
            granule_bytes,
            key_count: vec![1; key_first.len()],
            key_first,
            units,
        }
    }
}
