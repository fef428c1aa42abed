//! A generated trace file and its units, for the bounded passes' unit tests.

use super::Passes;
use crate::cache::Batching;
use crate::runner::{self, RunConfig};
use policies::UnitMap;
use traces::gen::{generate_trace, GenParams};
use traces::{KeySpace, ModelSpec, PhaseSel};

/// A generated trace file of `model` (`sequences` x `tokens` decode tokens) and its
/// `e1` units.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub path: std::path::PathBuf,
    pub ks: KeySpace,
    pub map: UnitMap,
}

impl Fixture {
    /// The fixture of `model`, its trace generated with seed 5.
    pub fn new(model: ModelSpec, sequences: u64, tokens: u64) -> Fixture {
        let params = GenParams {
            preset: None,
            skew: vec![1.0],
            locality: vec![0.3],
            cross_layer: 0.0,
            sequences,
            tokens,
            seed: 5,
            fitted_to: None,
            always_on: Vec::new(),
            archetypes: None,
        };
        let trace = generate_trace(&model, &params).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        traces::write_file(&path, &trace).unwrap();
        let mut cfg = RunConfig {
            policy: "e1".into(),
            ..RunConfig::default()
        };
        cfg.sizes.expert_mib = Some(1.5);
        let (map, _) = runner::build_units_with(&cfg, &model, |_| unreachable!()).unwrap();
        Fixture {
            _dir: dir,
            path,
            ks: trace.keyspace(),
            map,
        }
    }

    /// The passes over the trace, in batches of `batch` tokens.
    pub fn passes(&self, batch: usize) -> Passes<'_> {
        Passes {
            trace: &self.path,
            ks: &self.ks,
            map: &self.map,
            phases: PhaseSel::All,
            batching: Batching {
                batch,
                ..Batching::default()
            },
            tick: &|_| {},
        }
    }
}
