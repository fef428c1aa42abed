//! Prefetch predictors: at the router of group `gi`, name the units group `gi + window` will
//! need, so the engine can page them in early.

use super::plan::Plans;
use policies::UnitMap;
use traces::KeySpace;

/// `--predictor`: how the units of a future group are guessed. A handle on a
/// [`PredictorEntry`] in [`PREDICTORS`]; the associated constants name the registered
/// predictors, and [`PredictorKind::parse`] and [`PredictorKind::ALL`] reach every one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PredictorKind(u8);

/// What the rest of the workspace knows about one predictor.
#[derive(Clone, Copy, Debug)]
pub struct PredictorEntry {
    /// The `--predictor` name (lower case, as results files write it).
    pub name: &'static str,
    /// Other names `--predictor` accepts.
    pub aliases: &'static [&'static str],
    /// The `Debug` form.
    pub debug_name: &'static str,
    /// One line on what it predicts (no trailing period); `--help` lists it.
    pub summary: &'static str,
    /// What the `--predictor` help says in parentheses after the name, if anything.
    pub help_note: Option<&'static str>,
    /// Needs a profile trace (none of the current predictors does: `static` counts over the
    /// evaluated run itself).
    pub needs_profile: bool,
    /// Build the predictor for one replay.
    pub build: for<'a> fn(PredictInputs<'a>) -> Box<dyn Predict + 'a>,
}

/// What a predictor is built from: the replay's plans, its units and the trace's key space.
#[derive(Clone, Copy)]
pub struct PredictInputs<'a> {
    pub plans: &'a Plans,
    pub units: &'a UnitMap,
    pub ks: &'a KeySpace,
}

/// A predictor bound to one replay.
pub trait Predict {
    /// Append to `out` the units predicted for group `gt`, predicting at group `gi`.
    fn predict(&self, gi: usize, gt: usize, out: &mut Vec<u32>);
}

/// Every predictor, in the order `--help` lists them.
pub const PREDICTORS: &[PredictorEntry] = &[
    PredictorEntry {
        name: "none",
        aliases: &[],
        debug_name: "None",
        summary: "No prefetch: every page-in is on demand",
        help_note: None,
        needs_profile: false,
        build: |_| Box::new(NoPrefetch),
    },
    PredictorEntry {
        name: "oracle",
        aliases: &[],
        debug_name: "Oracle",
        summary: "The exact page-ins of the target group (the bound no real predictor beats)",
        help_note: Some("the bound"),
        needs_profile: false,
        build: |i| Box::new(Oracle(i.plans)),
    },
    PredictorEntry {
        name: "prev-token",
        aliases: &[],
        debug_name: "PrevToken",
        summary: "The units the same layer accessed in the previous step",
        help_note: None,
        needs_profile: false,
        build: |i| Box::new(PrevToken(i.plans)),
    },
    PredictorEntry {
        name: "static",
        aliases: &[],
        debug_name: "Static",
        summary: "The most frequently accessed units of the target layer over the whole run, \
                  as many as the layer accesses per group on average",
        help_note: Some("most used units per layer"),
        needs_profile: false,
        build: |i| Box::new(Static::new(i)),
    },
    PredictorEntry {
        name: "next-layer",
        aliases: &[],
        debug_name: "NextLayer",
        summary: "The expert ids the current layer selected, looked up in the target layer",
        help_note: None,
        needs_profile: false,
        build: |i| Box::new(NextLayer(i)),
    },
];

#[allow(non_upper_case_globals)]
impl PredictorKind {
    /// No prefetch (the default).
    pub const None: PredictorKind = PredictorKind::named("none");
    /// The exact page-ins of the target group.
    pub const Oracle: PredictorKind = PredictorKind::named("oracle");
    /// The units the same layer accessed in the previous step.
    pub const PrevToken: PredictorKind = PredictorKind::named("prev-token");
    /// The most used units of the target layer.
    pub const Static: PredictorKind = PredictorKind::named("static");
    /// The current layer's expert ids in the target layer.
    pub const NextLayer: PredictorKind = PredictorKind::named("next-layer");

    /// Every registered predictor, in registry order.
    pub const ALL: [PredictorKind; PREDICTORS.len()] = {
        let mut kinds = [PredictorKind(0); PREDICTORS.len()];
        let mut i = 0;
        while i < kinds.len() {
            kinds[i] = PredictorKind(i as u8);
            i += 1;
        }
        kinds
    };

    /// The registered predictor called `name`; a compile-time error in a constant when there
    /// is none.
    const fn named(name: &str) -> PredictorKind {
        let mut i = 0;
        while i < PREDICTORS.len() {
            let (a, b) = (PREDICTORS[i].name.as_bytes(), name.as_bytes());
            if a.len() == b.len() {
                let mut j = 0;
                while j < a.len() && a[j] == b[j] {
                    j += 1;
                }
                if j == a.len() {
                    return PredictorKind(i as u8);
                }
            }
            i += 1;
        }
        panic!("not a registered predictor")
    }

    /// The predictor's registry entry.
    pub fn entry(self) -> &'static PredictorEntry {
        &PREDICTORS[self.0 as usize]
    }

    /// The `--predictor` name.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// True when the predictor needs a profile trace.
    pub fn needs_profile(self) -> bool {
        self.entry().needs_profile
    }

    /// Parse a `--predictor` name or alias (exact, lower case).
    pub fn parse(s: &str) -> Result<PredictorKind, String> {
        PredictorKind::ALL
            .into_iter()
            .find(|k| k.name() == s || k.entry().aliases.contains(&s))
            .ok_or_else(|| {
                let names: Vec<_> = PREDICTORS.iter().map(|e| e.name).collect();
                format!(
                    "unknown predictor `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl Default for PredictorKind {
    fn default() -> Self {
        PredictorKind::None
    }
}

impl std::fmt::Debug for PredictorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.entry().debug_name)
    }
}

