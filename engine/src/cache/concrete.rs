//! Which retention policies a simulator runs on their concrete type, named once: the hot
//! loops of a retention run (a single run in memory, a run over a trace file, the cells of a
//! grid) then call the policy statically, with no virtual call per access. The other
//! policies (the pinning ones, whose registry entries check the profile statistics) run
//! through `Box<dyn EvictionPolicy>` as the registry builds them. Both give the same results:
//! the policy code is the same.

use super::{simulator_of, CacheConfig, CacheError, CacheSim, ProfileStats};
use policies::retention::{self, EvictionPolicy, PolicyKind};
use policies::UnitMap;

/// What a caller does with the simulator [`with_simulator`] built for it, whatever the
/// policy type (the result of [`simulator_of`]: the simulator and each unit's pool, or why
/// the configuration is refused).
pub trait OnSimulator<'a> {
    /// What the caller makes of it.
    type Out;
    /// Use the simulator of policy type `P`.
    fn on<P: ?Sized + EvictionPolicy + 'static>(
        self,
        sim: Result<(CacheSim<'a, P>, Vec<u32>), CacheError>,
    ) -> Self::Out;
}

/// [`simulator_of`] for `cfg`, on the policy's concrete type where it has one here (LRU,
/// FIFO, Belady, LFU, ARC, S3-FIFO, random, each built as its registry entry builds it),
/// handed to `then`.
pub fn with_simulator<'a, W: OnSimulator<'a>>(
    map: &UnitMap,
    cfg: &CacheConfig,
    profile: &ProfileStats,
    next_use: Option<&'a [u32]>,
    then: W,
) -> W::Out {
    use retention::{Arc, Belady, Fifo, Lfu, Lru, Random, S3Fifo};
    macro_rules! on {
        ($make:expr) => {
            then.on(simulator_of(map, cfg, profile, next_use, $make))
        };
    }
    match cfg.policy {
        PolicyKind::Lru => on!(|s| Ok(Box::new(Lru::new(s.units)))),
        PolicyKind::Fifo => on!(|s| Ok(Box::new(Fifo::new(s.units)))),
        PolicyKind::Belady => on!(|s| Ok(Box::new(Belady::new(s.units)))),
        PolicyKind::Lfu => on!(|s| Ok(Box::new(Lfu::new(s.units)))),
        PolicyKind::Arc => on!(|s| Ok(Box::new(Arc::new(s.units, s.capacity)))),
        PolicyKind::S3Fifo => on!(|s| Ok(Box::new(S3Fifo::new(s.units, s.capacity)))),
        PolicyKind::Random => on!(|s| Ok(Box::new(Random::new(s.units, s.seed, s.pool)))),
        other => on!(|s| retention::build(other, s)),
    }
}
