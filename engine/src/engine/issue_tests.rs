//! The prefetch issue policies on plans small enough to price by hand (test profile: commit
//! 10 µs per 2 MiB granule, H2D 1 GB/s, so a 2 MiB unit's commit + copy is 2107.152 µs).

use super::tests::{compute, test_profile, unit_map, vmm_cost};
use super::*;
use traces::{KeySpace, ModelSpec};

const MIB: u64 = 1 << 20;
/// Commit (10 µs) + copy (2 MiB at 1 GB/s) of one unit.
const PAGE_IN: f64 = 10.0 + 2097.152;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b.abs().max(1.0)
}

/// One step over three MoE layers of four 2 MiB units: layer 0 pages in unit 0, layer 1
/// unit 4, layer 2 units 8 and 9 (the oracle at window 2 prefetches those at layer 0's
/// router). One loader thread (serial): a page-in holds the driver for commit + copy.
fn priced(issue: PrefetchIssue, nonexpert_us: f64) -> Replay {
    let map = unit_map(3, 4, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(3);
    plans.begin_step(1, 1);
    plans.push_group(0, &[0], &[0], &[0], &[]);
    plans.push_group(1, &[4], &[4], &[4], &[]);
    plans.push_group(2, &[8, 9], &[8, 9], &[8, 9], &[]);
    let opts = EngineOptions {
        serial_loader: true,
        predictor: PredictorKind::Oracle,
        window: 2,
        issue,
        ..Default::default()
    };
    let p = test_profile(None);
    let ks = KeySpace::new(&ModelSpec::uniform("t", 3, 4, 1));
    let c = compute(nonexpert_us, 0.0);
    replay(&plans, &map, &ks, &vmm_cost(&p), &c, opts).unwrap()
}

/// Legacy: both prefetches run right after layer 0's demand page-in, and layer 1's demand
/// page-in waits for them: it ends at 100 + 4 page-ins, and layer 2 starts its experts at
/// its router, 100 µs later. Demand first: at layer 1's router (100 + 1 page-in + 100) the
/// driver has been idle since 100 + 1 page-in, so prefetch 8 has started and finishes first
/// (a started one is not preempted); prefetch 9 could not start and waits behind layer 1's
/// demand page-in, then runs in the idle driver time of layer 2's non-expert compute, and
/// is late at layer 2's router: the step ends when it is resident, at 100 + 4 page-ins.
#[test]
fn a_queued_prefetch_yields_to_demand_and_a_started_one_finishes() {
    let legacy = priced(PrefetchIssue::Legacy, 100.0);
    assert!(close(legacy.step_us[0], 200.0 + 4.0 * PAGE_IN));
    let f = legacy.prefetch;
    assert_eq!((f.issued, f.used, f.late, f.cancelled), (2, 2, 0, 0));
    assert_eq!(f.blocked_us, 0.0, "legacy does not count it");

    let first = priced(PrefetchIssue::DemandFirst, 100.0);
    assert!(close(first.step_us[0], 100.0 + 4.0 * PAGE_IN));
    let f = first.prefetch;
    assert_eq!(
        (f.issued, f.used, f.late, f.wasted, f.cancelled),
        (2, 1, 1, 0, 0)
    );
    // layer 1's demand waits from its router (200 + 1 page-in) to the end of prefetch 8
    // (100 + 2 page-ins); layer 2's from its router (200 + 3 page-ins) to the end of
    // prefetch 9 (100 + 4 page-ins)
    let blocked = 2.0 * (PAGE_IN - 100.0);
    assert!(
        close(f.blocked_us, blocked),
        "{} vs {blocked}",
        f.blocked_us
    );
    assert_eq!(first.timing.map_calls, legacy.timing.map_calls);
}

/// Without non-expert compute the driver is never idle before the next router: both
/// prefetches stay queued until layer 2's router, are cancelled (nothing mapped), and its
/// two units are paged in on demand. The step is the 4 page-ins back to back either way.
#[test]
fn prefetches_that_never_start_are_cancelled_at_their_target_router() {
    let legacy = priced(PrefetchIssue::Legacy, 0.0);
    let first = priced(PrefetchIssue::DemandFirst, 0.0);
    assert!(close(legacy.step_us[0], 4.0 * PAGE_IN));
    assert!(close(first.step_us[0], 4.0 * PAGE_IN));
    let f = first.prefetch;
    assert_eq!(
        (f.issued, f.used, f.late, f.wasted, f.cancelled),
        (2, 0, 0, 0, 2)
    );
    assert_eq!(f.blocked_us, 0.0);
    // each unit mapped once: the cancelled prefetches mapped nothing
    assert_eq!(first.timing.map_calls, 4);
    assert_eq!(first.detail.prefetch_wasted, 0);
}

/// One step over four MoE layers of four 2 MiB units, layer l paging in unit 4l, with
/// non-expert compute `n` µs a layer and no expert compute; the oracle at window 2
/// prefetches unit 8 at layer 0's router and unit 12 at layer 1's. One loader thread: a
/// page-in holds the driver for commit + copy (P = 2107.152 µs).
fn four_layers(n: f64, tweak: impl FnOnce(&mut EngineOptions)) -> Replay {
    let map = unit_map(4, 4, 2 * MIB, 2 * MIB);
    let mut plans = Plans::new(4);
    plans.begin_step(1, 1);
    for l in 0..4usize {
        let u = [4 * l as u32];
        plans.push_group(l, &u, &u, &u, &[]);
    }
    let mut opts = EngineOptions {
        serial_loader: true,
        predictor: PredictorKind::Oracle,
        window: 2,
        issue: PrefetchIssue::DemandFirst,
        ..Default::default()
    };
    tweak(&mut opts);
    let p = test_profile(None);
    let ks = KeySpace::new(&ModelSpec::uniform("t", 4, 4, 1));
    replay(&plans, &map, &ks, &vmm_cost(&p), &compute(n, 0.0), opts).unwrap()
}

/// Without prefetch the four demand page-ins follow each router: the step is 4n + 4P.
#[test]
fn four_layers_without_prefetch_by_hand() {
    for n in [1500.0, 3000.0] {
        let none = four_layers(n, |o| o.predictor = PredictorKind::None);
        assert!(close(none.step_us[0], 4.0 * n + 4.0 * PAGE_IN));
    }
}

/// Idle-only with n = 3000 > P: prefetch 8 (queued at n) starts at n + P when the driver
/// frees and ends at n + 2P, before layer 1's router (2n + P); prefetch 12 (queued at
/// 2n + P) starts after layer 1's page-in, at 2n + 2P, and ends at 2n + 3P, before layer
/// 2's router (3n + 2P). Both are used in time, nothing waits: the step is 4n + 2P.
/// Demand first starts both at the same times, so the two agree here; with n = 1500 < P
/// they part (next test).
#[test]
fn idle_only_prefetches_that_fit_the_idle_time_run_and_hide_the_page_ins() {
    let n = 3000.0;
    let idle = four_layers(n, |o| o.issue = PrefetchIssue::IdleOnly);
    assert!(close(idle.step_us[0], 4.0 * n + 2.0 * PAGE_IN));
    let f = idle.prefetch;
    assert_eq!((f.issued, f.used, f.late, f.cancelled), (2, 2, 0, 0));
    assert_eq!(f.blocked_us, 0.0);
    let first = four_layers(n, |_| {});
    assert_eq!((first.step_us[0], first.prefetch), (idle.step_us[0], f));
}

/// n = 1500 < P. Demand first: prefetch 8 starts at n + P (layer 1's router is 2n + P), so
/// layer 1's page-in waits to n + 2P (blocked P - n) and ends at n + 3P; prefetch 12 starts
/// then, and layer 2 (router 2n + 3P, unit 8 resident) ends at its router, but the driver is
/// held to n + 4P (blocked P - n again); layer 3's router is 3n + 3P > n + 4P: the step is
/// 3n + 3P. Idle-only: neither prefetch ends before the next router (n + 2P > 2n + P, then
/// 2n + 3P > 3n + 2P for 8 and 3n + 4P > 4n + 3P for 12), so both are cancelled and the step
/// is the 4n + 4P of no prefetch, never worse, with nothing blocked.
#[test]
fn idle_only_never_delays_demand_work_where_demand_first_does() {
    let n = 1500.0;
    let first = four_layers(n, |_| {});
    assert!(close(first.step_us[0], 3.0 * n + 3.0 * PAGE_IN));
    let f = first.prefetch;
    assert_eq!((f.issued, f.used, f.late, f.cancelled), (2, 2, 0, 0));
    assert!(close(f.blocked_us, 2.0 * (PAGE_IN - n)));

    let idle = four_layers(n, |o| o.issue = PrefetchIssue::IdleOnly);
    assert!(close(idle.step_us[0], 4.0 * n + 4.0 * PAGE_IN));
    let f = idle.prefetch;
    assert_eq!((f.issued, f.used, f.late, f.cancelled), (2, 0, 0, 2));
    assert_eq!(f.blocked_us, 0.0);
    assert_eq!(
        idle.timing.map_calls, 4,
        "the cancelled prefetches mapped nothing"
    );
}

/// A staging buffer of one unit, n = 1500: prefetch 8 takes the slot at layer 1's router as
/// under demand first (ready n + 2P, blocked P - n); at layer 2's router (2n + 3P) prefetch
/// 12 finds no free slot and waits; layer 2 pages unit 8 in, which frees the slot at its
/// router. At layer 3's router (3n + 3P) prefetch 12 starts from 2n + 3P, is resident at
/// 2n + 4P, later than the router: late, blocking P - n, and the step ends at 2n + 4P.
/// With two slots the buffer never fills: the step is demand first's 3n + 3P.
#[test]
fn a_staging_buffer_starts_a_prefetch_only_into_a_free_slot() {
    let n = 1500.0;
    let one = four_layers(n, |o| o.prefetch_buffer = Some(1));
    assert!(close(one.step_us[0], 2.0 * n + 4.0 * PAGE_IN));
    let f = one.prefetch;
    assert_eq!((f.issued, f.used, f.late, f.cancelled), (2, 1, 1, 0));
    assert!(close(f.blocked_us, 2.0 * (PAGE_IN - n)));

    let two = four_layers(n, |o| o.prefetch_buffer = Some(2));
    assert!(close(two.step_us[0], 3.0 * n + 3.0 * PAGE_IN));
    assert_eq!(two.prefetch, four_layers(n, |_| {}).prefetch);
}
