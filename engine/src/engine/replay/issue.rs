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
//!
//! `--prefetch-issue idle-only` adds one condition to a start: the prefetch's commit and copy
//! must both end by `t`, so it fits the idle time before the demand work and never delays it.
//! `--prefetch-buffer N` holds started prefetches in a staging buffer of `N` unit slots
//! (mixtral-offloading's `buffer_size`): a prefetch starts only into a free slot, which a
//! prefetch frees when a group pages its unit in (the unit joins the resident set once
//! resident) or when it is unmapped unused after its target group.

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
    /// With a staging buffer (`--prefetch-buffer`): when each free slot became free (µs).
    free_slots: Option<Vec<f64>>,
}

impl IssueQueue {
    pub(super) fn new(units: usize, buffer: Option<usize>) -> Self {
        IssueQueue {
            free_slots: buffer.map(|n| vec![0.0; n]),
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

    /// The earliest time from `s` on at which a staging-buffer slot is free, and its index
    /// (`Some((s, None))` without a buffer; `None` when every slot is taken).
    fn slot_from(&self, s: f64) -> Option<(f64, Option<usize>)> {
        let Some(free) = &self.free_slots else {
            return Some((s, None));
        };
        let (i, &at) = free.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1))?;
        Some((s.max(at), Some(i)))
    }

