//! `sim validate --cpu-experts MODE --hw-host FILE`: the CPU lane of a trace run for real on
//! this machine's CPU against its prediction (`sim::validation::cpu_lane`). No GPU: the CUDA
//! driver is never loaded.

use super::ValidateArgs;
use crate::cmd::args_input::emit;
use anyhow::{bail, Context, Result};
use kernels::geometry::ExpertGeometry;
use sim::cache::Schedule;
use sim::engine::cpu::CpuExperts;
use sim::host_cost::HostCostModel;
use sim::validation::cpu_lane::*;
use traces::DType;
use validate::host::expert_kernel::Format;
use validate::host::lane_replay::{LaneBank, LaneCall, LANE_BANK_BYTES};

/// What the command line does to one `--cpu-experts` value of the CPU-lane validation: clap
/// parses it with [`CpuExperts::parse`], then [`setup`] keeps it when [`fixed_cpu_mode`] does.
#[cfg(test)]
fn parse_cpu_mode(s: &str) -> Result<CpuExperts, String> {
    CpuExperts::parse(s)
        .ok()
        .and_then(fixed_cpu_mode)
        .ok_or_else(|| refused_mode(s))
}

/// The placements that put a fixed set of layers on the CPU: `all` or `layers:N`.
fn fixed_cpu_mode(m: CpuExperts) -> Option<CpuExperts> {
    matches!(m, CpuExperts::All | CpuExperts::Layers(_)).then_some(m)
}

/// Why a `--cpu-experts` value has nothing for the CPU-lane validation to replay.
fn refused_mode(s: &str) -> String {
    format!(
        "--cpu-experts `{s}`: the CPU-lane validation takes `all` or `layers:N` (N >= 1 \
         MoE layers on the CPU), comma-separated; `none`, `misses` and `cheaper` put no \
         fixed work on the CPU to replay"
    )
}

/// Refuse the flags of the GPU validation that the CPU-lane replay cannot follow.
fn refuse_gpu_flags(args: &ValidateArgs) -> Result<()> {
    if !args.policy.is_empty() || args.blocks.is_some() || args.breakdown || args.warm_up.is_some()
    {
        bail!("--policy, --blocks, --breakdown and --warm-up with --cpu-experts need --hw (the composed validation, GPU and CPU together); without --hw only the CPU lane is replayed: leave them out");
    }
    let c = &args.cache;
    if c.evict.is_some() || c.budget.is_some() || c.split.is_some() || c.queue.is_some() {
        bail!("--cpu-experts all|layers:N puts a fixed set of layers on the CPU and pages nothing: drop --evict, --budget, --split and --queue");
    }
    if c.schedule == Schedule::RouteAware {
        bail!("--cpu-experts: the CPU-lane validation forms fifo batches only; drop --schedule route-aware");
    }
    if args.input.expert_mib.is_some() {
        bail!("--expert-mib: the CPU-lane validation runs the real kernels on the trace header's geometry; give --dtype int4, bf16 or fp16 instead");
    }
    c.to_cache_args().map(|_| ())
}

/// The kernel format and geometry of `dtype` experts of the trace header's sizes (int4
/// groups of 128, as [`DType::Int4`] prices them; bf16 and fp16 on the bf16 kernel).
pub(super) fn kernel_geometry(
    model: &traces::ModelSpec,
    dtype: DType,
) -> Result<(Format, ExpertGeometry)> {
    let (Some(h), Some(f)) = (model.hidden_size, model.expert_ffn) else {
        bail!("the trace header of '{}' records no hidden size or expert FFN size: the CPU-lane replay's kernels need both (re-import the trace with the model geometry)", model.name);
    };
    let (format, group) = match dtype {
        DType::Int4 => (Format::Int4, 128),
        DType::Bf16 | DType::Fp16 => (Format::Bf16, 32),
        other => bail!("--dtype {other:?}: the host kernels (and the host calibration) cover int4, bf16 and fp16 only"),
    };
    let geom = ExpertGeometry::new(h as usize, f as usize, group).with_context(|| {
        format!("--dtype: the header geometry hidden {h}, expert FFN {f} does not split into groups of {group}")
    })?;
    Ok((format, geom))
}

/// Everything the replay and the prediction need, checked.
struct Setup {
    modes: Vec<CpuExperts>,
    /// MoE layers on the CPU per mode.
    cpu_layers: Vec<usize>,
    host: profile::Profile,
    host_arg: String,
    workload: sim::runner::Workload,
    dtype: DType,
    format: Format,
    geom: ExpertGeometry,
    /// Expert bytes as the engine sizes them.
    expert_bytes: u64,
    batch: usize,
}

