//! Each predictor's predictions on hand-made plans, computed by hand, and the property that
//! no predictor but `oracle` reads a group after the current one.

use super::*;
use crate::engine::Plans;
use policies::mechanisms::{self, BuildContext, SizeOptions, Sizes};
use proptest::prelude::*;
use traces::{ModelSpec, Provenance, Trace};

/// Two MoE layers of four experts, top-2: keys 0..4 are layer 0, 4..8 layer 1.
fn model() -> ModelSpec {
    ModelSpec::uniform("t", 2, 4, 2)
}

/// `e1` units of `model()`: unit = key.
fn e1(ks: &KeySpace) -> UnitMap {
    let m = model();
    let one_mib = SizeOptions {
        expert_mib: Some(1.0),
        ..SizeOptions::default()
    };
    let sizes = Sizes::resolve(&m, &one_mib).unwrap();
    mechanisms::parse("e1")
        .unwrap()
        .build(&BuildContext {
            keyspace: ks,
            sizes,
            profile: None,
        })
        .unwrap()
}

fn trace(seqs: &[Vec<Vec<Vec<u16>>>]) -> Trace {
    Trace::decode_only(model(), Provenance::default(), seqs).unwrap()
}

/// A plan of `steps`: per step its sequences and per MoE layer the selected experts; every
/// selected key is accessed (e1), and the first key of each group is its page-in.
fn plan(ks: &KeySpace, steps: &[(Vec<u32>, Vec<Vec<u16>>)]) -> Plans {
    let mut p = Plans::new(ks.num_moe_layers());
    for (seqs, layers) in steps {
        p.begin_step_of(seqs, seqs.len() as u64);
        for (m, sel) in layers.iter().enumerate() {
            let keys: Vec<u32> = sel.iter().map(|&e| ks.key(m, e)).collect();
            p.push_group(m, &keys, &keys, &keys[..keys.len().min(1)], &[]);
        }
    }
    p
}

/// The predictions of `kind` at every group with a target `window` groups ahead, in order.
fn predictions(
    kind: PredictorKind,
    plans: &Plans,
    ks: &KeySpace,
    window: usize,
    learning: Learning<'_>,
    upto: usize,
) -> Vec<Vec<u32>> {
    let units = e1(ks);
    let mut p = Predictor::new(kind, &units, ks, window, learning, None);
    let mut out = Vec::new();
    for gi in 0..=upto.min(plans.groups.len() - 1) {
        let h = plans.history(gi);
        p.observe(&h);
        let gt = gi + window;
        if let Some(g) = plans.groups.get(gt) {
            let mut v = Vec::new();
            let target = Target {
                group: gt,
                moe_layer: g.moe_layer as usize,
                page_ins: plans.page_ins(g),
            };
            p.predict(&h, target, &mut v);
            out.push(v);
        }
    }
    out
}

/// The profile of the successor and popularity cases: one sequence of three tokens.
fn profile() -> Trace {
    trace(&[vec![
        vec![vec![0, 1], vec![2, 3]],
        vec![vec![0, 2], vec![2, 1]],
        vec![vec![0, 1], vec![3, 2]],
    ]])
}

/// The evaluated plan of those cases: one sequence, three steps.
fn evaluated(ks: &KeySpace) -> Plans {
    let s = |a: [u16; 2], b: [u16; 2]| (vec![0], vec![a.to_vec(), b.to_vec()]);
    plan(
        ks,
        &[s([1, 2], [0, 1]), s([3, 0], [2, 3]), s([1, 3], [1, 2])],
    )
}

fn run_all(kind: PredictorKind, learning: Learning<'_>) -> Vec<Vec<u32>> {
    let ks = KeySpace::new(&model());
    predictions(kind, &evaluated(&ks), &ks, 1, learning, usize::MAX)
}

