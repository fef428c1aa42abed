//! A grid's cells on trace files (`sim::bounded::cells`, what `sim sweep` and `sim compare`
//! run) give, cell by cell and bit for bit, the reports of the in-memory path
//! (`sim::runner::run` on the loaded traces), whichever way each cell goes: untimed cells
//! sharing the grid's passes, and timed or stepping cells each with passes of its own, the
//! trace never loaded; a cell over the admission cap is its untimed run with
//! 0 admitted; and the statistics `sim compare` reports of a trace file streamed are those
//! of the loaded trace.

mod common;

use common::{retention, Files};
use policies::PolicyKind;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use sim::bounded::cells::{run_cells, Cell, Input};
use sim::cache::{RetentionConfig, Semantics, Split};
use sim::engine::{PredictorKind, TimingConfig};
use sim::runner::{self, RunConfig, TraceInput, Workload};
use sim::verify::{Acceptance, Stepping};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use traces::PhaseSel;

/// A 4-layer model of 16 experts, top-2, with a trace of four sequences (prefill tokens and
/// unequal lengths) and a profile trace.
fn files() -> Files {
    let mut rng = Pcg64::seed_from_u64(41);
    Files::write(&common::timed_model(), &common::MIXED_LENS, &mut rng)
}

fn load(trace: &Path, profile: Option<&Path>) -> Workload {
    let input = |p: &Path| TraceInput::load(Some(p)).unwrap();
    Workload::new(input(trace), profile.map(input)).unwrap()
}

fn timing() -> TimingConfig {
    TimingConfig::new("h200-linux", Arc::new(profile::load("h200-linux").unwrap()))
}

fn cfg(policy: &str, r: Option<RetentionConfig>, t: Option<TimingConfig>) -> RunConfig {
    let mut c = RunConfig {
        policy: policy.into(),
        phase: PhaseSel::All,
        retention: r,
        timing: t,
        ..RunConfig::default()
    };
    c.sizes.dtype = Some(traces::model::DType::Int4);
    c
}

fn lru(budget: &str) -> Option<RetentionConfig> {
    Some(retention(
        PolicyKind::Lru,
        budget,
        Split::Global,
        Semantics::Group,
    ))
}

/// A grid mixing every route: untimed cells (streaming, LRU, Belady, static pinning), timed
/// ones (streaming, Belady, a predictor, an admission cap, kept step latencies), and a
/// stepping cell.
fn mixed() -> Vec<RunConfig> {
    let pin = Some(retention(
        PolicyKind::StaticPin,
        "30%",
        Split::PerLayer,
        Semantics::Access,
    ));
    let belady = Some(retention(
        PolicyKind::Belady,
        "25%",
        Split::Global,
        Semantics::Group,
    ));
    let prefetch = TimingConfig {
        predictor: PredictorKind::PrevToken,
        ..timing()
    };
    let capped = TimingConfig {
        admission_cap: Some(0.9),
        ..timing()
    };
    let kept = TimingConfig {
        step_latencies: true,
        ..timing()
    };
    vec![
        cfg("e1", None, None),
        cfg("e2:hot", lru("25%"), None),
        cfg("e1", belady.clone(), None),
        cfg("e1", pin.clone(), None),
        cfg("e1", None, Some(timing())),
        cfg("e2:hot", belady, Some(timing())),
        cfg("e1", lru("25%"), Some(prefetch)),
        // verifying 2 tokens a step: passes of its own
        RunConfig {
            stepping: Stepping {
                verify: 2,
                acceptance: Acceptance::Fixed(1),
                ..Stepping::default()
            },
            ..cfg("e1", lru("25%"), None)
        },
        cfg("e1", lru("25%"), Some(capped)),
        cfg("e1", pin, Some(kept)),
    ]
}

