//! The cells of a grid (`sim sweep`, `sim compare`) on one trace and its profile trace, each
//! run the way that holds the least memory and gives the same report: on a trace file, the
//! untimed cells [`super::supports`] covers through [`super::grid::sweep_file`] (sharing its
//! passes), every other cell (timed ones, queues, schedules, tokens/s targets, several
//! tokens per step) through [`super::run_file`] (in parallel); the trace is never loaded.
//! A cell whose timed run admits
//! no sequence under the admission cap is marked "does not fit" and given its untimed run, as
//! a grid words it. Every report is [`crate::runner::run`]'s on the loaded trace, bit for bit
//! (`sim/tests/bounded_cells.rs`).

use crate::grid::does_not_fit;
use crate::runner::{self, RunConfig, RunReport, Workload};
use anyhow::Result;
use rayon::prelude::*;
use std::path::Path;

/// Where a grid's cells read their trace.
pub enum Input<'a> {
    /// A loaded trace (the embedded one, or a caller that holds it): every cell runs on it.
    Loaded(&'a Workload),
    /// A trace file and its profile trace file, streamed by every cell.
    File {
        trace: &'a Path,
        profile: Option<&'a Path>,
    },
}

/// One cell's result: its report, and why it does not fit under the admission cap when its
/// timed run admitted no sequence (the report is then its untimed run with an `admission`
/// block of 0 admitted).
#[derive(Debug)]
pub struct Cell {
    pub report: RunReport,
    pub does_not_fit: Option<String>,
}

/// Every cell of `cfgs` on `input`, results in `cfgs` order; `done(n)`: n more cells are
/// done. The outer error is the input's (a trace file that cannot be read or loaded); each
/// cell's own error is its entry's.
pub fn run_cells(
    cfgs: &[RunConfig],
    input: &Input,
    done: &(dyn Fn(u64) + Sync),
) -> Result<Vec<Result<Cell>>> {
    let first = reports(cfgs, input, done)?;
    // the cells over the cap get their untimed runs, which no cap refuses
    let over: Vec<usize> = (0..cfgs.len())
        .filter(|&i| matches!(&first[i], Err(e) if does_not_fit(e).is_some()))
        .collect();
    let untimed: Vec<RunConfig> = over
        .iter()
        .map(|&i| RunConfig {
            timing: None,
            ..cfgs[i].clone()
        })
        .collect();
    let mut again = reports(&untimed, input, &|_| {})?.into_iter();
    let mut out = Vec::with_capacity(cfgs.len());
    for (cfg, r) in cfgs.iter().zip(first) {
        out.push(match r {
            Ok(report) => Ok(Cell {
                report,
                does_not_fit: None,
            }),
            Err(e) => match does_not_fit(&e) {
                Some(n) => {
                    let untimed = again.next().expect("an untimed run per cell over the cap");
                    untimed.map(|report| over_cap(cfg, report, n))
                }
                None => Err(e),
            },
        });
    }
    Ok(out)
}

/// The cell of `cfg` over the admission cap (`n` says why) from its untimed run's `report`.
fn over_cap(cfg: &RunConfig, mut report: RunReport, n: &crate::engine::NoSequenceFits) -> Cell {
    report.admission = Some(crate::engine::Admission {
        requested: cfg.retention.as_ref().map_or(1, |r| r.batching.batch),
        admitted: 0,
        cap: Some(n.cap),
        limit_mib: Some(n.limit_mib),
    });
    Cell {
        report,
        does_not_fit: Some(n.to_string()),
    }
}

/// The run of every cell of `cfgs` (results in `cfgs` order).
fn reports(
    cfgs: &[RunConfig],
    input: &Input,
    done: &(dyn Fn(u64) + Sync),
) -> Result<Vec<Result<RunReport>>> {
    let (trace, profile) = match input {
        Input::Loaded(w) => return Ok(runner::sweep_with(cfgs, w, &|| done(1))),
        Input::File { trace, profile } => (*trace, *profile),
    };
    // a pass of its own: timed, or untimed beyond what the grid shares
    let (untimed, single): (Vec<usize>, Vec<usize>) =
        (0..cfgs.len()).partition(|&i| super::supports(&cfgs[i]));
    let mut out: Vec<Option<Result<RunReport>>> = (0..cfgs.len()).map(|_| None).collect();
    if !untimed.is_empty() {
        let sub = subset(cfgs, &untimed);
        let results = super::grid::sweep_file(&sub, trace, profile, done)?;
        place(&mut out, &untimed, results);
    }
    let results: Vec<Result<RunReport>> = single
        .par_iter()
        .map(|&i| {
            let r = super::run_file(&cfgs[i], trace, profile, &|_| {});
            done(1);
            r
        })
        .collect();
    place(&mut out, &single, results);
    Ok(out
        .into_iter()
        .map(|r| r.expect("every cell was given a result"))
        .collect())
}

/// The configs of `cfgs` at `idx`, in that order.
fn subset(cfgs: &[RunConfig], idx: &[usize]) -> Vec<RunConfig> {
    idx.iter().map(|&i| cfgs[i].clone()).collect()
}

/// Put `results` (those of the cells at `idx`, in that order) in their places of `out`.
fn place<T>(out: &mut [Option<T>], idx: &[usize], results: Vec<T>) {
    for (&i, r) in idx.iter().zip(results) {
        out[i] = Some(r);
    }
}