impl std::fmt::Display for PredictorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Serialized as its `--predictor` name.
impl serde::Serialize for PredictorKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A predictor bound to one replay.
pub struct Predictor<'a> {
    kind: PredictorKind,
    inner: Box<dyn Predict + 'a>,
}

impl<'a> Predictor<'a> {
    pub fn new(
        kind: PredictorKind,
        plans: &'a Plans,
        units: &'a UnitMap,
        ks: &'a KeySpace,
    ) -> Self {
        let inner = (kind.entry().build)(PredictInputs { plans, units, ks });
        Predictor { kind, inner }
    }

    pub fn kind(&self) -> PredictorKind {
        self.kind
    }

    /// Append to `out` the units predicted for group `gt`, predicting at group `gi`.
    pub fn predict(&self, gi: usize, gt: usize, out: &mut Vec<u32>) {
        self.inner.predict(gi, gt, out)
    }
}

/// `none`.
struct NoPrefetch;

impl Predict for NoPrefetch {
    fn predict(&self, _gi: usize, _gt: usize, _out: &mut Vec<u32>) {}
}

/// `oracle`: the target group's page-ins.
struct Oracle<'a>(&'a Plans);

impl Predict for Oracle<'_> {
    fn predict(&self, _gi: usize, gt: usize, out: &mut Vec<u32>) {
        out.extend_from_slice(self.0.page_ins(&self.0.groups[gt]))
    }
}

/// `prev-token`: what the target's layer accessed one step earlier.
struct PrevToken<'a>(&'a Plans);

impl Predict for PrevToken<'_> {
    fn predict(&self, _gi: usize, gt: usize, out: &mut Vec<u32>) {
        let p = self.0;
        if gt >= p.moe_layers {
            out.extend_from_slice(p.accessed(&p.groups[gt - p.moe_layers]));
        }
    }
}

/// `static`: the top units of each MoE layer over the whole run.
struct Static<'a> {
    plans: &'a Plans,
    /// Top units of each MoE layer.
    top: Vec<Vec<u32>>,
}

impl<'a> Static<'a> {
    fn new(i: PredictInputs<'a>) -> Self {
        let (plans, units) = (i.plans, i.units);
        let mut top = Vec::new();
        let m = plans.moe_layers;
        let mut counts = vec![0u64; units.num_units()];
        let mut per_layer = vec![(0u64, 0u64); m]; // (accessed units, groups)
        for g in &plans.groups {
            let acc = plans.accessed(g);
            for &u in acc {
                counts[u as usize] += 1;
            }
            let e = &mut per_layer[g.moe_layer as usize];
            e.0 += acc.len() as u64;
            e.1 += 1;
        }
        for (layer, &(acc, groups)) in per_layer.iter().enumerate() {
            let want = if groups == 0 {
                0
            } else {
                ((acc as f64 / groups as f64).round()) as usize
            };
            let mut cand: Vec<u32> = (0..units.num_units() as u32)
                .filter(|&u| {
                    let i = &units.units[u as usize];
                    i.first_moe_layer as usize <= layer
                        && layer <= i.last_moe_layer as usize
                        && counts[u as usize] > 0
                })
                .collect();
            // most accessed first, ties by unit id: deterministic
            cand.sort_by(|&a, &b| counts[b as usize].cmp(&counts[a as usize]).then(a.cmp(&b)));
            cand.truncate(want);
            top.push(cand);
        }
        Static { plans, top }
    }
}

impl Predict for Static<'_> {
    fn predict(&self, _gi: usize, gt: usize, out: &mut Vec<u32>) {
        let target = &self.plans.groups[gt];
        out.extend_from_slice(&self.top[target.moe_layer as usize])
    }
}

/// `next-layer`: the current group's expert ids, looked up in the target layer.
struct NextLayer<'a>(PredictInputs<'a>);

impl Predict for NextLayer<'_> {
    fn predict(&self, gi: usize, gt: usize, out: &mut Vec<u32>) {
        let PredictInputs {
            plans: p,
            units,
            ks,
        } = self.0;
        let mt = p.groups[gt].moe_layer as usize;
        for &k in p.keys(&p.groups[gi]) {
            let (_, e) = ks.split(k);
            if e < ks.experts[mt] {
                out.extend(units.units_of(ks.key(mt, e)));
            }
        }
    }
}

#[cfg(test)]
mod registry_tests {
    use super::*;

    #[test]
    fn names_are_unique_and_parse_back() {
        let mut seen = std::collections::HashSet::new();
        for (i, e) in PREDICTORS.iter().enumerate() {
            for n in std::iter::once(&e.name).chain(e.aliases) {
                assert!(seen.insert(*n), "{n} is registered twice");
                assert_eq!(PredictorKind::parse(n).unwrap(), PredictorKind::ALL[i]);
            }
            assert_eq!(format!("{:?}", PredictorKind::ALL[i]), e.debug_name);
            assert_eq!(
                serde_json::to_string(&PredictorKind::ALL[i]).unwrap(),
                format!("\"{}\"", e.name)
            );
        }
        assert_eq!(PredictorKind::default(), PredictorKind::None);
    }
}
