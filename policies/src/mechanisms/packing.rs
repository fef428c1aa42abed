//! `eN`: N experts of one layer share one VMM chunk (`e1` is one expert per commit).
//!
//! Each MoE layer's experts are put in the chunk order ([`ChunkOrder`]) and cut into chunks of
//! N; the last chunk of a layer holds the remaining `E mod N` experts when N does not divide E.
//! With the `coact` order the chunks are the co-activation groups. A chunk's useful bytes are
//! its experts' bytes; committed bytes are those rounded up to whole granules.
//! Units are numbered layer by layer, chunks in order inside a layer.

use super::{check_profile, round_up, BuildContext, BuildError, ChunkOrder, Mechanism, Paging};
use crate::units::{UnitInfo, UnitMap};

/// N experts of one layer per chunk, in a chunk order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packing {
    /// Experts per chunk, >= 1.
    pub n: u32,
    /// Order of the layer's experts before they are cut into chunks of `n`.
    pub order: ChunkOrder,
}

impl Mechanism for Packing {
    /// `e1` for N = 1 (every order gives the same units), else `eN:<order>`.
    fn spec(&self) -> String {
        if self.n == 1 {
            "e1".to_string()
        } else {
            format!("e{}:{}", self.n, self.order.as_str())
        }
    }

    fn paging(&self) -> Paging {
        Paging::Vmm
    }

    fn needs_profile(&self) -> bool {
        self.n > 1 && self.order != ChunkOrder::Index
    }

    fn needs_coactivation(&self) -> bool {
        self.n > 1 && self.order == ChunkOrder::Coact
    }