/// The profile trace `t`'s decode tokens, held in memory.
fn decoded(t: &Trace) -> LoadedProfile<'_> {
    LoadedProfile {
        trace: t,
        phases: traces::PhaseSel::Decode,
    }
}

#[test]
fn static_ranks_the_profiles_counts_or_the_runs_so_far() {
    // profile counts: layer 0 e0 3, e1 2, e2 1; layer 1 e2 3, e3 2, e1 1 -> top-2 of layer 0
    // is units 0, 1 and of layer 1 units 6, 7 (keys 4 + 2, 4 + 3)
    let p = profile();
    let want = [vec![6, 7], vec![0, 1], vec![6, 7], vec![0, 1], vec![6, 7]];
    assert_eq!(
        run_all(PredictorKind::Static, Learning::Profile(&decoded(&p))),
        want
    );
    // online: counts of the groups up to the current one; layer 1 unseen at group 0
    let online = [vec![], vec![1, 2], vec![4, 5], vec![0, 1], vec![4, 5]];
    assert_eq!(run_all(PredictorKind::Static, Learning::Online), online);
}

#[test]
fn next_layer_sums_the_successor_rows_of_the_current_experts() {
    // window 1 over the profile's groups: layer 0 -> 1 rows C0 {2:3, 3:2, 1:1},
    // C1 {2:2, 3:2}, C2 {2:1, 1:1}; layer 1 -> next step's layer 0 rows C2 {0:2, 1:1, 2:1},
    // C3 {0:1, 2:1}, C1 {0:1, 1:1}.
    // group 0 selects {1, 2}: C1 + C2 = {2:3, 3:2, 1:1} -> experts 2, 3 of layer 1;
    // group 1 selects {0, 1}: C0 (none) + C1 = {0:1, 1:1} -> experts 0, 1 of layer 0; ...
    let p = profile();
    // group 3 selects {2, 3}: C2 + C3 = {0:3, 2:2, 1:1} -> units 0, 2
    let want = [vec![6, 7], vec![0, 1], vec![6, 7], vec![0, 2], vec![6, 7]];
    assert_eq!(
        run_all(PredictorKind::NextLayer, Learning::Profile(&decoded(&p))),
        want
    );
    // online: only pairs already seen; the first layer-0 row seen for group 4's {1, 3} is
    // C1 {0:1, 1:1} (group 0 -> 1) and C3 {2:1, 3:1} (group 2 -> 3): all ties, lowest ids
    let online = [vec![], vec![], vec![], vec![], vec![4, 5]];
    assert_eq!(run_all(PredictorKind::NextLayer, Learning::Online), online);
}

#[test]
fn prev_token_and_oracle_read_the_step_before_and_the_target() {
    // prev-token: the accessed units of the target's layer one step earlier
    let want = [vec![], vec![1, 2], vec![4, 5], vec![3, 0], vec![6, 7]];
    assert_eq!(run_all(PredictorKind::PrevToken, Learning::Online), want);
    // oracle: the target group's page-in (its first key)
    let oracle = [vec![4], vec![3], vec![6], vec![1], vec![5]];
    assert_eq!(run_all(PredictorKind::Oracle, Learning::Online), oracle);
    assert!(run_all(PredictorKind::None, Learning::Online)
        .iter()
        .all(Vec::is_empty));
}

