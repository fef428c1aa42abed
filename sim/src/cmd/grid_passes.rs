//! Where the steps of a grid's retention cells come from on one trace (`sim sweep`,
//! `sim compare`): as in `sim run` ([`CacheArgs::source`]), the trace's recorded forward
//! passes by default when it has them, round-robin batches when `--batch`, `--queue`,
//! `--admission-cap` or several tokens per step ask for them, a scheduler's passes with
//! `--batching continuous`. Decided per trace, since a grid over several traces may hold
//! some with passes and some without.

use super::args_cache::CacheArgs;
use anyhow::{Context, Result};
use sim::runner::RunConfig;
use std::path::Path;

/// Set the step source of every retention cell of `cfgs` run on the trace at `trace` (`None`:
/// the embedded trace, which has no passes). `capped`: the grid has an admission cap. The
/// grid decides once for all its cells (a steps axis with any point of several tokens per
/// step steps every cell round-robin), so its rows stay comparable; a note says when a trace
/// with passes is stepped round-robin without `--batching fixed` asking for it.
pub fn resolve(
    cfgs: &mut [RunConfig],
    cache: &CacheArgs,
    trace: Option<&Path>,
    capped: bool,
) -> Result<()> {
    let has_passes = trace
        .and_then(|p| traces::read_header(p).ok())
        .is_some_and(|h| h.passes.is_some());
    let stepped = cfgs.iter().any(|c| !c.stepping.is_off());
    let name = trace.map_or_else(|| "the embedded trace".into(), |p| p.display().to_string());
    let streamed_timed = cfgs
        .iter()
        .any(|c| c.retention.is_none() && c.timing.is_some());
    if has_passes && streamed_timed {
        eprintln!("{} ({name})", super::run::STREAMING_ROUND_ROBIN);
    }
    if cfgs.iter().all(|c| c.retention.is_none()) {
        return Ok(());
    }
    let source = cache
        .source(has_passes, stepped, capped)
        .with_context(|| format!("--trace {name}"))?;
    for rc in cfgs.iter_mut().filter_map(|c| c.retention.as_mut()) {
        rc.batching.source = source;
    }
    if has_passes && cache.batching.is_none() && source.is_fixed() {
        eprintln!("{} ({name})", super::run::PASSES_NOT_REPLAYED);
    }
    Ok(())
}
