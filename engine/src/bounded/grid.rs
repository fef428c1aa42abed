//! A grid of runs on one trace file, sharing its passes: the runs of one mechanism share the
//! profile and streaming passes, and those that also step alike (one batch size, one source of steps: round-robin or forward passes) share one replay
//! pass (and one next-use computation), which decodes the file once and feeds every run's
//! simulator, block by block, the runs of a block in parallel (rayon), each run's policy on
//! its concrete type where that matters (`cell_of`). Each run's report is
//! [`super::run_file`]'s (and so [`crate::runner::run`]'s) for it, bit for bit.

use super::{check_retention, next_use, Files, Passes, Stream};
use crate::cache::{self, CacheConfig, CacheOutcome, CacheSim, ProfileStats};
use crate::runner::{RunConfig, RunReport};
use anyhow::Result;
use policies::retention::EvictionPolicy;
use policies::UnitMap;
use rayon::prelude::*;
use std::path::Path;

/// Accesses in a block the runs step through together (1 M: 4 MiB of unit ids, plus their
/// next uses when a run reads them; four blocks are alive at once, [`Passes::blocks`]). Each
/// block costs the runs one rayon hand-out, a few µs against the milliseconds they spend on it.
const BLOCK_ACCESSES: usize = 1 << 20;

/// Every run of `cfgs` (each one [`super::supports`] covers) on the trace file `trace`, results
/// in `cfgs` order; `done(n)`: n more runs are done. The outer error is the files' (a header
/// that cannot be read); each run's own error is its entry's.
pub fn sweep_file(
    cfgs: &[RunConfig],
    trace: &Path,
    profile: Option<&Path>,
    done: &(dyn Fn(u64) + Sync),
) -> Result<Vec<Result<RunReport>>> {
    let f = Files::open(trace, profile)?;
    let mut out: Vec<Option<Result<RunReport>>> = (0..cfgs.len()).map(|_| None).collect();
    // runs of one mechanism, in order of first appearance
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, c) in cfgs.iter().enumerate() {
        let same = |j: &usize| {
            let d = &cfgs[*j];
            (&d.policy, d.phase, d.sizes) == (&c.policy, c.phase, c.sizes)
        };
        match groups.iter_mut().find(|g| same(&g[0])) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    for g in groups {
        let pinning = g.iter().any(|&i| {
            cfgs[i]
                .retention
                .as_ref()
                .is_some_and(|r| r.cache.policy.needs_profile())
        });
        let stream = match Stream::new(&cfgs[g[0]], &f, pinning, &|_| {}) {
            Ok(s) => s,
            // a damaged trace file is the whole grid's error, as when loading it
            Err(e) if e.chain().any(|c| c.is::<traces::TraceError>()) => return Err(e),
            Err(_) => {
                // every run of the mechanism fails the same way: give each its own error
                for &i in &g {
                    out[i] = Some(super::run_file(&cfgs[i], trace, profile, &|_| {}));
                }
                done(g.len() as u64);
                continue;
            }
        };
        // the runs that step alike: one batch size and one source of steps
        let mut batches: Vec<(usize, cache::StepSource)> = Vec::new();
        for &i in &g {
            match &cfgs[i].retention {
                None => out[i] = Some(Ok(stream.report(&cfgs[i], &f, None))),
                Some(rc) if !batches.contains(&steps_of(rc)) => batches.push(steps_of(rc)),
                Some(_) => {}
            }
        }
        for steps in batches {
            let runs: Vec<usize> = g
                .iter()
                .copied()
                .filter(|&i| cfgs[i].retention.as_ref().map(steps_of) == Some(steps))
                .collect();
            for (i, r) in replay_runs(cfgs, &runs, &f, &stream)? {
                out[i] = Some(r);
            }
        }
        done(g.len() as u64);
    }
    Ok(out
        .into_iter()
        .map(|r| r.expect("every run was given a result"))
        .collect())
}

