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
use super::{check_retention, Files, Passes, Retained, Stream};
use crate::cache::{Batching, ProfileStats};
use crate::engine::build::empty_plans;
use crate::runner::{RunConfig, RunReport};
use crate::verify_report::StepsTally;
use anyhow::Result;
use policies::UnitMap;

/// The untimed run of `cfg` (with a stepping) over the files `f`, with its mechanism's
/// passes `stream`.
pub(crate) fn run_once(
    cfg: &RunConfig,
    f: &Files,
    stream: &Stream,
    tick: super::Tick,
) -> Result<RunReport> {
    let profile = stream.unit_profile();
    Ok(replay(cfg, f, &stream.map, &profile, tick)?.report(cfg, f, stream))
}

/// The replay of `cfg` (untimed, with a stepping) over the files `f` with the mechanism's
/// unit map `map` and the pinning policies' statistics `profile`: a tokens/s target's budget
/// search and an offline policy's next uses take untimed passes of their own over the same
/// chunks, then one recording pass gives the cache outcome and the `steps` block. It needs
/// nothing else of the streaming pass, so it may run beside it ([`super::run_file`]).
pub(crate) fn replay(
    cfg: &RunConfig,
    f: &Files,
    map: &UnitMap,
    profile: &ProfileStats,
    tick: super::Tick,
) -> Result<SteppedRun> {
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
        map,
        phases: cfg.phase,
        batching,
        tick,
    };
    let mut next = None;
    let resolved = match &cfg.retention {
        Some(rc) => {
            check_retention(f, rc)?;
            Some(passes.resolve(rc, profile, &mut next)?)
        }
        None => None,
    };
    let cache = resolved.as_ref().map(|(c, _)| c);
    let (sim, next) = driver(&passes, cache, profile, next)?;
    let mut plans = empty_plans(f.ks.num_moe_layers(), map, sim.as_ref());
    let mut src = Batches::open(f.trace, cfg.phase, &f.ks, map, batching)?;
    let mut rec = Recorder::new(f, map, &cfg.stepping, sim, next, tick);
    // nothing prices the plan: each full window is tallied already and retired whole
    let (tokens, accesses) = rec.record(&mut src, &mut plans, |p| {
        p.retire(p.base_step + p.steps.len());
        true
    })?;
    let tally = rec.tally.take().expect("a stepped run tallies its steps");
    let recorded = Recorded {
        sim: rec.sim,
        tokens,
        schedule: src.delays().map(|d| d.report(accesses, tokens)),
        steps: None,
    };
    Ok(SteppedRun {
        retention: retained(cfg.retention.clone(), recorded, resolved),
        tally,
    })
}

/// A stepped replay ([`replay`]) waiting for the streaming pass's blocks of its report.
pub(crate) struct SteppedRun {
    retention: Option<Retained>,
    tally: StepsTally,
}

impl SteppedRun {
    /// The report of `cfg`'s run with the streaming pass `stream` of its mechanism.
    pub(crate) fn report(self, cfg: &RunConfig, f: &Files, stream: &Stream) -> RunReport {
        let mut report = stream.report_retained(cfg, f, self.retention);
        report.steps = Some(self.tally.finish(&cfg.stepping));
        report
    }
}
