//! Retention options shared by `sim run`, `sim sweep` and `sim compare`: eviction policy,
//! budget, split, semantics, tiers, batching and scheduling.

use clap::Args;

/// Retention (cache regime) options. With no `--evict`/`--budget` the run is in the
/// streaming regime.
#[derive(Args, Clone, Debug, Default)]
pub struct CacheArgs {}
