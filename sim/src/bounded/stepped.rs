//! Untimed runs with several tokens per step (`--verify K`, `--prefill-chunk C`) on a trace
//! file in bounded memory: the batches of the steps' chunks ([`super::batches::Batches`] over
//! [`super::source::RoundRobin`], which draws each sequence's acceptances lazily from its own
//! PCG stream) are recorded into a plan a window at a time, as the timed path records them
//! ([`super::timed::Recorder`]), each step tallied for the `steps` block as it is recorded
//! and each window retired once full. Memory: the passes of [`super::Stream`], one window of
//! plan and the tally's union histogram. The report is [`crate::runner::run`]'s on the
//! loaded trace, bit for bit (`sim/tests/bounded_steps.rs`).

use super::batches::Batches;
use super::timed::{driver, retained, Recorded, Recorder};
use super::{check_retention, Files, Passes, Stream};
use crate::cache::Batching;
use crate::engine::build::empty_plans;
use crate::runner::{RunConfig, RunReport};
use anyhow::Result;

/// The untimed run of `cfg` (with a stepping) over the files `f`, with its mechanism's
/// passes `stream`: a tokens/s target's budget search and an offline policy's next uses
/// take untimed passes of their own over the same chunks, then one recording pass gives the
/// cache outcome and the `steps` block.
pub(crate) fn run_once(
    cfg: &RunConfig,
    f: &Files,
    stream: &Stream,
    tick: super::Tick,
) -> Result<RunReport> {
    let batching = Batching {
        stepping: cfg.stepping,
        ..cfg
            .retention
            .as_ref()
            .map_or_else(Batching::default, |r| r.batching)
    };
    let passes = Passes {
        trace: f.trace,
        ks: &f.ks,
        map: &stream.map,
        phases: cfg.phase,
        batching,
        tick,
    };
    let profile = stream.unit_profile();
    let mut next = None;
    let resolved = match &cfg.retention {
        Some(rc) => {
            check_retention(f, rc)?;
            Some(passes.resolve(rc, &profile, &mut next)?)
        }
        None => None,
    };
    let cache = resolved.as_ref().map(|(c, _)| c);
    let (sim, next) = driver(&passes, cache, &profile, next)?;
    let mut plans = empty_plans(f.ks.num_moe_layers(), &stream.map, sim.as_ref());
    let mut src = Batches::open(f.trace, cfg.phase, &f.ks, &stream.map, batching)?;
    let mut rec = Recorder::new(f, &stream.map, &cfg.stepping, sim, next, tick);
    // nothing prices the plan: each full window is tallied already and retired whole
    let (tokens, accesses) = rec.record(&mut src, &mut plans, |p| {
        p.retire(p.base_step + p.steps.len());
    })?;
    let tally = rec.tally.take().expect("a stepped run tallies its steps");
    let recorded = Recorded {
        sim: rec.sim,
        tokens,
        schedule: src.delays().map(|d| d.report(accesses, tokens)),
        steps: None,
    };
    let retention = retained(cfg.retention.clone(), recorded, resolved);
    let mut report = stream.report_retained(cfg, f, retention);
    report.steps = Some(tally.finish(&cfg.stepping));
    Ok(report)
}