    fn build(&self, ctx: &BuildContext) -> Result<UnitMap, BuildError> {
        let ks = ctx.keyspace;
        let eb = ctx.sizes.expert_bytes;
        let max_experts = ks.experts.iter().copied().max().unwrap_or(0);
        if self.n > u32::from(max_experts) && max_experts > 0 {
            return Err(BuildError::TooManyExpertsPerChunk {
                n: self.n,
                max_experts,
            });
        }
        let n = self.n.max(1) as usize;
        let chunks: u128 = ks
            .experts
            .iter()
            .map(|&e| (e as usize).div_ceil(n) as u128)
            .sum();
        super::check_map_memory(&self.spec(), ks.num_keys(), chunks)?;
        let mut key_first = vec![0u32; ks.num_keys()];
        let mut units = Vec::new();
        for m in 0..ks.num_moe_layers() {
            let groups: Vec<Vec<u16>> = match (self.order, n) {
                (_, 1) | (ChunkOrder::Index, _) => (0..ks.experts[m])
                    .collect::<Vec<_>>()
                    .chunks(n)
                    .map(<[u16]>::to_vec)
                    .collect(),
                (ChunkOrder::Hot, _) => check_profile(ctx, "hot")?
                    .hot_order(ks, m)
                    .chunks(n)
                    .map(<[u16]>::to_vec)
                    .collect(),
                (ChunkOrder::Coact, _) => check_profile(ctx, "coact")?
                    .coact_groups(ks, m, n)
                    .ok_or(BuildError::MissingCoactivation)?,
            };
            for g in groups {
                let u = units.len() as u32;
                for &e in &g {
                    key_first[ks.key(m, e) as usize] = u;
                }
                let useful = g.len() as u64 * eb;
                units.push(UnitInfo {
                    useful_bytes: useful,
                    committed_bytes: round_up(useful, ctx.sizes.granule_bytes),
                    experts: g.len() as u32,
                    first_moe_layer: m as u32,
                    last_moe_layer: m as u32,
                });
            }
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
    use crate::mechanisms::{testutil::trace, ProfileStats, Sizes, MIB};
    use traces::PhaseSel;

    fn ctx_build(m: &Packing, eb: u64) -> UnitMap {
        // 2 layers x 5 experts; layer 0 counts: 4:3, 2:2, others 0/1
        let tr = trace(
            2,
            5,
            &[
                vec![vec![4, 2], vec![0, 1]],
                vec![vec![4, 2], vec![0, 1]],
                vec![vec![4, 3], vec![1, 2]],
            ],
        );
        let ks = tr.keyspace();
        let p = ProfileStats::new(&tr, PhaseSel::Decode, true);
        let ctx = BuildContext {
            keyspace: &ks,
            sizes: Sizes {
                expert_bytes: eb,
                granule_bytes: 2 * MIB,
                dtype: None,
            },
            profile: Some(&p),
        };
        m.build(&ctx).unwrap()
    }

    #[test]
    fn n_above_the_expert_count_is_refused_and_n_equal_to_it_is_one_chunk_per_layer() {
        let tr = trace(2, 5, &[vec![vec![4, 2], vec![0, 1]]]);
        let ks = tr.keyspace();
        let ctx = BuildContext {
            keyspace: &ks,
            sizes: Sizes {
                expert_bytes: 3 * MIB,
                granule_bytes: 2 * MIB,
                dtype: None,
            },
            profile: None,
        };
        let e6 = Packing {
            n: 6,
            order: ChunkOrder::Index,
        };
        let err = e6.build(&ctx).unwrap_err();
        assert_eq!(
            err,
            BuildError::TooManyExpertsPerChunk {
                n: 6,
                max_experts: 5
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("at most 5 experts") && msg.contains("largest allowed N is 5"));
        let e5 = Packing {
            n: 5,
            order: ChunkOrder::Index,
        };
        // 2 layers x one chunk of 5 experts x 3 MiB = 15 MiB useful, 16 MiB committed.
        let map = e5.build(&ctx).unwrap();
        assert_eq!(map.units.len(), 2);
        assert_eq!(map.units[0].useful_bytes, 15 * MIB);
        assert_eq!(map.units[0].committed_bytes, 16 * MIB);
    }

    #[test]
    fn e2_index_last_chunk_holds_fewer() {
        let map = ctx_build(
            &Packing {
                n: 2,
                order: ChunkOrder::Index,
            },
            3 * MIB,
        );
        // 5 experts -> chunks {0,1},{2,3},{4} per layer, 6 units
        assert_eq!(map.key_first, vec![0, 0, 1, 1, 2, 3, 3, 4, 4, 5]);
        assert_eq!(map.units[0].useful_bytes, 6 * MIB);
        assert_eq!(map.units[0].committed_bytes, 6 * MIB);
        assert_eq!(map.units[2].useful_bytes, 3 * MIB);
        assert_eq!(map.units[2].committed_bytes, 4 * MIB);
        assert_eq!(map.units[2].experts, 1);
        assert_eq!(map.spec, "e2:index");
    }

    #[test]
    fn e2_hot_follows_profile_counts() {
        let map = ctx_build(
            &Packing {
                n: 2,
                order: ChunkOrder::Hot,
            },
            3 * MIB,
        );
        // layer 0 counts: 0:0,1:0,2:2,3:1,4:3 -> hot 4,2,3,0,1 -> {4,2},{3,0},{1}
        assert_eq!(&map.key_first[..5], &[1, 2, 0, 1, 0]);
        // layer 1 counts: 0:2,1:3,2:1,3:0,4:0 -> hot 1,0,2,3,4 -> {1,0},{2,3},{4}
        assert_eq!(&map.key_first[5..], &[3, 3, 4, 4, 5]);
    }

    #[test]
    fn e1_expert_larger_than_granule() {
        // 5 MiB expert -> 3 granules of 2 MiB = 6 MiB committed
        let map = ctx_build(
            &Packing {
                n: 1,
                order: ChunkOrder::Hot,
            },
            5 * MIB,
        );
        assert_eq!(map.units.len(), 10);
        assert!(map
            .units
            .iter()
            .all(|u| u.committed_bytes == 6 * MIB && u.useful_bytes == 5 * MIB));
        assert_eq!(map.key_first, (0..10).collect::<Vec<u32>>());
        assert_eq!(map.spec, "e1");
    }
}
