//! The cost model priced from a calibration (`validate::to_profile`): a test of
//! `engine::cost` that needs the GPU side's types, so it lives on this side of the crate line.

use engine::cost::{CostModel, CostOptions, Paging};

#[test]
fn commits_priced_from_the_same_size_cycles_when_calibrated() {
    use validate::stats::Summary;
    let text = include_str!("../../../validate/tests/fixtures/h200-linux-p8.measurements.json");
    let mut c: validate::Calibration = serde_json::from_str(text).unwrap();
    let one = |v: f64| Summary::of(&[v]).unwrap();
    // the h200-linux-p8 set has no same-size cycles: commits keep the fit of the
    // profile it was shipped as (sim/tests/fixtures/h200-linux-p8.json, read as JSON)
    let old = validate::to_profile::to_profile(&c, "h200-linux");
    let m = CostModel::new(&old, Paging::Vmm, CostOptions::default()).unwrap();
    let p8: serde_json::Value = serde_json::from_str(include_str!(
        "../../../sim/tests/fixtures/h200-linux-p8.json"
    ))
    .unwrap();
    let p8 = |name: &str| p8["constants"][name]["value"].as_f64().unwrap();
    let want = p8("vmm_commit_fixed") + 2.0 * p8("vmm_commit");
    assert!((m.commit_us(2) - want).abs() < 1e-9);
    // same-size cycles (commit + enqueue) of (2, 90), (8, 350), (32, 1440) µs, the cycles
    // after another size's release slower at 2 granules (110 + 2)
    c.page_in.truncate(3);
    for (q, (slow, same, enq)) in c.page_in.iter_mut().zip([
        (110.0, 88.0, 2.0),
        (330.0, 346.0, 4.0),
        (1400.0, 1432.0, 8.0),
    ]) {
        q.commit_us = one(slow);
        q.h2d_enqueue_us = one(2.0);
        q.steady_commit_us = Some(one(same));
        q.steady_h2d_enqueue_us = Some(one(enq));
    }
    assert_eq!(
        c.page_in.iter().map(|q| q.granules).collect::<Vec<_>>(),
        [2, 8, 32]
    );
    let p = validate::to_profile::to_profile(&c, "t");
    let m = CostModel::new(&p, Paging::Vmm, CostOptions::default()).unwrap();
    // the line on relative residuals through those three points (weighted moments with
    // weights 1 / y^2, exact rationals, computed apart): 0.98448449 + 44.35393205 g
    for (g, want) in [
        (2u64, 89.692_348_596),
        (8, 355.815_940_901),
        (32, 1_420.310_310_120),
    ] {
        assert!(
            (m.commit_us(g) - want).abs() < 1e-6,
            "{g}: {}",
            m.commit_us(g)
        );
    }
}
