//! `sim curve` over a trace file in bounded memory: the exact curves of [`crate::curve`] from
//! one replay of the file's groups (and, for Belady/MIN, the next-use passes every MIN run
//! takes), beside a pass that validates every record and the checksum.

use super::{each_record, Files, Passes, Stream, Tick, REPLAY_BLOCK_ACCESSES};
use crate::cache::{self, Semantics, Split};
use crate::curve::{CurveReport, Recorder};
use crate::runner::RunConfig;
use anyhow::Result;
use policies::mechanisms::SizeOptions;
use policies::PolicyKind;
use std::path::Path;
use traces::PhaseSel;

/// What one `sim curve` computes.
#[derive(Clone, Debug)]
pub struct CurveConfig {
    /// The mechanism (`--policy`).
    pub mechanism: String,
    pub phase: PhaseSel,
    pub sizes: SizeOptions,
    /// The policies whose curves are recorded (LRU, Belady).
    pub policies: Vec<PolicyKind>,
    pub split: Split,
    pub semantics: Semantics,
}

/// Passes over the file that [`curve_file`] counts in its progress (for a progress bar's
/// length): the profile's key counts when the mechanism orders by them, MIN's first-use pass
/// and the replay (MIN's re-reads and the validating pass run beside the replay, uncounted).
pub fn passes(cfg: &CurveConfig) -> u64 {
    let mech_profile =
        crate::runner::parse_policy(&cfg.mechanism, "--policy").is_ok_and(|m| m.needs_profile());
    let min = cfg.policies.iter().any(|k| k.needs_next_use());
    1 + mech_profile as u64 + min as u64
}

/// The curves of `cfg` over the trace file `path` (`profile` orders the experts of `eN:hot`
/// and `eN:coact` when given, else the trace itself). Memory: the unit map, each policy's
/// stack (a few words per unit), MIN's next-use segments as a MIN run holds them, and the
/// replay's blocks; never the trace's length.
pub fn curve_file(
    cfg: &CurveConfig,
    path: &Path,
    profile: Option<&Path>,
    tick: Tick,
) -> Result<CurveReport> {
    let f = Files::open(path, profile)?;
    let run = RunConfig {
        policy: cfg.mechanism.clone(),
        phase: cfg.phase,
        sizes: cfg.sizes,
        ..RunConfig::default()
    };
    let (map, _) = Stream::unit_map(&run, &f, tick)?;
    let pool_of = cache::driver::pool_layout(&map, cfg.split)?;
    let mut recs = cfg
        .policies
        .iter()
        .map(|&k| Recorder::new(k, &pool_of, cfg.semantics))
        .collect::<Result<Vec<_>, _>>()
        .map_err(cache::CacheError::Input)?;
    let passes = Passes {
        trace: path,
        ks: &f.ks,
        map: &map,
        phases: cfg.phase,
        batching: cache::Batching::default(),
        tick,
    };
    let (valid, replay) = std::thread::scope(|s| {
        let valid = s.spawn(|| each_record(path, "--trace", cfg.phase, &|_| {}, |_| {}));
        (valid.join(), replay(&passes, &mut recs))
    });
    // the validating pass's error first: a replay of a corrupt file is discarded
    valid.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
    let (tokens, accesses) = replay?;
    Ok(CurveReport {
        trace: f.label.clone(),
        mechanism: cfg.mechanism.clone(),
        phase: cfg.phase,
        split: cfg.split,
        semantics: cfg.semantics,
        units: map.num_units(),
        largest_unit_bytes: map
            .units
            .iter()
            .map(|u| u.committed_bytes)
            .max()
            .unwrap_or(1),
        tokens,
        accesses,
        curves: recs.into_iter().map(|r| r.finish(cfg.split)).collect(),
    })
}

/// Feed every group of `passes` (with next uses when a recorder reads them) to `recs`;
/// returns the tokens and accesses.
fn replay(passes: &Passes, recs: &mut [Recorder]) -> Result<(u64, u64)> {
    let mut next = if recs.iter().any(Recorder::reads_next_use) {
        Some(passes.next_uses()?)
    } else {
        None
    };
    let mut accesses = 0u64;
    let streamed = passes.blocks(REPLAY_BLOCK_ACCESSES, |b| {
        let n = next.as_mut().map(|n| n.take(b.units.len())).transpose()?;
        accesses += b.units.len() as u64;
        for w in b.starts.windows(2) {
            let (from, to) = (w[0], w[1]);
            for r in recs.iter_mut() {
                r.group_next(&b.units[from..to], n.map(|n| &n[from..to]));
            }
        }
        Ok(())
    })?;
    Ok((streamed.tokens, accesses))
}