#[test]
fn eam_predicts_from_the_most_similar_profile_sequence() {
    // A: L0 {0:2, 1:2}, L1 {2:2, 3:2} (|A|^2 16); B: L0 {2:2, 3:2}, L1 {0:2, 1:1, 2:1} (14)
    let p = trace(&[
        vec![vec![vec![0, 1], vec![2, 3]], vec![vec![0, 1], vec![2, 3]]],
        vec![vec![vec![2, 3], vec![0, 1]], vec![vec![2, 3], vec![0, 2]]],
    ]);
    let ks = KeySpace::new(&model());
    let s = |a: [u16; 2], b: [u16; 2]| (vec![0], vec![a.to_vec(), b.to_vec()]);
    let plans = plan(&ks, &[s([0, 2], [2, 3]), s([0, 1], [0, 1])]);
    // group 0, {0, 2}: dot A 2, B 2; cos A 2/sqrt(2*16) < cos B 2/sqrt(2*14): B's layer 1
    // row {0:2, 1:1, 2:1} -> experts 0, 1 (tie to the lower id) = units 4, 5.
    // group 1, + {6, 7}: dot A 6, B 3; cos A 6/sqrt(4*16) > B 3/sqrt(4*14): A's layer 0 row
    // {0:2, 1:2} -> units 0, 1. group 2, + {0, 1}: dot A 10, B 3 -> A's layer 1: units 6, 7.
    let got = predictions(
        PredictorKind::Eam,
        &plans,
        &ks,
        1,
        Learning::Profile(&decoded(&p)),
        9,
    );
    assert_eq!(got, [vec![4, 5], vec![0, 1], vec![6, 7]]);
}

#[test]
fn eam_online_matches_against_the_other_sequences_so_far() {
    let ks = KeySpace::new(&model());
    let step = |s: u32, a: [u16; 2], b: [u16; 2]| (vec![s], vec![a.to_vec(), b.to_vec()]);
    // round-robin: sequence 0's token, sequence 1's, sequence 0's next
    let plans = plan(
        &ks,
        &[
            step(0, [0, 1], [2, 3]),
            step(1, [0, 1], [3, 0]),
            step(0, [2, 3], [0, 1]),
        ],
    );
    // groups 0, 1: sequence 0 is the only one seen, nothing to match. Group 2 (sequence 1,
    // {0, 1}): its match is sequence 0, whose layer 1 row {2:1, 3:1} -> units 6, 7. Group 3
    // (+ {4, 7}): sequence 0 still, its layer 0 row {0:1, 1:1} -> units 0, 1. Group 4
    // (sequence 0, + {2, 3}): sequence 1's layer 1 row {0:1, 3:1} -> units 4, 7.
    let got = predictions(PredictorKind::Eam, &plans, &ks, 1, Learning::Online, 9);
    assert_eq!(got, [vec![], vec![], vec![6, 7], vec![0, 1], vec![4, 7]]);
}

#[test]
fn a_batch_asks_for_its_union_and_a_wider_window_looks_further() {
    let ks = KeySpace::new(&model());
    // two sequences in one step, their union of 4 keys per layer: 4 experts wanted
    let plans = plan(
        &ks,
        &[(vec![0, 1], vec![vec![0, 1, 2, 3], vec![0, 1, 2, 3]])],
    );
    let got = predictions(PredictorKind::Static, &plans, &ks, 1, Learning::Online, 9);
    assert_eq!(got, [Vec::<u32>::new()]);
    let p = profile();
    let got = predictions(
        PredictorKind::Static,
        &plans,
        &ks,
        1,
        Learning::Profile(&decoded(&p)),
        9,
    );
    // profile layer 1 counts: e2 3, e3 2, e1 1, e0 0: only three experts were ever seen
    assert_eq!(got, [vec![6, 7, 5]]);
    // window 2 from layer 0 targets the next step's layer 0: the successor table pairs each
    // profile group with the one two places later (same layer, next token)
    let plans = evaluated(&ks);
    let got = predictions(
        PredictorKind::NextLayer,
        &plans,
        &ks,
        2,
        Learning::Profile(&decoded(&p)),
        9,
    );
    // layer 0 -> next token's layer 0 pairs: t0 {0,1} -> t1 {0,2}, t1 {0,2} -> t2 {0,1}:
    // C0 {0:2, 1:1, 2:1}, C1 {0:1, 2:1}, C2 {0:1, 1:1}; group 0 {1, 2}: {0:2, 1:1, 2:1}
    // -> units 0, 1. Layer 1 -> layer 1: t0 {2,3} -> t1 {2,1}, t1 {2,1} -> t2 {3,2}:
    // C2 {2:2, 1:1, 3:1}, C3 {2:1, 1:1}, C1 {3:1, 2:1}; group 1 {0, 1}: C1 -> units 6, 7.
    assert_eq!(got[..2], [vec![0, 1], vec![6, 7]]);
}

