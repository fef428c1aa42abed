//! `sim validate`: replay a trace for real on the local GPU and compare with the simulator.
//!
//! Per mechanism: the retention driver's plans (page-ins and evictions of every (step, layer)
//! group) are recorded once; the discrete-event engine prices them (the prediction) and the
//! `validate` crate executes the same plans on the GPU (the measurement: VMM commits and pinned
//! H2D copies, or managed memory with demand faults, and the int4 expert kernels), timing each
//! decode step with CUDA events. Both see the same steps, so the step-time distributions compare
//! one to one.

use super::args_cache::CacheArgs;
use super::args_input::{emit, InputArgs};
use super::args_timing::TimingArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use sim::cache::Batching;
use sim::cost::{CostModel, CostOptions, Paging};
use sim::engine::{build::plans, replay, EngineOptions, Plans, PredictorKind};
use sim::model_profile::ComputeModel;
use sim::runner::{build_units, parse_policy, RunConfig};
use std::fmt::Write;
use std::path::PathBuf;
use validate::{ReplayGroup, ReplayMeasurement, ReplayOptions, ReplayPaging, ReplayPlan};

/// Arguments of `sim validate`.
#[derive(Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Mechanisms to replay, comma-separated: eN[:index|hot|coact], region:R, os4k, os64k, os2m
    /// (each is predicted and measured on the same plans).
    #[arg(long, value_delimiter = ',', required = true, value_name = "SPEC")]
    pub policy: Vec<String>,

    /// Replay only the first N decode steps of the trace (prediction and measurement both;
    /// default: every step).
    #[arg(long, value_name = "N")]
    pub steps: Option<usize>,

    /// CUDA device ordinal to replay on.
    #[arg(long, default_value_t = 0, value_name = "ORDINAL")]
    pub device: usize,

    /// Print the `validation` block as JSON.
    #[arg(long)]
    pub json: bool,

    /// Write the output to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub timing: TimingArgs,
}

/// p50, p99 and mean of step times, ms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StepStats {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

impl StepStats {
    /// Nearest-rank percentiles (rank ceil(q x n)) and the mean of `us` (µs), in ms.
    pub fn of(us: &[f64]) -> StepStats {
        let mut s = us.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let q = |p: f64| {
            if n == 0 {
                0.0
            } else {
                s[((p * n as f64).ceil() as usize).clamp(1, n) - 1] / 1e3
            }
        };
        StepStats {
            p50_ms: q(0.50),
            p99_ms: q(0.99),
            mean_ms: if n == 0 {
                0.0
            } else {
                s.iter().sum::<f64>() / n as f64 / 1e3
            },
        }
    }
}

/// (predicted - measured) / measured, in percent.
fn error_pct(pred: f64, meas: f64) -> f64 {
    100.0 * (pred - meas) / meas
}

/// One mechanism's row of the `validation` block.
#[derive(Clone, Debug, Serialize)]
pub struct ValidationRow {
    pub policy: String,
    pub steps: usize,
    pub page_ins: u64,
    pub measured: StepStats,
    pub predicted: StepStats,
    /// Error of the prediction, percent of the measurement: p50, p99, mean.
    pub error_pct_p50: f64,
    pub error_pct_p99: f64,
    pub error_pct_mean: f64,
    pub replay: ReplayMeasurement,
}

/// The `validation` block.
#[derive(Clone, Debug, Serialize)]
pub struct Validation {
    pub trace: String,
    pub model: String,
    pub hw: String,
    pub expert_bytes: u64,
    /// Retention echo: `evict@budget`, or `streaming`.
    pub retention: String,
    pub rows: Vec<ValidationRow>,
}