/// The retention runs `runs` of `cfgs` (one mechanism, one batch size) in one replay pass.
fn replay_runs(
    cfgs: &[RunConfig],
    runs: &[usize],
    f: &Files,
    stream: &Stream,
) -> Result<Vec<(usize, Result<RunReport>)>> {
    let profile = stream.unit_profile();
    let mut results = Vec::new();
    let mut live: Vec<(usize, Box<dyn Cell>)> = Vec::new();
    for &i in runs {
        let rc = cfgs[i].retention.as_ref().expect("a retention run");
        match check_retention(f, rc).and_then(|_| cell_of(&stream.map, &rc.cache, &profile)) {
            Ok(c) => live.push((i, c)),
            Err(e) => results.push((i, Err(e))),
        }
    }
    if live.is_empty() {
        return Ok(results);
    }
    let cfg0 = &cfgs[live[0].0];
    // the runs of one batch size and source: FIFO batches of round-robin requests, or the
    // forward passes (recorded or scheduled), as the grid's
    let (batch, source) = steps_of(cfg0.retention.as_ref().expect("a retention run"));
    let replay = Passes {
        trace: f.trace,
        ks: &f.ks,
        map: &stream.map,
        phases: cfg0.phase,
        batching: crate::cache::Batching {
            batch,
            source,
            ..Default::default()
        },
        tick: &|_| {},
    };
    let offline: Vec<bool> = live
        .iter()
        .map(|(i, _)| {
            cfgs[*i]
                .retention
                .as_ref()
                .is_some_and(|r| r.cache.policy.needs_next_use())
        })
        .collect();
    let stepped = match offline
        .iter()
        .any(|&o| o)
        .then(|| replay.next_uses())
        .transpose()
    {
        Ok(next) => step_all(&replay, &mut live, &offline, next),
        Err(e) => Err(e),
    };
    match stepped {
        Ok(tokens) => {
            for (i, mut cell) in live {
                let out = cell.finish(tokens);
                let rc = cfgs[i].retention.clone().expect("a retention run");
                results.push((i, Ok(stream.report(&cfgs[i], f, Some((rc, out))))));
            }
        }
        // an error of the pass itself (the file, the stream's length) is every run's
        Err(e) => {
            for (i, _) in live {
                results.push((i, Err(anyhow::anyhow!("{e:#}"))));
            }
        }
    }
    Ok(results)
}

/// How a retention run steps: its batch size and where its steps come from; the runs that
/// step alike share one replay pass.
fn steps_of(rc: &cache::RetentionConfig) -> (usize, cache::StepSource) {
    (rc.batching.batch, rc.batching.source)
}

/// Step every simulator of `sims` over the stream of `replay`, block by block, in parallel;
/// `offline[k]`: simulator k reads the next uses; the blocks are formed on a thread of their
/// own ([`Passes::blocks`]). Returns the stream's tokens.
fn step_all(
    replay: &Passes,
    sims: &mut [(usize, Box<dyn Cell>)],
    offline: &[bool],
    mut next: Option<next_use::NextUses>,
) -> Result<u64> {
    let streamed = replay.blocks(BLOCK_ACCESSES, |b| {
        let nexts = next.as_mut().map(|n| n.take(b.units.len())).transpose()?;
        // one run per task: the runs' costs differ by 10x (LFU against FIFO), so an even
        // split of the list would leave one thread idle while the other steps the dear ones
        sims.par_iter_mut()
            .with_max_len(1)
            .zip(offline)
            .for_each(|((_, cell), &off)| cell.block(&b.units, &b.starts, nexts.filter(|_| off)));
        Ok(())
    })?;
    Ok(streamed.tokens)
}

/// One cell's simulator behind one virtual call per block of groups, not per access: its
/// policy is its concrete type, so the simulator's calls into it are static (and inlined).
trait Cell: Send {
    /// Step through the groups `units[starts[k]..starts[k + 1]]` in order, each with its
    /// next uses from `next` (same indices as `units`) when the policy reads them.
    fn block(&mut self, units: &[u32], starts: &[usize], next: Option<&[u64]>);
    /// The outcome of the stream, `tokens` tokens long, once every block was stepped.
    fn finish(&mut self, tokens: u64) -> CacheOutcome;
}

impl<P: ?Sized + EvictionPolicy> Cell for CacheSim<'static, P> {
    fn block(&mut self, units: &[u32], starts: &[usize], next: Option<&[u64]>) {
        for w in starts.windows(2) {
            self.group_next(&units[w[0]..w[1]], next.map(|n| &n[w[0]..w[1]]));
        }
    }

    fn finish(&mut self, tokens: u64) -> CacheOutcome {
        self.add_tokens(tokens);
        CacheOutcome {
            cache: self.report(),
            tiers: self.tiers(),
        }
    }
}

/// The cell of `cfg` over `map`'s units, its policy on its concrete type where
/// [`cache::concrete::with_simulator`] has one.
fn cell_of(map: &UnitMap, cfg: &CacheConfig, profile: &ProfileStats) -> Result<Box<dyn Cell>> {
    struct Boxed;
    impl cache::concrete::OnSimulator<'static> for Boxed {
        type Out = Result<Box<dyn Cell>>;
        fn on<P: ?Sized + EvictionPolicy + 'static>(
            self,
            sim: Result<(CacheSim<'static, P>, Vec<u32>), cache::CacheError>,
        ) -> Self::Out {
            Ok(Box::new(sim?.0))
        }
    }
    cache::concrete::with_simulator(map, cfg, profile, None, Boxed)
}