/// Whether `kind` makes the same predictions at groups `0 ..= cut` on plans `a` and `b`.
fn same_up_to(
    kind: PredictorKind,
    (a, b): (&Plans, &Plans),
    ks: &KeySpace,
    w: usize,
    cut: usize,
    l: Learning<'_>,
) -> bool {
    predictions(kind, a, ks, w, l, cut) == predictions(kind, b, ks, w, l, cut)
}

type StepSpec = (Vec<u32>, Vec<Vec<u16>>);

/// A step of `model()`: one or two sequences of four, each layer a selection of 1..=4 experts.
fn step_spec() -> impl Strategy<Value = StepSpec> {
    let sel = proptest::sample::subsequence(vec![0u16, 1, 2, 3], 1..=4);
    (
        proptest::sample::subsequence(vec![0u32, 1, 2, 3], 1..=2),
        proptest::collection::vec(sel, 2),
    )
}

fn token_spec() -> impl Strategy<Value = Vec<Vec<u16>>> {
    proptest::collection::vec(proptest::sample::subsequence(vec![0u16, 1, 2, 3], 2), 2)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Changing every group after `cut` (and the sequences of later steps) changes no
    /// prediction made up to `cut`, for every predictor but the oracle, online and with a
    /// profile, at both windows.
    #[test]
    fn no_predictor_but_the_oracle_reads_a_later_group(
        steps in proptest::collection::vec(step_spec(), 2..6),
        other in proptest::collection::vec(step_spec(), 6),
        cut in 0usize..12,
        w in 1usize..=2,
        prof in proptest::collection::vec(proptest::collection::vec(token_spec(), 1..4), 1..3),
    ) {
        let ks = KeySpace::new(&model());
        let m = ks.num_moe_layers();
        let cut = cut.min(steps.len() * m - 1);
        // the second plan: the groups after `cut` replaced, later steps' sequences too
        let mut changed = steps.clone();
        for (s, st) in changed.iter_mut().enumerate() {
            for l in 0..m {
                if s * m + l > cut {
                    st.1[l] = other[s].1[l].clone();
                }
            }
            if s * m > cut {
                st.0 = other[s].0.clone();
            }
        }
        let (a, b) = (plan(&ks, &steps), plan(&ks, &changed));
        let p = trace(&prof);
        for kind in PredictorKind::ALL.into_iter().filter(|k| !k.reads_future()) {
            for l in [Learning::Online, Learning::Profile(&decoded(&p))] {
                prop_assert!(same_up_to(kind, (&a, &b), &ks, w, cut, l), "{kind:?} w {w} cut {cut}");
            }
        }
    }
}

#[test]
fn the_future_check_catches_the_oracle() {
    let ks = KeySpace::new(&model());
    let s = |a: [u16; 2], b: [u16; 2]| (vec![0], vec![a.to_vec(), b.to_vec()]);
    let a = plan(&ks, &[s([0, 1], [0, 1]), s([2, 3], [2, 3])]);
    let b = plan(&ks, &[s([0, 1], [3, 1]), s([2, 3], [2, 3])]);
    // at group 0 the oracle names group 1's page-in, which differs between the plans
    let online = Learning::Online;
    assert!(!same_up_to(
        PredictorKind::Oracle,
        (&a, &b),
        &ks,
        1,
        0,
        online
    ));
    assert!(same_up_to(
        PredictorKind::PrevToken,
        (&a, &b),
        &ks,
        1,
        0,
        online
    ));
}
