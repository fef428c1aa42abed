//! `region:R`: commit-and-subdivide. Regions of R MiB are committed and experts are packed
//! into them whole (no expert straddles two regions), in layer-major order: every expert of
//! MoE layer 0 (in id order, or hot order with `:hot`), then layer 1, and so on. A region
//! therefore spans layers whenever R is larger than what is left of one layer's bank.
//!
//! A region holds `floor(R / expert bytes)` experts; the last region holds the rest.
//! Committed bytes are, as docs/DESIGN.md defines them for every VMM unit, the useful bytes rounded
//! up to whole granules (not R: a region's unused tail is never mapped).

use super::{check_profile, round_up, BuildContext, BuildError, ChunkOrder, Mechanism, Paging};
use crate::mechanisms::sizes::MIB;
use crate::units::{UnitInfo, UnitMap};

/// Regions of `mib` MiB, experts of each layer in `order` (`Index` or `Hot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// Region size in MiB, >= 1.
    pub mib: u64,
    /// Order of each layer's experts before they are packed into regions.
    pub order: ChunkOrder,
}

impl Mechanism for Region {
    /// `region:R` for index order, `region:R:hot` for hot order.
    fn spec(&self) -> String {
        match self.order {
            ChunkOrder::Index => format!("region:{}", self.mib),
            o => format!("region:{}:{}", self.mib, o.as_str()),
        }
    }

    fn paging(&self) -> Paging {
        Paging::Vmm
    }

    fn needs_profile(&self) -> bool {
        self.order == ChunkOrder::Hot
    }

    fn build(&self, ctx: &BuildContext) -> Result<UnitMap, BuildError> {
        let ks = ctx.keyspace;
        let eb = ctx.sizes.expert_bytes;
        let region_bytes = self.mib * MIB;
        let per_region = region_bytes / eb;
        if per_region == 0 {
            return Err(BuildError::RegionTooSmall {
                region_bytes,
                expert_bytes: eb,
                min_mib: eb.div_ceil(MIB),
            });
        }
        // Regions of `per_region` experts, packed in layer order (they may span layers).
        let regions = (ks.num_keys() as u128).div_ceil(per_region as u128);
        super::check_map_memory(&self.spec(), ks.num_keys(), regions)?;
        let mut key_first = vec![0u32; ks.num_keys()];
        let mut units: Vec<UnitInfo> = Vec::new();
        for m in 0..ks.num_moe_layers() {
            let order: Vec<u16> = match self.order {
                ChunkOrder::Hot => check_profile(ctx, "hot")?.hot_order(ks, m),
                _ => (0..ks.experts[m]).collect(),
            };
            for e in order {
                let open = units
                    .last()
                    .is_some_and(|u| (u.experts as u64) < per_region);
                if !open {
                    units.push(UnitInfo {
                        useful_bytes: 0,
                        committed_bytes: 0,
                        experts: 0,
                        first_moe_layer: m as u32,
                        last_moe_layer: m as u32,
                    });
                }
                let u = units.last_mut().expect("a region was just opened");
                u.experts += 1;
                u.useful_bytes += eb;
                u.last_moe_layer = m as u32;
                key_first[ks.key(m, e) as usize] = (units.len() - 1) as u32;
            }
        }
        for u in &mut units {
            u.committed_bytes = round_up(u.useful_bytes, ctx.sizes.granule_bytes);
        }
        Ok(UnitMap::one_unit_per_key(
            self.spec(),
            self.paging(),
            eb,
            ctx.sizes.granule_bytes,
            key_first,
            units,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanisms::Sizes;
    use traces::{KeySpace, ModelSpec};

    fn build(mib: u64, eb: u64) -> Result<UnitMap, BuildError> {
        let ks = KeySpace::new(&ModelSpec::uniform("t", 2, 4, 2));
        let ctx = BuildContext {
            keyspace: &ks,
            sizes: Sizes {
                expert_bytes: eb,
                granule_bytes: 2 * MIB,
                dtype: None,
            },
            profile: None,
        };
        Region {
            mib,
            order: ChunkOrder::Index,
        }
        .build(&ctx)
    }

    #[test]
    fn region_spans_layers() {
        // 3 MiB experts, 10 MiB regions -> 3 experts each: keys {0,1,2},{3,4,5},{6,7}
        let map = build(10, 3 * MIB).unwrap();
        assert_eq!(map.key_first, vec![0, 0, 0, 1, 1, 1, 2, 2]);
        assert_eq!(map.units.len(), 3);
        assert_eq!(
            (map.units[1].first_moe_layer, map.units[1].last_moe_layer),
            (0, 1)
        );
        assert_eq!(map.units[0].useful_bytes, 9 * MIB);
        assert_eq!(map.units[0].committed_bytes, 10 * MIB);
        assert_eq!(map.units[2].useful_bytes, 6 * MIB);
        assert_eq!(map.units[2].committed_bytes, 6 * MIB);
        assert_eq!(map.spec, "region:10");
    }

    #[test]
    fn region_smaller_than_expert_is_an_error() {
        assert_eq!(
            build(2, 3 * MIB),
            Err(BuildError::RegionTooSmall {
                region_bytes: 2 * MIB,
                expert_bytes: 3 * MIB,
                min_mib: 3
            })
        );
        assert!(build(3, 3 * MIB).is_ok());
    }
}
