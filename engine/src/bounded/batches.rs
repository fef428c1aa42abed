//! The batches of a retention run over a trace file, formed from the round-robin requests
//! ([`super::source::RoundRobin`]) as [`crate::cache::schedule::form_batches`] forms them:
//! FIFO, `batch` requests at a time in arrival order; or route-aware, each batch picked among
//! the `queue` oldest waiting requests ([`crate::cache::schedule::pick_batch`]), which are
//! all this source holds. A request is one step of a sequence: one token, or the chunk of
//! `batching.stepping`. With a queue, each request's dispatch delay is counted by value
//! ([`DelayCounts`]) for the `schedule` block. With `batching.recorded`, the batches are the
//! trace's own forward passes, with `continuous` a scheduler's ([`super::recorded::RecordedPasses`]).

use super::source::{RecordPos, RoundRobin};
use crate::cache::schedule::{check_batching, pick_batch, record_units, DelayCounts, Union};
use crate::cache::{Batching, Schedule};
use anyhow::Result;
use policies::UnitMap;
use std::collections::VecDeque;
use std::path::Path;
use traces::{KeySpace, PhaseSel};

/// A request waiting in the route-aware window: its arrival number, place and records.
struct Waiting {
    arrival: u64,
    pos: RecordPos,
    ids: Vec<u16>,
}

/// The batches of a trace file's requests (see the module documentation).
pub struct Batches<'a> {
    src: RoundRobin,
    /// Forward passes, recorded or scheduled (`--batching`; then `src` is unused).
    recorded: Option<super::recorded::RecordedPasses>,
    ks: &'a KeySpace,
    map: &'a UnitMap,
    batch: usize,
    /// The route-aware window's length; `None` for FIFO.
    window: Option<usize>,
    waiting: VecDeque<Waiting>,
    union: Union,
    arrivals: u64,
    dispatched: u64,
    /// Dispatch delays, counted when a queue was given.
    delays: Option<DelayCounts>,
}

impl<'a> Batches<'a> {
    /// The batches of `batching` (its stepping's chunk per request) over the tokens of `phases` of the
    /// trace file `path`, whose key space is `ks`, for `map`'s units; errors as
    /// [`crate::cache::schedule::form_batches`] does for a batch of 0 or a queue below it.
    pub fn open(
        path: &Path,
        phases: PhaseSel,
        ks: &'a KeySpace,
        map: &'a UnitMap,
        batching: Batching,
    ) -> Result<Batches<'a>> {
        Batches::open_with(path, phases, ks, map, batching, super::source::BUFFER_BYTES)
    }

    /// [`Batches::open`] with `buffer_bytes` of record buffers ([`RoundRobin::open_with`]).
    pub fn open_with(
        path: &Path,
        phases: PhaseSel,
        ks: &'a KeySpace,
        map: &'a UnitMap,
        batching: Batching,
        buffer_bytes: usize,
    ) -> Result<Batches<'a>> {
        check_batching(batching.batch, batching.queue)?;
        let window = (batching.schedule == Schedule::RouteAware)
            .then(|| batching.queue.unwrap_or(batching.batch));
        let recorded = (!batching.source.is_fixed())
            .then(|| super::recorded::RecordedPasses::open(path, phases, batching.source))
            .transpose()?;
        Ok(Batches {
            src: RoundRobin::open_with(path, phases, batching.stepping, buffer_bytes)?,
            recorded,
            ks,
            map,
            batch: batching.batch,
            window,
            waiting: VecDeque::new(),
            union: Union::new(map.num_units()),
            arrivals: 0,
            dispatched: 0,
            delays: batching.queue.map(|_| DelayCounts::default()),
        })
    }

    /// The next batch's records (each request's chunk, in batch order) into `records` and
    /// their places into `pos`; false after the last request.
    pub fn next(&mut self, records: &mut Vec<u16>, pos: &mut Vec<RecordPos>) -> Result<bool> {
        if let Some(r) = &mut self.recorded {
            return r.next(records, pos);
        }
        records.clear();
        pos.clear();
        match self.window {
            None => {
                while pos.len() < self.batch {
                    let Some(r) = self.src.next_record()? else {
                        break;
                    };
                    records.extend_from_slice(r);
                    pos.push(self.src.last_pos());
                }
                if let Some(d) = &mut self.delays {
                    (0..pos.len()).for_each(|_| d.add(0));
                }
            }
            Some(w) => self.pick(w, records, pos)?,
        }
        Ok(!pos.is_empty())
    }

    /// Fill the window to `w` requests and pick the next route-aware batch from it.
    fn pick(&mut self, w: usize, records: &mut Vec<u16>, pos: &mut Vec<RecordPos>) -> Result<()> {
        while self.waiting.len() < w {
            let Some(r) = self.src.next_record()? else {
                break;
            };
            let ids = r.to_vec();
            self.waiting.push_back(Waiting {
                arrival: self.arrivals,
                pos: self.src.last_pos(),
                ids,
            });
            self.arrivals += 1;
        }
        if self.waiting.is_empty() {
            return Ok(());
        }
        let candidates = self
            .waiting
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut units = Vec::new();
                for rec in r.ids.chunks_exact(self.ks.ids_per_token()) {
                    record_units(self.ks, self.map, rec, &mut units);
                }
                (i, units)
            })
            .collect();
        let mut picked = pick_batch(candidates, self.batch, &mut self.union);
        for &i in &picked {
            let r = &self.waiting[i];
            records.extend_from_slice(&r.ids);
            pos.push(r.pos);
            if let Some(d) = &mut self.delays {
                d.add(self.dispatched as i64 - r.arrival as i64);
            }
            self.dispatched += 1;
        }
        // drop the picked from the back, so the indices of the others do not move
        picked.sort_unstable();
        for &i in picked.iter().rev() {
            self.waiting.remove(i);
        }
        Ok(())
    }

    /// The dispatch delays counted (with a queue).
    pub fn delays(&self) -> Option<&DelayCounts> {
        self.delays.as_ref()
    }
}
