//! `sim validate --hw GPU --hw-host HOST --cpu-experts layers:N,misses --policy SPEC`: the
//! composed validation. Each placement is one row: the engine prices the policy's plans with
//! its CPU lane (`sim::validation::predict` with a placement), and the GPU replay runs the
//! same groups with the engine's CPU keys run on this machine's CPU beside the GPU part
//! (`validate::replay_composed`). The rows then go through the GPU validation's analysis.

use super::ValidateArgs;
use anyhow::{bail, Result};
use sim::engine::cpu::CpuExperts;
use sim::validation::{Composed, Prediction, PredictionSetup, WarmUpChoice};
use traces::DType;
use validate::replay_cpu::CpuLaneSpec;

/// What the replay does differently from the engine (the `composed` block's `differences`).
pub const DIFFERENCES: &str = "misses: the engine's driver and copy engine run the \
    off-critical-path page-ins from the router, beside the launches; the replay's one host \
    thread commits them after the group's expert launches, so a later group's launches wait \
    for those calls on the host, and its GPU keys wait (on the GPU) for the copies of the \
    units they read. Activations cross PCIe on the compute stream (device to host after the \
    router, host to device before the next group's kernels); the engine prices both ways \
    with the H2D constants. One token per step: each CPU call is one token";

/// Whether `args` ask for the composed validation: `--cpu-experts` with `--hw`.
pub fn is_composed(args: &ValidateArgs) -> bool {
    !args.timing.cpu_experts.is_empty() && args.timing.hw.is_some()
}

/// Why a placement is not replayed composed, or `None` when it is.
fn refusal(m: CpuExperts) -> Option<String> {
    match m {
        CpuExperts::Layers(_) | CpuExperts::Misses => None,
        CpuExperts::All => Some("`all` leaves no expert on the GPU, so nothing of the GPU lane runs beside it: validate it without --hw (the CPU-lane validation)".into()),
        CpuExperts::Cheaper => Some("`cheaper` decides each page-in against the CPU from the engine's queues at each router, decisions the replay would have to take from the real queues; it is not replayed".into()),
        CpuExperts::None => Some("`none` runs nothing on the CPU: validate it with --policy alone".into()),
    }
}

/// The placements of a composed validation, after refusing what it cannot replay, and the
/// dtype pricing the calls. Errors name the flag: not one `--policy`, a placement other than
/// `layers:N` or `misses`, `--batch` above 1, or no `--dtype` the host kernels run.
pub fn checked(args: &ValidateArgs) -> Result<(Vec<CpuExperts>, DType)> {
    if args.policy.len() != 1 {
        bail!("--cpu-experts with --hw validates one mechanism under each placement: give one --policy (this run has {})", args.policy.len());
    }
    for &m in &args.timing.cpu_experts {
        if let Some(why) = refusal(m) {
            bail!("--cpu-experts {m}: the composed validation replays layers:N and misses; {why}");
        }
    }
    if args.cache.batch.is_some_and(|b| b > 1) {
        bail!("--batch: the composed validation replays one token per step (the GPU replay's kernels run one slot per key, each CPU call one token); leave --batch out");
    }
    let dtype = match args.input.dtype {
        Some(d @ (DType::Int4 | DType::Bf16 | DType::Fp16)) => d,
        _ => bail!("--cpu-experts with --hw needs --dtype int4, bf16 or fp16: the host kernels run the trace header's geometry in that format, and the engine prices the CPU calls by it"),
    };
    Ok((args.timing.cpu_experts.clone(), dtype))
}

/// One row per placement: `policy` predicted with the placement's CPU lane, labelled
/// `SPEC cpu=PLACEMENT`, with what the host CPU runs its calls with.
pub fn predictions(
    args: &ValidateArgs,
    setup: &PredictionSetup,
    choice: impl Fn(usize) -> WarmUpChoice,
) -> Result<Vec<Prediction>> {
    let (modes, dtype) = checked(args)?;
    let model = &setup.workload.trace.trace.header.model;
    let (format, geom) = super::cpu::kernel_geometry(model, dtype)?;
    let ks = setup.workload.trace.trace.keyspace();
    modes
        .iter()
        .enumerate()
        .map(|(i, &m)| {
            let s = PredictionSetup {
                cpu: Some((m, dtype)),
                ..*setup
            };
            let mut pp = sim::validation::predict(&args.policy[0], &s, choice(i))?;
            pp.spec = format!("{} cpu={m}", pp.spec);
            let experts = match m {
                CpuExperts::Layers(n) => ks.offsets[(n as usize).min(ks.num_moe_layers())],
                _ => ks.offsets[ks.num_moe_layers()],
            } as usize;
            pp.lane = Some(CpuLaneSpec {
                geom,
                format,
                experts,
                threads: super::cpu_threads(args),
                poll: args.cpu_poll,
                seed: args.cache.seed,
            });
            Ok(pp)
        })
        .collect()
}

/// The `composed` block of a validation of `predictions` under host profile `host`.
pub fn block(args: &ValidateArgs, host: &str, predictions: &[Prediction]) -> Result<Composed> {
    let (modes, dtype) = checked(args)?;
    let bytes = predictions
        .iter()
        .find_map(|p| p.lane)
        .map_or(0, |l| l.format.expert_bytes(&l.geom) as u64);
    Ok(Composed {
        host_profile: host.to_string(),
        placements: modes.iter().map(ToString::to_string).collect(),
        dtype: format!("{dtype:?}").to_lowercase(),
        cpu_kernel_expert_bytes: bytes,
        differences: DIFFERENCES.into(),
    })
}

