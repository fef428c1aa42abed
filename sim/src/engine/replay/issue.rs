//! Demand-first prefetch issue (`--prefetch-issue demand-first`): prefetches wait in a FIFO
//! that the driver serves only in time no demand work claims, as MoE-Infinity's task pool
//! serves its on-demand queue before its prefetch queues (DESIGN.md, "Prefetch issue
//! policies").
//!
//! The engine advances resource clocks group by group rather than popping events, so the
//! queue is served lazily: before demand work at time `t` takes the driver (an eviction's
//! decommit at a router, a demand page-in, a late eviction after the expert compute), every
//! queued prefetch that could have started before `t` (the driver free, its issue time
//! reached, the cap on bytes in flight met) starts, oldest first; one that starts runs its
//! commit and then its copy to the end (a driver call or a copy cannot be preempted). What
//! could not start by then waits for the next idle time, and is dropped (cancelled, nothing
//! mapped) when its target group's router comes or a demand page-in takes its unit.

use super::{EngineError, State};
use std::collections::VecDeque;

/// The queue and its bookkeeping, per replay.
#[derive(Debug)]
pub(super) struct IssueQueue {
    /// Queued prefetches in issue order: (issue time µs, unit, generation); an entry whose
    /// generation is not its unit's current one was cancelled and is skipped.
    queue: VecDeque<(f64, u32, u32)>,
    generation: Vec<u32>,
    /// `queued[u]`: `u` is prefetched and waiting to start (also `inflight`).
    queued: Vec<bool>,
    /// Started prefetches not known to be finished: (resident at, committed bytes), in
    /// start order (copies are serialized, so also in finishing order), and their bytes.
    started: VecDeque<(f64, u64)>,
    started_bytes: u64,
    pub(super) cancelled: u64,
    pub(super) blocked_us: f64,
}

impl IssueQueue {
    pub(super) fn new(units: usize) -> Self {
        IssueQueue {
            queue: VecDeque::new(),
            generation: vec![0; units],
            queued: vec![false; units],
            started: VecDeque::new(),
            started_bytes: 0,
            cancelled: 0,
            blocked_us: 0.0,
        }
    }

    /// Whether `u` is a queued prefetch that has not started.
    #[inline]
    pub(super) fn is_queued(&self, u: u32) -> bool {
        self.queued[u as usize]
    }

    /// The earliest time from `s` on at which `bytes` more fit under `cap` next to the
    /// started prefetches (all of them finished, when `bytes` alone exceed it).
    fn under_cap(&self, mut s: f64, bytes: u64, cap: Option<u64>) -> f64 {
        let Some(cap) = cap else {
            return s;
        };
        let mut held = self.started_bytes;
        for &(ready, b) in &self.started {
            if ready <= s {
                held -= b;
            } else if held + bytes > cap {
                s = ready;
                held -= b;
            } else {
                break;
            }
        }
        s
    }

    /// Forget the started prefetches finished by `s`.
    fn retire(&mut self, s: f64) {
        while let Some(&(ready, b)) = self.started.front() {
            if ready > s {
                break;
            }
            self.started.pop_front();
            self.started_bytes -= b;
        }
    }
}

impl State<'_> {
    /// Whether prefetches are queued behind demand work (VMM paging; OS-paged prefetches
    /// use the copy engine, which demand faults do not, and keep the legacy path).
    #[inline]
    pub(super) fn demand_first(&self) -> bool {
        self.opts.issue == super::PrefetchIssue::DemandFirst
            && self.cost.paging == crate::cost::Paging::Vmm
    }

    /// Queue a prefetch of `u` issued at `t` (its `inflight` mark is set by the caller).
    #[inline]
    pub(super) fn enqueue_prefetch(&mut self, u: u32, t: f64) {
        let q = &mut self.issue;
        let ui = u as usize;
        q.generation[ui] = q.generation[ui].wrapping_add(1);
        q.queued[ui] = true;
        q.queue.push_back((t, u, q.generation[ui]));
    }

    /// Drop the queued prefetch of `u` before it started: nothing was mapped.
    #[inline]
    pub(super) fn cancel_prefetch(&mut self, u: u32) {
        let ui = u as usize;
        self.issue.queued[ui] = false;
        self.inflight[ui] = false;
        self.issue.cancelled += 1;
    }

    /// Before demand work at `t`: start the queued prefetches that could start before `t`,
    /// and count how long they hold the driver or the copy engine past `t`.
    pub(super) fn drain_for_demand(&mut self, t: f64) -> Result<(), EngineError> {
        if !self.demand_first() {
            return Ok(());
        }
        let free = |st: &Self| st.driver_free.max(st.copy_free).max(t);
        let before = free(self);
        self.drain_prefetches(t)?;
        self.issue.blocked_us += free(self) - before;
        Ok(())
    }

    /// Start, oldest first, the queued prefetches whose start (driver free, issue time
    /// reached, under the cap) comes before `t`.
    fn drain_prefetches(&mut self, t: f64) -> Result<(), EngineError> {
        while let Some(&(at, u, gen)) = self.issue.queue.front() {
            let ui = u as usize;
            if !self.issue.queued[ui] || self.issue.generation[ui] != gen {
                self.issue.queue.pop_front();
                continue;
            }
            let bytes = self.units.units[ui].committed_bytes;
            let s = self.driver_free.max(at);
            let s = self.issue.under_cap(s, bytes, self.opts.prefetch_cap);
            if s >= t {
                break;
            }
            self.issue.queue.pop_front();
            self.issue.queued[ui] = false;
            self.issue.retire(s);
            let ready = self.vmm_page_in(u, s, "prefetch")?;
            self.ready_at[ui] = ready;
            self.issue.started.push_back((ready, bytes));
            self.issue.started_bytes += bytes;
        }
        Ok(())
    }
}