/// The cells' reports as JSON, each asserted to fit.
fn json_of(cells: Vec<anyhow::Result<Cell>>) -> Vec<String> {
    cells
        .into_iter()
        .map(|c| {
            let c = c.unwrap();
            assert!(c.does_not_fit.is_none());
            serde_json::to_string(&c.report).unwrap()
        })
        .collect()
}

#[test]
fn every_route_of_a_mixed_grid_matches_the_in_memory_path() {
    let f = files();
    let cfgs = mixed();
    // the grid has cells on each route (so that every route is exercised)
    for route in [true, false] {
        assert!(cfgs.iter().any(|c| sim::bounded::supports(c) == route));
    }
    for profile in [None, Some(f.profile.as_path())] {
        let w = load(&f.trace, profile);
        let want: Vec<String> = cfgs
            .iter()
            .map(|c| serde_json::to_string(&runner::run(c, &w).unwrap()).unwrap())
            .collect();
        let ran = AtomicU64::new(0);
        let input = Input::File {
            trace: &f.trace,
            profile,
        };
        let got = run_cells(&cfgs, &input, &|n| {
            ran.fetch_add(n, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(json_of(got), want, "profile {profile:?}");
        assert_eq!(ran.load(Ordering::Relaxed), cfgs.len() as u64);
        // the loaded input gives the same
        let got = run_cells(&cfgs, &Input::Loaded(&w), &|_| {}).unwrap();
        assert_eq!(json_of(got), want);
    }
}

/// A cap so small that not even one sequence fits: the cell is its untimed run (computed
/// here on the loaded trace) with an `admission` block of 0 of 1 admitted, and the reason is
/// the engine's; the cell beside it, without a cap, runs timed.
#[test]
fn a_cell_over_the_admission_cap_is_its_untimed_run_with_none_admitted() {
    let f = files();
    let capped = TimingConfig {
        admission_cap: Some(1e-9),
        ..timing()
    };
    let cfgs = [
        cfg("e1", lru("90%"), Some(capped)),
        cfg("e1", lru("90%"), Some(timing())),
    ];
    let w = load(&f.trace, None);
    let err = runner::run(&cfgs[0], &w).unwrap_err();
    let why = sim::grid::does_not_fit(&err)
        .expect("over the cap")
        .to_string();
    let mut want = runner::run(&cfg("e1", lru("90%"), None), &w).unwrap();
    want.admission = Some(sim::engine::Admission {
        requested: 1,
        admitted: 0,
        cap: Some(1e-9),
        limit_mib: sim::grid::does_not_fit(&err).map(|n| n.limit_mib),
    });
    let input = Input::File {
        trace: &f.trace,
        profile: None,
    };
    let mut got = run_cells(&cfgs, &input, &|_| {}).unwrap().into_iter();
    let over = got.next().unwrap().unwrap();
    assert_eq!(over.does_not_fit.as_deref(), Some(why.as_str()));
    assert!(why.contains("admits no sequence"), "{why}");
    assert_eq!(
        serde_json::to_string(&over.report).unwrap(),
        serde_json::to_string(&want).unwrap()
    );
    let free = got.next().unwrap().unwrap();
    assert!(free.does_not_fit.is_none() && free.report.timing.is_some());
}

#[test]
fn trace_statistics_of_a_file_are_those_of_the_loaded_trace() {
    let f = files();
    let loaded = TraceInput::load(Some(&f.trace)).unwrap();
    for phase in [PhaseSel::Decode, PhaseSel::Prefill, PhaseSel::All] {
        let (want, want_note) = sim::grid::trace_info("t", &loaded.label, &loaded.trace, phase);
        let (got, got_note) = sim::grid::trace_info_file("t", &f.trace, phase).unwrap();
        assert!(want.stats.is_some() && want.accesses > 0, "{phase:?}");
        assert_eq!(
            serde_json::to_string(&got).unwrap(),
            serde_json::to_string(&want).unwrap(),
            "{phase:?}"
        );
        assert_eq!(got_note, want_note);
    }
}
