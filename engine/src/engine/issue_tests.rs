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