/// Per row: the CPU calls per measured step in the plan and in the replay's first
/// repetition, and that repetition's mean CPU-call and join-wait time per step.
pub fn table(v: &sim::validation::Validation, predictions: &[Prediction]) -> String {
    let mut t = String::from(
        "CPU lane (composed)   calls/step plan  replayed  calls ms/step  join wait ms/step\n",
    );
    for (r, pp) in v.rows.iter().zip(predictions) {
        let Some(c) = &r.replay.cpu_lane else {
            continue;
        };
        let steps = c.calls_us.len().max(1) as f64;
        let mean = |x: &[f64]| x.iter().sum::<f64>() / steps / 1e3;
        let planned = validate::replay_cpu::calls_per_step(&pp.plan);
        let planned: u64 = planned[pp.plan.warmup_steps.min(planned.len())..]
            .iter()
            .sum();
        t += &format!(
            "{:<20}  {:>15.2}  {:>8.2}  {:>13.3}  {:>17.3}\n",
            r.policy,
            planned as f64 / steps,
            c.calls as f64 / steps,
            mean(&c.calls_us),
            mean(&c.join_wait_us),
        );
    }
    t
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

    fn args(extra: &[&str]) -> ValidateArgs {
        let mut v = vec!["validate", "--hw", "h200-linux", "--hw-host", "h200-host"];
        v.extend_from_slice(extra);
        Cli::try_parse_from(v).unwrap().a
    }

    fn refused(extra: &[&str]) -> String {
        format!("{:#}", checked(&args(extra)).unwrap_err())
    }

    #[test]
    fn the_composed_validation_takes_layers_and_misses_of_one_policy() {
        let a = args(&[
            "--cpu-experts",
            "layers:8,misses",
            "--policy",
            "e1",
            "--dtype",
            "int4",
        ]);
        assert!(is_composed(&a));
        let (modes, dtype) = checked(&a).unwrap();
        assert_eq!(modes, vec![CpuExperts::Layers(8), CpuExperts::Misses]);
        assert_eq!(dtype, DType::Int4);
        // without --hw it is the CPU-lane validation
        let cpu_only = Cli::try_parse_from(["validate", "--cpu-experts", "all"])
            .unwrap()
            .a;
        assert!(!is_composed(&cpu_only));
    }

    #[test]
    fn what_it_cannot_replay_is_refused_with_the_reason() {
        let e = refused(&[
            "--cpu-experts",
            "cheaper",
            "--policy",
            "e1",
            "--dtype",
            "int4",
        ]);
        assert!(
            e.contains("--cpu-experts cheaper") && e.contains("not replayed"),
            "{e}"
        );
        let e = refused(&["--cpu-experts", "all", "--policy", "e1", "--dtype", "int4"]);
        assert!(
            e.contains("--cpu-experts all") && e.contains("without --hw"),
            "{e}"
        );
        let e = refused(&[
            "--cpu-experts",
            "misses",
            "--policy",
            "e1,e4",
            "--dtype",
            "int4",
        ]);
        assert!(e.contains("give one --policy (this run has 2)"), "{e}");
        let e = refused(&["--cpu-experts", "misses", "--policy", "e1"]);
        assert!(e.contains("needs --dtype int4, bf16 or fp16"), "{e}");
        let e = refused(&[
            "--cpu-experts",
            "misses",
            "--policy",
            "e1",
            "--dtype",
            "int4",
            "--batch",
            "2",
        ]);
        assert!(
            e.contains("--batch") && e.contains("one token per step"),
            "{e}"
        );
    }

    #[test]
    fn a_misses_row_on_the_bundled_trace_has_cpu_calls_and_gpu_hits() {
        // the prediction side of the device run (granite prose, int4, LRU 50%), on the CPU
        let a = args(&[
            "--cpu-experts",
            "layers:8,misses",
            "--policy",
            "e1",
            "--dtype",
            "int4",
            "--evict",
            "lru",
            "--budget",
            "50%",
            "--steps",
            "8",
        ]);
        let (tc, retention) = super::super::checked_config(&a).unwrap();
        let w = a.input.workload().unwrap();
        let setup = PredictionSetup {
            workload: &w,
            phase: a.input.phase,
            sizes: a.input.sizes(),
            retention: retention.as_ref(),
            timing: &tc,
            steps: a.steps,
            seed: 0,
            hidden: 1024,
            cpu: None,
        };
        let preds = predictions(&a, &setup, |_| WarmUpChoice::Auto).unwrap();
        assert_eq!(preds[0].spec, "e1 cpu=layers:8");
        for p in &preds {
            let measured = p
                .plan
                .groups
                .iter()
                .filter(|g| g.step as usize >= p.warm_up.steps);
            let cpu: usize = measured.clone().map(|g| g.cpu_calls.len()).sum();
            let gpu: usize = measured.map(|g| g.keys.len()).sum();
            assert!(
                cpu > 0 && gpu > 0,
                "{}: {cpu} CPU calls, {gpu} GPU keys",
                p.spec
            );
            let lane = p.lane.unwrap();
            assert!(p
                .plan
                .groups
                .iter()
                .flat_map(|g| &g.cpu_calls)
                .all(|c| (c.expert as usize) < lane.experts));
        }
        // layers:8: the CPU layers' 8 x 32 experts are the lane's bank
        assert_eq!(preds[0].lane.unwrap().experts, 8 * 32);
    }
}
