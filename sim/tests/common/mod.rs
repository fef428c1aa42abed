//! Tiny hand-made traces for the sim tests.
#![allow(dead_code)]

use sim::runner::{RunConfig, TraceInput, Workload};
use traces::{ModelSpec, Provenance, Trace};

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