pub fn run(args: ValidateArgs) -> Result<()> {
    for spec in &args.policy {
        parse_policy(spec, "--policy")?;
    }
    let seed = args.cache.seed;
    let Some(tc) = args.timing.for_run(seed)? else {
        bail!("`sim validate` needs --hw: the profile that prices the prediction (e.g. --hw h200-linux, or the JSON `sim calibrate` wrote)");
    };
    if tc.predictor != PredictorKind::None
        || tc.handle_pool
        || tc.deferred_unmap
        || tc.serial_loader
        || tc.admission_cap.is_some()
        || tc.timeline.is_some()
        || tc.overrides.nonexpert_us.is_some()
        || tc.overrides.expert_us.is_some()
    {
        bail!("`sim validate` replays the default engine (no --predictor, --handle-pool, --deferred-unmap, --serial-loader, --admission-cap, --timeline, --nonexpert-us or --expert-us): the real replay runs those paths as the engine's defaults do; leave these flags out");
    }
    let retention = args.cache.for_run()?;
    if retention.as_ref().is_some_and(|r| r.target.is_some()) {
        bail!("`sim validate` takes a fixed --budget; --target-tokens-per-s is a search, run it with `sim run` first");
    }
    let w = args.input.workload()?;
    let trace = &w.trace.trace;
    let model = &trace.header.model;
    let Some(hidden) = model.hidden_size else {
        bail!("the trace header of '{}' records no hidden size: the replay's expert kernels need it (re-import the trace with the model geometry)", model.name);
    };
    let hw = profile::load(&tc.hw)?;
    policies::mechanisms::Sizes::resolve(model, &args.input.sizes())?;
    // Only now, with every argument checked, look for the GPU: a bad argument is reported as
    // such on any machine.
    kernels::check_cuda_libraries().context("`sim validate` replays on the local GPU")?;
    let ks = trace.keyspace();
    let mut rows = Vec::new();
    let mut expert_bytes = 0;
    for spec in &args.policy {
        let cfg = RunConfig {
            policy: spec.clone(),
            phase: args.input.phase,
            sizes: args.input.sizes(),
            retention: retention.clone(),
            timing: None,
        };
        let (map, _) = build_units(&cfg, &w)?;
        expert_bytes = map.expert_bytes;
        let batching = retention
            .as_ref()
            .map(|r| r.batching)
            .unwrap_or(Batching::default());
        let p = plans(
            trace,
            args.input.phase,
            &map,
            batching,
            w.profile.as_ref().map(|t| &t.trace),
            retention.as_ref().map(|r| &r.cache),
        )?;
        let paging = Paging::of_spec(&map.spec);
        let cost = CostModel::new(&hw, paging, CostOptions::default())?;
        let mut compute =
            ComputeModel::new(tc.compute, model, map.expert_bytes, &hw, &tc.overrides)?;
        // the replay runs no attention kernel and so reads no KV cache: price none either
        compute.kv_us_per_token = 0.0;
        let pred = replay(
            &p,
            &map,
            &ks,
            &cost,
            &compute,
            EngineOptions {
                seed,
                ..EngineOptions::default()
            },
        )?;
        let steps = args.steps.unwrap_or(p.steps.len()).min(p.steps.len());
        if steps == 0 {
            bail!(
                "the trace has no {} steps to replay",
                args.input.phase.as_str()
            );
        }
        let moe_layers = p.moe_layers.max(1);
        let nonexpert_bytes_per_layer = if compute.nonexpert_us > 0.0 {
            (compute.nonexpert_bytes / moe_layers as f64) as u64
        } else {
            0
        };
        let rp = replay_plan(&p, steps, paging, hidden as u64, nonexpert_bytes_per_layer);
        let page_ins = rp.groups.iter().map(|g| g.page_ins.len() as u64).sum();
        let peak = (pred.peak_mapped_bytes - compute.nonexpert_bytes).max(0.0) as u64;
        eprintln!(
            "validate: {} on {}: {} steps, {} page-ins, replaying on the GPU",
            map.spec, w.trace.label, steps, page_ins
        );
        let meas = validate::replay(
            &rp,
            &map,
            peak,
            ReplayOptions {
                device: args.device,
            },
        )
        .with_context(|| format!("replaying --policy {} on the GPU", map.spec))?;
        let measured = StepStats::of(&meas.step_us);
        let predicted = StepStats::of(&pred.step_us[..steps]);
        rows.push(ValidationRow {
            policy: map.spec.clone(),
            steps,
            page_ins,
            error_pct_p50: error_pct(predicted.p50_ms, measured.p50_ms),
            error_pct_p99: error_pct(predicted.p99_ms, measured.p99_ms),
            error_pct_mean: error_pct(predicted.mean_ms, measured.mean_ms),
            measured,
            predicted,
            replay: meas,
        });
    }
    let v = Validation {
        trace: w.trace.label.clone(),
        model: model.name.clone(),
        hw: hw.name.clone(),
        expert_bytes,
        retention: match &retention {
            Some(r) => format!("{:?}@{:?}", r.cache.policy, r.cache.budget),
            None => "streaming".into(),
        },
        rows,
    };
    let text = if args.json {
        serde_json::to_string_pretty(&serde_json::json!({ "validation": v }))? + "\n"
    } else {
        table(&v)
    };
    emit(args.out.as_deref(), &text)
}