    /// Free a staging-buffer slot at `at` (no-op without a buffer).
    #[inline]
    pub(super) fn free_slot(&mut self, at: f64) {
        if let Some(free) = &mut self.free_slots {
            free.push(at);
        }
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
    /// Whether prefetches are queued behind demand work (demand-first or idle-only, VMM
    /// paging; OS-paged prefetches use the copy engine, which demand faults do not, and keep
    /// the legacy path).
    #[inline]
    pub(super) fn demand_first(&self) -> bool {
        self.opts.issue != super::PrefetchIssue::Legacy
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
    /// and, when `demand` (the group has page-ins or evictions to run then), count how long
    /// they hold the driver or the copy engine past `t`.
    pub(super) fn drain_for_demand(&mut self, t: f64, demand: bool) -> Result<(), EngineError> {
        if !self.demand_first() {
            return Ok(());
        }
        let free = |st: &Self| st.driver_free.max(st.copy_free).max(t);
        let before = free(self);
        self.drain_prefetches(t)?;
        if demand {
            self.issue.blocked_us += free(self) - before;
        }
        Ok(())
    }

    /// Start, oldest first, the queued prefetches whose start (driver free, issue time
    /// reached, under the cap, a staging slot free) comes before `t` (idle-only: whose copy
    /// also ends by `t`).
    fn drain_prefetches(&mut self, t: f64) -> Result<(), EngineError> {
        let idle_only = self.opts.issue == super::PrefetchIssue::IdleOnly;
        while let Some(&(at, u, gen)) = self.issue.queue.front() {
            let ui = u as usize;
            if !self.issue.queued[ui] || self.issue.generation[ui] != gen {
                self.issue.queue.pop_front();
                continue;
            }
            let bytes = self.units.units[ui].committed_bytes;
            let Some((mut s, mut slot)) = self.start_at(at, bytes) else {
                break;
            };
            if s >= t {
                break;
            }
            let mut expected = None;
            if idle_only {
                (s, slot) = match self.settle_idle_start(u, at, bytes, s) {
                    Some(start) => start,
                    None => break,
                };
                match self.page_in_end(u, s) {
                    Some(end) if end <= t && s < t => expected = Some(end),
                    _ => break,
                }
            }
            self.issue.queue.pop_front();
            self.issue.queued[ui] = false;
            if let (Some(free), Some(i)) = (&mut self.issue.free_slots, slot) {
                free.swap_remove(i);
            }
            self.issue.retire(s);
            let ready = self.vmm_page_in(u, s, "prefetch")?;
            debug_assert!(expected.is_none_or(|e| (e - ready).abs() <= 1e-9 * e.max(1.0)));
            self.ready_at[ui] = ready;
            self.issue.started.push_back((ready, bytes));
            self.issue.started_bytes += bytes;
        }
        Ok(())
    }

    /// When a prefetch of `bytes` issued at `at` could start: the driver free, under the cap,
    /// a staging slot free (and that slot); `None` when every slot is taken.
    fn start_at(&self, at: f64, bytes: u64) -> Option<(f64, Option<usize>)> {
        let s = self.driver_free.max(at);
        let s = self.issue.under_cap(s, bytes, self.opts.prefetch_cap);
        self.issue.slot_from(s)
    }

    /// Idle-only: run the background work a page-in of `u` from `s` would run first (queued
    /// decommits that start before it, `u`'s own old mapping), which the next demand work
    /// would run anyway, until the start no longer moves; returns the settled start.
    fn settle_idle_start(
        &mut self,
        u: u32,
        at: f64,
        bytes: u64,
        mut s: f64,
    ) -> Option<(f64, Option<usize>)> {
        loop {
            self.drain_deferred(s);
            self.release_pending(u, s);
            let next = self.start_at(at, bytes)?;
            if next.0 <= s {
                return Some(next);
            }
            s = next.0;
        }
    }

    /// When a page-in of VMM unit `u` started at `s` would be resident, priced as
    /// [`State::vmm_page_in`] prices it with no background work left before it; `None` when
    /// it would map up to the oversubscription curve (its price would then be drawn with
    /// jitter and background decommits would run first: idle-only does not start it).
    fn page_in_end(&self, u: u32, s: f64) -> Option<f64> {
        let committed = self.units.units[u as usize].committed_bytes as f64;
        if self.mapped_base + self.mapped_units + committed >= self.cost.curve_start_bytes() {
            return None;
        }
        let (c, x) = self.page_in_prices(u, self.live_granules(), 1.0);
        let commit_end = self.driver_free.max(s) + c;
        Some(self.copy_free.max(commit_end) + x)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EngineOptions, PrefetchIssue};
    use super::State;
    use crate::engine::tests::{compute, test_profile, unit_map, vmm_cost};

    const MIB: u64 = 1 << 20;
    /// Commit (10 µs) + copy (2 MiB at 1 GB/s) of one unit on the test profile.
    const PAGE_IN: f64 = 10.0 + 2097.152;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    /// Prefetch `units` issued at `t`, as [`State::prefetch`] queues them.
    fn queue(st: &mut State, units: &[u32], t: f64) {
        for &u in units {
            st.inflight[u as usize] = true;
            st.enqueue_prefetch(u, t);
        }
    }

    /// `check` on the replay state of four 2 MiB VMM units with `opts` (parallel loader).
    fn with_state(opts: EngineOptions, check: impl FnOnce(&mut State)) {
        let (p, units, c) = (
            test_profile(None),
            unit_map(1, 4, 2 * MIB, 2 * MIB),
            compute(0.0, 0.0),
        );
        let cost = vmm_cost(&p);
        check(&mut State::new(&cost, &units, &c, opts));
    }

    /// Two prefetches queued at 0, drained before demand work at 10 000 µs. Without a cap the
    /// second commits while the first copies (commit 10..20, copy 2107.152..4204.304); with a
    /// cap of one unit it starts when the first is resident (2107.152), so it is resident at
    /// 2117.152 + 2097.152; a cap of two units changes nothing.
    #[test]
    fn a_cap_on_bytes_in_flight_starts_a_prefetch_when_earlier_ones_finish() {
        let ready_of_second = |cap: Option<u64>| {
            let opts = EngineOptions {
                issue: PrefetchIssue::DemandFirst,
                prefetch_cap: cap,
                ..Default::default()
            };
            let mut ready = 0.0;
            with_state(opts, |st| {
                queue(st, &[0, 1], 0.0);
                st.drain_for_demand(10_000.0, true).unwrap();
                ready = st.ready_at[1];
            });
            ready
        };
        assert!(close(ready_of_second(None), 10.0 + 2.0 * 2097.152));
        assert!(close(ready_of_second(Some(2 * MIB)), PAGE_IN + PAGE_IN));
        assert!(close(ready_of_second(Some(MIB)), PAGE_IN + PAGE_IN));
        assert!(close(ready_of_second(Some(4 * MIB)), 10.0 + 2.0 * 2097.152));
    }

    /// A queued prefetch starts only if the driver frees before the demand work's time: with
    /// the driver busy until 50 µs, demand work at 50 starts nothing, at 60 starts it at 50.
    #[test]
    fn only_prefetches_that_start_before_the_demand_run_first() {
        let opts = EngineOptions {
            issue: PrefetchIssue::DemandFirst,
            ..Default::default()
        };
        with_state(opts, |st| {
            st.driver_free = 50.0;
            queue(st, &[2], 0.0);
            st.drain_for_demand(50.0, true).unwrap();
            assert_eq!(st.ready_at[2], 0.0, "not started");
            st.drain_for_demand(60.0, true).unwrap();
            assert!(close(st.ready_at[2], 50.0 + PAGE_IN));
            // the demand at 60 waits for the commit (to 60) and the copy (to 50 + 1 page-in)
            assert!(close(st.issue.blocked_us, 50.0 + PAGE_IN - 60.0));
        });
    }
}
