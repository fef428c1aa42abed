//! The `--threads` flag of `sim sweep` and `sim compare`: how many of a grid's cells run at
//! once, on a rayon pool of that size.

use anyhow::{Context, Result};
use clap::Args;

/// Worker threads for a grid's cells.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct ThreadsArgs {
    /// Worker threads (default: one per core, or `RAYON_NUM_THREADS` when that is set).
    /// Results do not depend on it. Peak memory grows with it: each timed cell (`--hw`) holds
    /// its own passes, 85 MiB (LRU) to 106 MiB (Belady) for a DeepSeek-V3 trace (BENCHMARKS.md
    /// "Bounded-memory replay"), so lower it to bound a timed grid's memory on a many-core
    /// host.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

impl ThreadsArgs {
    /// The result of `work`, run on a pool of `--threads` workers when given, else on rayon's
    /// global pool (one worker per core, or `RAYON_NUM_THREADS`). Errors: the pool could not
    /// be started.
    pub fn install<T: Send>(&self, work: impl FnOnce() -> T + Send) -> Result<T> {
        match self.threads {
            Some(n) => Ok(rayon::ThreadPoolBuilder::new()
                .num_threads(n.into())
                .build()
                .context("--threads: starting the worker threads")?
                .install(work)),
            None => Ok(work()),
        }
    }
}
