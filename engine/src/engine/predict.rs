//! Prefetch predictors: at the router of group `gi`, name the units group `gi + window` will
//! need, so the engine can page them in early.
//!
//! A predictor sees the replay through a [`History`]: the groups up to the current one, so it
//! cannot read a token not routed yet. Only `oracle`, the bound, reads the plan's future. The
//! predictors that learn (`static`, `next-layer`, `eam`) learn from one [`Learning`] source:
//! the profile trace, before the replay and never after, or (without one) the replay's own
//! groups, each as its router picks it.

mod eam;
mod learn;
mod popular;
mod recent;
mod successor;
#[cfg(test)]
mod tests;

pub use super::plan::{History, Seen};
pub use learn::{Learning, LearnsFrom, LoadedProfile, ProfileGroups};

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
    /// Reads groups after the current one (the oracle bound); every other predictor sees
    /// only a [`History`], which the tests hold it to.
    pub reads_future: bool,
    /// Learns from the [`Learning`] source (the profile trace, or online); `false`: it uses
    /// nothing beyond what its summary says.
    pub learns: bool,
    /// Build the predictor for one replay.
    pub build: for<'a> fn(PredictInputs<'a>) -> Box<dyn Predict + 'a>,
}

/// What a predictor is built from.
#[derive(Clone, Copy)]
pub struct PredictInputs<'a> {
    pub units: &'a UnitMap,
    pub ks: &'a KeySpace,
    /// Prefetch lead in groups (MoE layers), >= 1.
    pub window: usize,
    pub learning: Learning<'a>,
    /// The confidence cut (`--prefetch-min-score`): a predictor that scores its experts
    /// names only those scoring at least this fraction of the prediction's best score
    /// (DESIGN.md, "Prefetch predictors"); `None`: no cut.
    pub min_score: Option<f64>,
}

/// The group a prediction is for: its number in the replay and its MoE layer. The number
/// lets `prev-token` find the step before it; the others use only the layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target<'a> {
    pub group: usize,
    pub moe_layer: usize,
    /// The target group's page-ins as the plan decided them: the future, which only a
    /// predictor with `reads_future` (the oracle) may read.
    pub page_ins: &'a [u32],
}

/// A predictor bound to one replay.
pub trait Predict {
    /// Called at every group's router, in group order, before any prediction made there:
    /// `h.current()` is the group whose router just ran. Default: nothing to learn.
    fn observe(&mut self, _h: &History<'_>) {}

    /// Append to `out` the units predicted for `target`, predicting at `h.current()`.
    fn predict(&mut self, h: &History<'_>, target: Target, out: &mut Vec<u32>);

    /// The score of each unit the last [`Predict::predict`] appended, as a fraction of that
    /// prediction's best (the score the confidence cut compares); `None`: every unit scores
    /// 1 (the oracle, `prev-token`: unranked).
    fn scores(&self) -> Option<&[f64]> {
        None
    }
}

/// Every predictor, in the order `--help` lists them.
pub const PREDICTORS: &[PredictorEntry] = &[
    PredictorEntry {
        name: "none",
        aliases: &[],
        debug_name: "None",
        summary: "No prefetch: every page-in is on demand",
        help_note: None,
        reads_future: false,
        learns: false,
        build: |_| Box::new(recent::NoPrefetch),
    },
    PredictorEntry {
        name: "oracle",
        aliases: &[],
        debug_name: "Oracle",
        summary: "The exact page-ins of the target group (the bound no real predictor beats)",
        help_note: Some("the bound"),
        reads_future: true,
        learns: false,
        build: |_| Box::new(recent::Oracle),
    },
    PredictorEntry {
        name: "prev-token",
        aliases: &[],
        debug_name: "PrevToken",
        summary: "The units the target's layer accessed one step before the target's step",
        help_note: None,
        reads_future: false,
        learns: false,
        build: |i| Box::new(recent::PrevToken::new(i)),
    },
    PredictorEntry {
        name: "static",
        aliases: &[],
        debug_name: "Static",
        summary: "The target layer's most selected experts in what it learned from (the \
                  profile trace, or the run so far)",
        help_note: Some("most used experts per layer"),
        reads_future: false,
        learns: true,
        build: |i| Box::new(popular::Static::new(i)),
    },
    PredictorEntry {
        name: "next-layer",
        aliases: &[],
        debug_name: "NextLayer",
        summary: "The successor table: the experts most often selected `--window` MoE layers \
                  after the current group's experts",
        help_note: Some("successor table"),
        reads_future: false,
        learns: true,
        build: |i| Box::new(successor::NextLayer::new(i)),
    },
    PredictorEntry {
        name: "eam",
        aliases: &[],
        debug_name: "Eam",
        summary: "MoE-Infinity's expert activation matrix: the target layer's experts in the \
                  past request most similar (cosine) to the current one so far",
        help_note: Some("activation matrix"),
        reads_future: false,
        learns: true,
        build: |i| Box::new(eam::Eam::new(i)),
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
    /// The successor table of the current group's experts.
    pub const NextLayer: PredictorKind = PredictorKind::named("next-layer");
    /// The expert activation matrix of the most similar past request.
    pub const Eam: PredictorKind = PredictorKind::named("eam");

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

    /// True for the bound that reads the plan's future (`oracle`).
    pub fn reads_future(self) -> bool {
        self.entry().reads_future
    }

    /// True when the predictor learns from a [`Learning`] source.
    pub fn learns(self) -> bool {
        self.entry().learns
    }

    /// Where this predictor's knowledge comes from under `learning`, as its output says.
    pub fn learns_from(self, learning: &Learning<'_>) -> LearnsFrom {
        match (self.reads_future(), self.learns(), learning) {
            (true, _, _) => LearnsFrom::Future,
            (false, true, Learning::Profile(_)) => LearnsFrom::Profile,
            _ => LearnsFrom::Online,
        }
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
    /// Build `kind` for a replay with prefetch lead `window`, keeping only predictions at
    /// or above the confidence cut `min_score` (see [`PredictInputs::min_score`]).
    pub fn new(
        kind: PredictorKind,
        units: &'a UnitMap,
        ks: &'a KeySpace,
        window: usize,
        learning: Learning<'a>,
        min_score: Option<f64>,
    ) -> Self {
        let inner = (kind.entry().build)(PredictInputs {
            units,
            ks,
            window,
            learning,
            min_score,
        });
        Predictor { kind, inner }
    }

    pub fn kind(&self) -> PredictorKind {
        self.kind
    }

    /// See [`Predict::observe`].
    pub fn observe(&mut self, h: &History<'_>) {
        self.inner.observe(h)
    }

    /// See [`Predict::predict`].
    pub fn predict(&mut self, h: &History<'_>, target: Target, out: &mut Vec<u32>) {
        self.inner.predict(h, target, out)
    }

    /// See [`Predict::scores`].
    pub fn scores(&self) -> Option<&[f64]> {
        self.inner.scores()
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