/// Check every argument (before any weight is allocated).
fn setup(args: &ValidateArgs) -> Result<Setup> {
    refuse_gpu_flags(args)?;
    let modes: Vec<CpuExperts> = args
        .timing
        .cpu_experts
        .iter()
        .map(|&m| fixed_cpu_mode(m).ok_or_else(|| refused_mode(&m.to_string())))
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    let Some(host_arg) = args.timing.hw_host.clone() else {
        bail!("--cpu-experts needs --hw-host NAME|FILE: the host profile that prices the CPU calls (dev-box-host, h200-host, h100-linux-host, or a file from `sim calibrate --only host`)");
    };
    let host = profile::load(&host_arg).with_context(|| format!("--hw-host {host_arg}"))?;
    let workload = args.input.workload()?;
    let model = &workload.trace.trace.header.model;
    let dtype = args.input.dtype.unwrap_or(DType::Bf16);
    let (format, geom) = kernel_geometry(model, dtype)?;
    let block = format.expert_bytes(&geom);
    if block.saturating_mul(2) > LANE_BANK_BYTES {
        bail!("the trace header's expert geometry (hidden {}, FFN {}) makes {block} B experts: the CPU-lane replay holds at most {LANE_BANK_BYTES} B of weights and cycles at least 2 experts; use a trace of a smaller model", geom.hidden, geom.ffn);
    }
    let expert_bytes =
        policies::mechanisms::Sizes::resolve(model, &args.input.sizes())?.expert_bytes;
    let moe = workload.trace.trace.keyspace().num_moe_layers();
    let cpu_layers = modes
        .iter()
        .map(|m| match *m {
            CpuExperts::Layers(n) if n as usize > moe => bail!(
                "--cpu-experts layers:{n}: the trace's model has {moe} MoE layers; give N <= {moe}"
            ),
            m => Ok(m.cpu_layers(moe)),
        })
        .collect::<Result<_>>()?;
    let batch = args.cache.batch.unwrap_or(1);
    if batch == 0 || args.steps == Some(0) {
        bail!("--batch and --steps must be >= 1");
    }
    Ok(Setup {
        modes,
        cpu_layers,
        host,
        host_arg,
        workload,
        dtype,
        format,
        geom,
        expert_bytes,
        batch,
    })
}

/// Run the CPU-lane validation and print or write its table or JSON.
pub fn run(args: &ValidateArgs) -> Result<()> {
    let v = validation(args)?;
    let text = if args.json {
        serde_json::to_string_pretty(&serde_json::json!({ "cpu_lane_validation": v }))? + "\n"
    } else {
        cpu_lane_table(&v)
    };
    emit(args.out.as_deref(), &text)
}

/// Predict every mode's steps, replay them on the CPU, and build the rows.
fn validation(args: &ValidateArgs) -> Result<CpuLaneValidation> {
    let s = setup(args)?;
    let trace = &s.workload.trace.trace;
    let ks = trace.keyspace();
    let steps: Vec<Vec<CpuStep>> = s
        .cpu_layers
        .iter()
        .map(|&n| cpu_steps(trace, args.input.phase, n, s.batch, args.steps))
        .collect();
    if steps.first().is_none_or(|st| st.is_empty()) {
        bail!("--phase: the trace has no tokens in the chosen phase");
    }
    let cost = HostCostModel::new(&s.host);
    let predicted: Vec<Vec<f64>> = steps
        .iter()
        .map(|st| predict_steps(&cost, s.dtype, s.expert_bytes, st))
        .collect::<Result<_, _>>()
        .with_context(|| format!("--hw-host {}", s.host_arg))?;
    // one bank for every mode: the experts of the most CPU layers
    let resident = ks.offsets[*s.cpu_layers.iter().max().expect("one mode at least")] as usize;
    let seed = args.cache.seed;
    let mut bank = LaneBank::new(s.geom, s.format, resident, LANE_BANK_BYTES, s.batch, seed);
    let threads = super::cpu_threads(args);
    let pool = validate::host::pool(threads);
    let plans: Vec<Vec<Vec<LaneCall>>> = steps.iter().map(|st| lane_plan(&ks, st)).collect();
    let mut probe = probe_bank(s.format, seed.wrapping_add(1))?;
    let probe_bytes = probe.block_bytes() as u64;
    let probe_us = cost
        .expert_call_us(s.dtype, probe_bytes, 1)
        .with_context(|| format!("--hw-host {}", s.host_arg))?;
    let r = replay(&mut bank, &mut probe, &plans, &pool, args.repeat);
    let weights = (bank.distinct, bank.bank_bytes() as u64);
    let rows = (0..s.modes.len())
        .map(|i| {
            let calls = plans[i].iter().map(Vec::len).sum::<usize>() as f64;
            CpuLaneRow::new(
                &s.modes[i].to_string(),
                s.cpu_layers[i],
                calls / plans[i].len() as f64,
                weights,
                predicted[i].clone(),
                r.steps[i].clone(),
                r.positions[i].clone(),
            )
            .with_probe(probe_bytes, probe_us, r.probes[i].clone())
        })
        .collect();
    Ok(CpuLaneValidation {
        trace: s.workload.trace.label.clone(),
        model: trace.header.model.name.clone(),
        host_profile: s.host.name.clone(),
        dtype: format!("{:?}", s.dtype).to_lowercase(),
        expert_bytes: s.expert_bytes,
        kernel_expert_bytes: bank.block_bytes() as u64,
        threads,
        batch: s.batch,
        steps: plans[0].len(),
        repetitions: args.repeat,
        scope: "CPU lane only: the GPU part of a step (attention, GPU-resident experts, the \
                activations' PCIe copies) is neither run nor priced"
            .into(),
        rows,
    })
}

