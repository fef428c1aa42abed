//! The calibration-style check against the published RTX 4060 per-expert paging churn
//! (docs/reference/measurements.md, from the onnx-genai benchmark notes): 32 experts, top-8,
//! 200 decode steps, a budget of 8 experts, `e1` + LRU, paging only (`--compute none`).
//! Routing as in that harness: uniform = 8 of 32 drawn uniformly per step; skewed = a fixed
//! hot core of 4 experts always selected plus 4 drawn uniformly from the other 28.

use super::config::TimingConfig;
use crate::cache::{Batching, Budget, CacheConfig, RetentionConfig, Semantics, Split};
use crate::model_profile::{ComputeMode, ComputeOverrides};
use crate::runner::{self, RunConfig, TraceInput, Workload};
use anyhow::{Context, Result};
use policies::retention::PolicyKind;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use serde::Serialize;
use traces::{Header, ModelSpec, Provenance, SequenceData, SequenceInfo, TokenBlock, Trace};

/// Routing of the churn harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Routing {
    Uniform,
    Skewed,
}

/// One row of the published table: (expert MiB, routing, page-ins, H2D ms/step,
/// map/unmap ms/step, wall ms/step). Source: docs/reference/measurements.md, "Per-expert paging
/// churn, 32 experts, top-8, 200 steps, budget 8 experts (real VMM arena)".
pub const MEASURED: [(u64, Routing, u64, f64, f64, f64); 6] = [
    (2, Routing::Uniform, 1345, 2.36, 3.48, 5.84),
    (2, Routing::Skewed, 719, 1.33, 2.01, 3.34),
    (3, Routing::Uniform, 1229, 3.61, 3.26, 6.87),
    (3, Routing::Skewed, 649, 1.98, 1.85, 3.84),
    (16, Routing::Uniform, 1345, 20.8, 6.17, 26.95),
    (16, Routing::Skewed, 719, 10.9, 3.39, 14.34),
];

/// The harness's routed sequence: one MoE layer of 32 experts, top-8, 200 decode tokens,
/// drawn with PCG from `seed`.
pub fn churn_trace(routing: Routing, seed: u64) -> Trace {
    const STEPS: usize = 200;
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut ids = Vec::with_capacity(STEPS * 8);
    for _ in 0..STEPS {
        match routing {
            Routing::Uniform => ids.extend(sample(&mut rng, 32, 8).iter().map(|e| e as u16)),
            Routing::Skewed => {
                ids.extend(0..4u16);
                ids.extend(sample(&mut rng, 28, 4).iter().map(|e| 4 + e as u16));
            }
        }
    }
    Trace {
        header: Header {
            model: ModelSpec::uniform("churn-harness", 1, 32, 8),
            provenance: Provenance {
                source: "generated: the routing of the onnx-genai per-expert paging churn harness"
                    .into(),
                tool: "sim profile check-churn".into(),
                synthetic: true,
                generator: Some(format!("{{\"routing\":\"{routing:?}\",\"seed\":{seed}}}")),
                ..Default::default()
            },
            sequences: vec![SequenceInfo {
                name: format!("{routing:?}").to_lowercase(),
                prefill_tokens: 0,
                decode_tokens: STEPS as u64,
            }],
            has_weights: false,
            passes: None,
        },
        sequences: vec![SequenceData {
            prefill: TokenBlock::default(),
            decode: TokenBlock { ids, weights: None },
        }],
    }
}

/// Predicted against measured, one table row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChurnRow {
    pub expert_mib: u64,
    pub routing: Routing,
    pub page_ins: u64,
    pub page_ins_measured: u64,
    pub h2d_ms: f64,
    pub h2d_ms_measured: f64,
    pub map_unmap_ms: f64,
    pub map_unmap_ms_measured: f64,
    pub wall_ms: f64,
    pub wall_ms_measured: f64,
}

/// Replay every row of [`MEASURED`] on the profile of `hw` (its other options are replaced:
/// no compute, no non-expert memory or KV cache); `serial_loader` as in the harness
/// (one thread: map, copy, unmap in turn). The harness's page-in counts match access
/// semantics (eviction after every access, no protection of the current step's experts):
/// with group semantics uniform routing pages in about 6 experts per step (8 x (1 - 8/32)),
/// 1,202 in 200 steps, not 1,345.
pub fn check_churn(
    hw: &TimingConfig,
    seed: u64,
    serial_loader: bool,
    semantics: Semantics,
) -> Result<Vec<ChurnRow>> {
    let mut rows = Vec::new();
    for &(mib, routing, pi, h2d, vmm, wall) in &MEASURED {
        let trace = churn_trace(routing, seed);
        let w = Workload::new(
            TraceInput {
                label: format!("churn-{routing:?}"),
                trace,
            },
            None,
        )?;
        let mut cfg = RunConfig {
            policy: "e1".into(),
            retention: Some(RetentionConfig {
                cache: CacheConfig {
                    policy: PolicyKind::Lru,
                    budget: Budget::Units(8),
                    split: Split::Global,
                    semantics,
                    dram: None,
                    seed,
                },
                batching: Batching::default(),
                target: None,
            }),
            timing: Some(TimingConfig {
                compute: ComputeMode::None,
                overrides: ComputeOverrides {
                    nonexpert_mib: Some(0.0),
                    kv_bytes_per_token: Some(0),
                    ..Default::default()
                },
                serial_loader,
                seed,
                ..hw.clone()
            }),
            ..RunConfig::default()
        };
        cfg.sizes.expert_mib = Some(mib as f64);
        let r =
            runner::run(&cfg, &w).with_context(|| format!("churn row {mib} MiB {routing:?}"))?;
        let t = r.timing.expect("timing was requested");
        rows.push(ChurnRow {
            expert_mib: mib,
            routing,
            page_ins: r.cache.expect("retention was requested").page_ins,
            page_ins_measured: pi,
            h2d_ms: t.h2d_ms_per_step,
            h2d_ms_measured: h2d,
            map_unmap_ms: t.vmm_ms_per_step,
            map_unmap_ms_measured: vmm,
            wall_ms: t.step_ms_mean,
            wall_ms_measured: wall,
        });
    }
    Ok(rows)
}