/// The plain-data plan of the first `steps` steps of `p` for the GPU replay.
pub fn replay_plan(
    p: &Plans,
    steps: usize,
    paging: Paging,
    hidden: u64,
    nonexpert_bytes_per_layer: u64,
) -> ReplayPlan {
    ReplayPlan {
        paging: match paging {
            Paging::Vmm => ReplayPaging::Vmm,
            Paging::Os => ReplayPaging::Os,
        },
        groups: p
            .groups
            .iter()
            .take_while(|g| (g.step as usize) < steps)
            .map(|g| ReplayGroup {
                step: g.step,
                moe_layer: g.moe_layer,
                keys: p.keys(g).to_vec(),
                page_ins: p.page_ins(g).to_vec(),
                evicted: p.evicted(g).to_vec(),
            })
            .collect(),
        preloaded: p.preloaded.clone(),
        steps,
        moe_layers: p.moe_layers,
        hidden: hidden as usize,
        nonexpert_bytes_per_layer,
    }
}

/// The human-readable validation table.
fn table(v: &Validation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "trace {} ({}), expert {:.2} MiB, {}, profile {}",
        v.trace,
        v.model,
        v.expert_bytes as f64 / sim::MIB,
        v.retention,
        v.hw
    );
    let _ = writeln!(
        s,
        "{:<14} {:>6} {:>9}   {:>27}   {:>27}   {:>22}",
        "policy",
        "steps",
        "page-ins",
        "measured p50/p99/mean ms",
        "predicted p50/p99/mean ms",
        "error % p50/p99/mean"
    );
    for r in &v.rows {
        let _ = writeln!(
            s,
            "{:<14} {:>6} {:>9}   {:>8.3} {:>8.3} {:>9.3}   {:>8.3} {:>8.3} {:>9.3}   {:>6.1} {:>6.1} {:>7.1}",
            r.policy,
            r.steps,
            r.page_ins,
            r.measured.p50_ms,
            r.measured.p99_ms,
            r.measured.mean_ms,
            r.predicted.p50_ms,
            r.predicted.p99_ms,
            r.predicted.mean_ms,
            r.error_pct_p50,
            r.error_pct_p99,
            r.error_pct_mean
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: ValidateArgs,
    }

    #[test]
    fn without_a_gpu_validate_fails_at_once() {
        if kernels::check_cuda_libraries().is_ok() {
            return; // a GPU machine: nothing to check here
        }
        // valid arguments (the embedded trace): arguments are checked before the GPU is
        let args =
            Cli::try_parse_from(["validate", "--policy", "e1", "--hw", "h200-linux", "--json"])
                .unwrap()
                .a;
        let err = format!("{:#}", run(args).unwrap_err());
        assert!(
            err.contains("needs an NVIDIA GPU") && err.contains("driver"),
            "{err}"
        );
    }

    #[test]
    fn step_stats_by_hand() {
        // 1..=100 µs: nearest-rank p50 = 50, p99 = 99, mean 50.5
        let us: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = StepStats::of(&us);
        assert_eq!((s.p50_ms, s.p99_ms), (0.050, 0.099));
        assert!((s.mean_ms - 0.0505).abs() < 1e-12);
        // three samples: p50 = rank 2, p99 = rank 3
        let s = StepStats::of(&[3000.0, 1000.0, 2000.0]);
        assert_eq!((s.p50_ms, s.p99_ms, s.mean_ms), (2.0, 3.0, 2.0));
        assert_eq!(error_pct(1.1, 1.0).round(), 10.0);
    }

    #[test]
    fn replay_plan_keeps_the_first_steps_in_order() {
        let mut p = Plans::new(2);
        for step in 0..3u32 {
            p.begin_step(1, 1);
            for layer in 0..2 {
                let u = step * 10 + layer as u32;
                p.push_group(layer, &[u], &[u], &[u], &[u]);
            }
        }
        let rp = replay_plan(&p, 2, Paging::Vmm, 1024, 7);
        assert_eq!(rp.groups.len(), 4);
        assert_eq!(
            rp.groups.iter().map(|g| g.keys[0]).collect::<Vec<_>>(),
            vec![0, 1, 10, 11]
        );
        assert_eq!((rp.steps, rp.moe_layers, rp.hidden), (2, 2, 1024));
        assert_eq!(rp.paging, ReplayPaging::Vmm);
        assert_eq!(rp.nonexpert_bytes_per_layer, 7);
    }
}