/// The replay's calls of `steps`: each (layer, expert) as its index among the keys.
fn lane_plan(ks: &traces::KeySpace, steps: &[CpuStep]) -> Vec<Vec<LaneCall>> {
    steps
        .iter()
        .map(|s| {
            s.calls
                .iter()
                .map(|c| LaneCall {
                    expert: ks.key(c.layer as usize, c.expert),
                    tokens: c.tokens,
                })
                .collect()
        })
        .collect()
}

/// The probe: a bank of the host calibration's middle expert geometry and expert bank size
/// (`validate::host::Sizes::full`), cycled call by call as the calibration cycles it.
fn probe_bank(format: Format, seed: u64) -> Result<LaneBank> {
    let full = validate::host::Sizes::full();
    let (h, f, g) = full.geometries[full.geometries.len() / 2];
    let geom = ExpertGeometry::new(h, f, g).context("the calibration's geometry")?;
    Ok(LaneBank::new(
        geom,
        format,
        usize::MAX,
        full.bank_bytes,
        1,
        seed,
    ))
}

/// Measured µs of each mode's passes and probes.
struct Replayed {
    /// `[mode][repetition][step]`.
    steps: Vec<Vec<Vec<f64>>>,
    /// `[mode][repetition]`: the mean of the pass's probe calls (a step is a sum of calls:
    /// it pays their mean, slow calls included).
    probes: Vec<Vec<f64>>,
    /// `[mode][repetition]`: the mode's place in the repetition.
    positions: Vec<Vec<u32>>,
}

