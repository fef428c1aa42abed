//! `os4k`, `os64k`, `os2m`: OS paging (CUDA managed memory with hints). Every expert is its own
//! run of pages of the chosen size, with no VMM granule; each page is a unit for residency.
//!
//! An expert of B bytes takes `ceil(B / page)` pages; every page commits a whole page and holds
//! `page` useful bytes except the last, which holds the remainder. Units are numbered key by key,
//! pages in address order. The map materialises one unit per page, so its size grows as
//! expert bytes / page size x experts (768 x 768 units for granite in bf16 with 4 KiB pages).

use super::{BuildContext, BuildError, Mechanism, Paging};
use crate::units::{UnitInfo, UnitMap};

/// OS pages of `page_bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OsPages {
    /// Page size in bytes: 4096, 65536 or 2097152.
    pub page_bytes: u64,
}

impl OsPages {
    /// The page sizes with a spec name, smallest first: 4 KiB (the x86-64 base page), 64 KiB
    /// (the ARM64 large base page, also CUDA's managed-memory migration block on some
    /// drivers) and 2 MiB (the x86-64 huge page).
    pub const SIZES: [(&'static str, u64); 3] =
        [("os4k", 4 << 10), ("os64k", 64 << 10), ("os2m", 2 << 20)];
}

impl Mechanism for OsPages {
    fn spec(&self) -> String {
        Self::SIZES
            .iter()
            .find(|(_, b)| *b == self.page_bytes)
            .map_or_else(|| format!("os:{}", self.page_bytes), |(n, _)| n.to_string())
    }

    fn paging(&self) -> Paging {
        Paging::Os
    }

    fn build(&self, ctx: &BuildContext) -> Result<UnitMap, BuildError> {
        let ks = ctx.keyspace;
        let eb = ctx.sizes.expert_bytes;
        let page = self.page_bytes;
        let pages = eb.div_ceil(page);
        let nkeys = ks.num_keys();
        // One unit per page of every expert instance: refuse what the unit ids cannot number
        // or the memory cannot hold before allocating it.
        let total = nkeys as u128 * pages as u128;
        if total > u32::MAX as u128 {
            return Err(BuildError::TooManyUnits {
                spec: self.spec(),
                units: total,
                per_key: pages,
            });
        }
        super::check_map_memory(&self.spec(), nkeys, total)?;
        let mut units = Vec::with_capacity(nkeys * pages as usize);
        let mut key_first = Vec::with_capacity(nkeys);
        for m in 0..ks.num_moe_layers() {
            for _ in 0..ks.experts[m] {
                key_first.push(units.len() as u32);
                for p in 0..pages {
                    units.push(UnitInfo {
                        useful_bytes: page.min(eb - p * page),
                        committed_bytes: page,
                        experts: 1,
                        first_moe_layer: m as u32,
                        last_moe_layer: m as u32,
                    });
                }
            }
        }
        Ok(UnitMap {
            spec: self.spec(),
            paging: self.paging(),
            expert_bytes: eb,
            granule_bytes: page,
            key_count: vec![pages as u32; nkeys],
            key_first,
            units,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanisms::Sizes;
    use traces::{KeySpace, ModelSpec};

    #[test]
    fn partial_last_page() {
        let ks = KeySpace::new(&ModelSpec::uniform("t", 2, 4, 2));
        let ctx = BuildContext {
            keyspace: &ks,
            sizes: Sizes {
                expert_bytes: 10_000,
                granule_bytes: 2 << 20,
                dtype: None,
            },
            profile: None,
        };
        let map = OsPages { page_bytes: 4096 }.build(&ctx).unwrap();
        // 10,000 B = 4096 + 4096 + 1808 -> 3 pages per key, 8 keys
        assert_eq!(map.units.len(), 24);
        assert_eq!(map.units_of(5), 15..18);
        let useful: Vec<u64> = map.units[15..18].iter().map(|u| u.useful_bytes).collect();
        assert_eq!(useful, vec![4096, 4096, 1808]);
        assert!(map.units.iter().all(|u| u.committed_bytes == 4096));
        assert_eq!(map.granule_bytes, 4096);
        assert_eq!(map.spec, "os4k");
    }
}
