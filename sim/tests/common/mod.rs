//! Tiny hand-made traces for the sim tests.
#![allow(dead_code)]

use policies::PolicyKind;
use rand::Rng;
use rand_pcg::Pcg64;
use sim::cache::{Batching, Budget, CacheConfig, RetentionConfig, Semantics, Split};
use sim::runner::{RunConfig, TraceInput, Workload};
use traces::{ModelSpec, Provenance, SequenceData, TokenBlock, Trace};

/// A one-sequence decode-only trace; `tokens[t][m]` is token t's selection in MoE layer m.
pub fn trace(layers: usize, experts: u16, tokens: &[Vec<Vec<u16>>]) -> Trace {
    let k = tokens[0][0].len() as u16;
    let model = ModelSpec::uniform("tiny", layers, experts, k);
    Trace::decode_only(model, Provenance::default(), &[tokens.to_vec()])
        .expect("hand-made trace is valid")
}

pub fn workload(t: Trace) -> Workload {
    Workload::new(
        TraceInput {
            label: "tiny".into(),
            trace: t,
        },
        None,
    )
    .unwrap()
}

/// A config for `policy` with experts of `expert_mib` MiB and the default 2 MiB granule.
pub fn cfg(policy: &str, expert_mib: f64) -> RunConfig {
    let mut c = RunConfig {
        policy: policy.into(),
        ..RunConfig::default()
    };
    c.sizes.expert_mib = Some(expert_mib);
    c
}

/// Run the `sim` binary with `args`: (success, stdout, stderr).
pub fn sim(args: &[&str]) -> (bool, String, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .expect("the sim binary runs");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A trace of `model` with one sequence per (prefill, decode) token count, each token's
/// selections drawn by `rng` with a skew towards low expert ids (so that retention matters).
pub fn random_trace(model: ModelSpec, lens: &[(u64, u64)], rng: &mut Pcg64) -> Trace {
    let ks = traces::KeySpace::new(&model);
    let mut block = |n: u64| {
        let mut ids = Vec::new();
        for _ in 0..n {
            for m in 0..ks.num_moe_layers() {
                let mut sel: Vec<u16> = Vec::new();
                while sel.len() < ks.top_k[m] as usize {
                    let x: f64 = rng.gen();
                    let e = ((x * x * x) * ks.experts[m] as f64) as u16;
                    if !sel.contains(&e) {
                        sel.push(e);
                    }
                }
                ids.extend(sel);
            }
        }
        TokenBlock { ids, weights: None }
    };
    let sequences = lens
        .iter()
        .map(|&(p, d)| SequenceData {
            prefill: block(p),
            decode: block(d),
        })
        .collect();
    Trace::from_blocks(model, Provenance::default(), sequences).expect("a valid trace")
}

/// A retention configuration of `policy` at `budget` (seed 3, no DRAM tier, one-token
/// batches, no target).
pub fn retention(
    policy: PolicyKind,
    budget: &str,
    split: Split,
    semantics: Semantics,
) -> RetentionConfig {
    RetentionConfig {
        cache: CacheConfig {
            policy,
            budget: Budget::parse(budget).unwrap(),
            split,
            semantics,
            dram: None,
            seed: 3,
        },
        batching: Batching::default(),
        target: None,
    }
}

/// A trace file and a profile trace file of `model` in a temporary directory (removed on
/// drop): the trace has one sequence per (prefill, decode) count of `lens`, the profile one
/// of 2 prefill and 30 decode tokens, both drawn by [`random_trace`] from `rng`.
pub struct Files {
    _dir: tempfile::TempDir,
    pub trace: std::path::PathBuf,
    pub profile: std::path::PathBuf,
}

impl Files {
    pub fn write(model: &ModelSpec, lens: &[(u64, u64)], rng: &mut Pcg64) -> Files {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("t.bin");
        traces::write_file(&trace, &random_trace(model.clone(), lens, rng)).unwrap();
        let profile = dir.path().join("p.bin");
        traces::write_file(&profile, &random_trace(model.clone(), &[(2, 30)], rng)).unwrap();
        Files {
            _dir: dir,
            trace,
            profile,
        }
    }
}

/// A 4-layer model of 16 experts, top-2, with a hidden size and an expert FFN width (the
/// timed paths' compute model and CPU lane read them).
pub fn timed_model() -> ModelSpec {
    let mut model = ModelSpec::uniform("tiny", 4, 16, 2);
    model.hidden_size = Some(1024);
    model.expert_ffn = Some(512);
    model
}

/// Sequences (prefill, decode tokens) of unequal lengths, one without decode tokens and one
/// without prefill tokens.
pub const MIXED_LENS: [(u64, u64); 4] = [(5, 40), (0, 25), (3, 0), (7, 61)];

/// Both paths' reports of `cfg` on the trace file `trace` as JSON (floats printed exactly:
/// equal text is equal bits): the in-memory `runner::run` on the loaded trace and the bounded
/// `sim::bounded::run_file`; when both fail, their errors' text. A successful in-memory
/// report must contain `expect` (the block under test; "" for none).
pub fn both_paths(
    cfg: &RunConfig,
    trace: &std::path::Path,
    profile: Option<&std::path::Path>,
    expect: &str,
) -> (String, String) {
    let load = |p: &std::path::Path| TraceInput::load(Some(p)).unwrap();
    let w = Workload::new(load(trace), profile.map(load)).unwrap();
    let memory = sim::runner::run(cfg, &w).map(|r| serde_json::to_string(&r).unwrap());
    let bounded = sim::bounded::run_file(cfg, trace, profile, &|_| {})
        .map(|r| serde_json::to_string(&r).unwrap());
    match (memory, bounded) {
        (Ok(a), Ok(b)) => {
            assert!(a.contains(expect), "{a}");
            (a, b)
        }
        (Err(a), Err(b)) => (format!("{a:#}"), format!("{b:#}")),
        (a, b) => panic!("{cfg:?}: in memory {a:?}, bounded {b:?}"),
    }
}