/// `repetitions` passes over every mode's steps, the modes' order rotated by one per
/// repetition, each pass after one untimed step; one probe call (timed apart) before every
/// step samples the machine's state over the whole pass.
fn replay(
    bank: &mut LaneBank,
    probe: &mut LaneBank,
    plans: &[Vec<Vec<LaneCall>>],
    pool: &rayon::ThreadPool,
    repetitions: u32,
) -> Replayed {
    let n = plans.len();
    let mut r = Replayed {
        steps: vec![Vec::new(); n],
        probes: vec![Vec::new(); n],
        positions: vec![Vec::new(); n],
    };
    let one = [LaneCall {
        expert: 0,
        tokens: 1,
    }];
    for rep in 0..repetitions as usize {
        for pos in 0..n {
            let m = (pos + rep) % n;
            bank.time_step(&plans[m][0], pool);
            let mut calls = Vec::with_capacity(plans[m].len());
            let pass = plans[m]
                .iter()
                .map(|s| {
                    calls.push(probe.time_step(&one, pool));
                    bank.time_step(s, pool)
                })
                .collect();
            r.steps[m].push(pass);
            r.probes[m].push(calls.iter().sum::<f64>() / calls.len() as f64);
            r.positions[m].push(pos as u32);
        }
        eprintln!(
            "validate: CPU lane, repetition {}/{repetitions} done",
            rep + 1
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use traces::{Header, ModelSpec, Provenance, SequenceData, SequenceInfo, TokenBlock, Trace};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: ValidateArgs,
    }

    const HOST: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profile/profiles/dev-box-host.json"
    );

    /// 2 MoE layers of 4 experts, top-2, hidden 128, expert FFN 128; 3 decode tokens.
    fn tiny_trace(dir: &std::path::Path) -> String {
        let mut model = ModelSpec::uniform("tiny", 2, 4, 2);
        model.hidden_size = Some(128);
        model.expert_ffn = Some(128);
        let trace = Trace {
            header: Header {
                model,
                provenance: Provenance::default(),
                sequences: vec![SequenceInfo {
                    name: "s".into(),
                    prefill_tokens: 0,
                    decode_tokens: 3,
                }],
                has_weights: false,
                passes: None,
            },
            sequences: vec![SequenceData {
                prefill: TokenBlock::default(),
                decode: TokenBlock {
                    ids: vec![0, 1, 2, 3, 1, 2, 0, 3, 3, 0, 1, 2],
                    weights: None,
                },
            }],
        };
        let path = dir.join("tiny.trace");
        traces::write_file(&path, &trace).unwrap();
        path.to_str().unwrap().to_string()
    }

    fn args(extra: &[&str]) -> Result<ValidateArgs, clap::Error> {
        let mut v = vec!["validate"];
        v.extend_from_slice(extra);
        Cli::try_parse_from(v).map(|c| c.a)
    }

    #[test]
    fn modes_parse_or_are_refused_with_the_accepted_forms() {
        assert_eq!(parse_cpu_mode("all").unwrap(), CpuExperts::All);
        assert_eq!(parse_cpu_mode("layers:8").unwrap(), CpuExperts::Layers(8));
        for bad in ["layers:0", "layers:", "layers:x", "misses", "none", "ALL"] {
            let e = parse_cpu_mode(bad).unwrap_err();
            assert!(e.contains("`all` or `layers:N`"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_table_and_json_of_a_tiny_trace_have_sane_fields() {
        let dir = tempfile::tempdir().unwrap();
        let trace = tiny_trace(dir.path());
        let out = dir.path().join("v.json");
        let a = args(&[
            "--cpu-experts",
            "all,layers:1",
            "--hw-host",
            HOST,
            "--trace",
            &trace,
            "--dtype",
            "int4",
            "--repeat",
            "2",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ])
        .unwrap();
        run(&a).unwrap();
        let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let v: CpuLaneValidation =
            serde_json::from_value(j["cpu_lane_validation"].clone()).unwrap();
        assert_eq!(
            (v.steps, v.repetitions, v.batch, v.rows.len()),
            (3, 2, 1, 2)
        );
        // 3 x 128 x 128 int4 parameters: 49,152 x 66 / 128 bytes in the model, priced on
        // 49,152 x 68 / 128 = 26,112 in the kernel's layout
        assert_eq!(v.expert_bytes, 25_344);
        let host = profile::load(HOST).unwrap();
        let bw = host
            .get(profile::ConstantName::HostExpertInt4Bandwidth)
            .unwrap();
        let oh = host
            .get(profile::ConstantName::HostExpertInt4CallOverhead)
            .unwrap_or(0.0);
        for (row, (layers, calls)) in v.rows.iter().zip([(2, 4.0), (1, 2.0)]) {
            assert_eq!((row.cpu_layers, row.calls_per_step), (layers, calls));
            for &p in &row.predicted_us {
                assert!((p - calls * (oh + 26_112.0 / bw)).abs() < 1e-9, "{p}");
            }
            assert_eq!(row.measured_us.len(), 2);
            assert!(row
                .measured_us
                .iter()
                .flatten()
                .all(|&m| m.is_finite() && m > 0.0));
            assert!(row.p10_error_pct <= row.median_error_pct);
            assert!(row.median_error_pct <= row.p90_error_pct);
            assert!(row.distinct_weights && row.repetition_spread >= 0.0);
        }
        // the modes' order rotates: all first, then layers:1 first
        assert_eq!(v.rows[0].positions, vec![0, 1]);
        assert_eq!(v.rows[1].positions, vec![1, 0]);
        let t = cpu_lane_table(&v);
        assert!(
            t.contains("median err") && t.contains("layers:1") && t.contains("CPU lane only"),
            "{t}"
        );
    }

    #[test]
    fn bad_settings_name_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let trace = tiny_trace(dir.path());
        let err = |extra: &[&str]| {
            let mut v = vec!["--trace", trace.as_str()];
            v.extend_from_slice(extra);
            format!("{:#}", validation(&args(&v).unwrap()).unwrap_err())
        };
        let e = err(&[
            "--cpu-experts",
            "layers:3",
            "--hw-host",
            HOST,
            "--dtype",
            "int4",
        ]);
        assert!(e.contains("layers:3") && e.contains("N <= 2"), "{e}");
        let e = err(&["--cpu-experts", "all", "--dtype", "int4"]);
        assert!(e.contains("--hw-host"), "{e}");
        let e = err(&["--cpu-experts", "all", "--hw-host", HOST, "--dtype", "fp8"]);
        assert!(e.contains("--dtype"), "{e}");
        let e = err(&["--cpu-experts", "all", "--hw-host", HOST, "--budget", "50%"]);
        assert!(e.contains("--budget"), "{e}");
        // the shipped dev-box profile has no bf16 batch arm: a batch of 3 on bf16 is refused
        let e = err(&["--cpu-experts", "all", "--hw-host", HOST, "--batch", "3"]);
        assert!(e.contains("batch arm") && e.contains("--hw-host"), "{e}");
        // GPU flags without --hw: the composed validation needs it
        let e = err(&["--cpu-experts", "all", "--hw-host", HOST, "--policy", "e1"]);
        assert!(e.contains("need --hw") && e.contains("--policy"), "{e}");
    }
}
