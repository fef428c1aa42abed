//! `sim plan`: the fastest expert budget that fits for each mechanism and retention policy,
//! ranked by tokens/s (the search is `sim::plan`).

use super::args_input::{emit, InputArgs};
use super::args_timing::TimingArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use policies::PolicyKind;
use sim::cache::{Batching, CacheConfig, RetentionConfig, Semantics, Split};
use sim::plan::{plan, Plan, PlanRow, PlanSpec};
use sim::runner::{RunConfig, TraceInput, Workload};
use std::path::PathBuf;
use traces::gen::GenParams;

/// The mechanisms planned when `--policies` is not given: one expert per commit and two
/// packings, the per-layer mechanisms every model supports.
const DEFAULT_MECHANISMS: &str = "e1,e2,e4";

/// Decode tokens per sequence of a `--preset` trace when `--preset-tokens` is not given: the
/// length of the bundled granite traces' sequences (64 new tokens per prompt, see their
/// provenance), enough for every policy to reach its steady state on a trace this short.
const DEFAULT_PRESET_TOKENS: u64 = 64;

/// The admission cap when `--admission-cap` is not given: all of the profile's usable VRAM
/// (the profile's usable figure already leaves out what the driver and display reserve).
const DEFAULT_ADMISSION_CAP: f64 = 1.0;

/// Arguments of `sim plan`.
#[derive(Args)]
#[command(
    after_help = "Without --admission-cap, sim plan caps mapped memory at 1.0 of the \
profile's usable VRAM (all of it: the profile's usable figure already leaves out what the driver \
and display reserve); give --admission-cap 0.9 to keep a tenth back."
)]
pub struct PlanArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Comma-separated mechanism specs to plan (same forms as `sim run --policy`).
    #[arg(long, value_delimiter = ',', value_name = "SPECS", default_value = DEFAULT_MECHANISMS)]
    pub policies: Vec<String>,

    /// Comma-separated retention policies to plan, or `all` (default: all).
    #[arg(long, value_delimiter = ',', value_name = "POLICY", default_value = "all",
          help = format!("Retention policies to plan: {}", super::args_cache::policy_values()))]
    pub evict: Vec<String>,

    /// Plan a model from its geometry preset (see `sim trace gen --list-presets`), e.g.
    /// qwen3-30b-a3b, on a trace generated for it: --preset-tokens decode tokens per
    /// sequence, one sequence per batch slot, skew and locality fitted to the bundled
    /// granite prose trace (a recorded one: see `sim trace gen --fit-to`). Conflicts with
    /// --trace; give --trace with a trace of the model itself for its real routing.
    #[arg(long, value_name = "NAME", conflicts_with = "trace")]
    pub preset: Option<String>,

    /// Decode tokens per sequence of the --preset trace (or of the trace generated for
    /// --model-config without --trace).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PRESET_TOKENS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub preset_tokens: u64,

    /// Tokens of context each sequence already holds in its KV cache (a prompt of N tokens),
    /// before the trace's own tokens. It costs memory and time: batch x N x KV bytes per
    /// token (--kv-bytes-per-token, else the model's attention geometry) is reserved in VRAM
    /// beside the non-expert weights, and every decode step's attention reads it at the
    /// profile's device read bandwidth, as it reads the trace's own tokens of KV.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub context: u64,

    /// Sequences decoding together; each holds its own KV cache.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,

    /// Seed of randomised policies and of the oversubscription jitter.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Print the command line that realises the recommendation in this engine, where it can
    /// express it, or the closest setting it can express, said to be that: llama.cpp (-ngl,
    /// --cpu-moe, --n-cpu-moe, -c, --no-mmap), ktransformers (SGLang with kt-kernel:
    /// --kt-num-gpu-experts per layer), vllm and sglang (--cpu-offload-gb). None of them has
    /// an expert cache: a plan that pages experts is never exact.
    #[arg(long, value_name = "ENGINE",
          value_parser = clap::builder::PossibleValuesParser::new(sim::plan_engine::ENGINES))]
    pub engine: Option<String>,

    /// The host's memory, GiB: check that the experts the recommendation holds in host
    /// memory (the whole bank when it pages experts, else those off the GPU) plus 4 GiB for
    /// the operating system fit, and fail with the numbers when they do not.
    #[arg(long, value_name = "GIB", value_parser = positive_gib)]
    pub host_ram: Option<f64>,

    /// Print the plan as one JSON object instead of the recommendation and the table: `rows`
    /// ranked, `recommended` the index into `rows` of the recommended configuration, and
    /// `recommended_row` that row itself (mechanism, evict, placement, fit, ...); both are
    /// null when nothing fits.
    #[arg(long)]
    pub json: bool,

    /// Write the output to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Add, for the recommended configuration at its budget, "policy or working set?": its
    /// page-ins, Belady/MIN's (exact curve) and the budget the policy needs to match them, as
    /// `sim run --vs-belady` (a `vs_belady` key in --json). Untimed cache-regime counts over
    /// the plan's workload; with --cpu-experts the block is left out.
    #[arg(long)]
    pub vs_belady: bool,

    /// A 90% interval on the tokens/s of the best two answers (each run again under N
    /// profiles drawn within the constants' measured spread, seed 0), and whether they
    /// overlap (`intervals` in --json; docs/DESIGN.md, "Intervals on a run"). 0: none.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub intervals: u32,

    #[command(flatten)]
    pub timing: TimingArgs,
}

fn policies_of(names: &[String]) -> Result<Vec<PolicyKind>> {
    let mut out = Vec::new();
    for n in names {
        let kinds: Vec<PolicyKind> = if n.trim().eq_ignore_ascii_case("all") {
            PolicyKind::evict_all().collect()
        } else {
            vec![PolicyKind::parse(n).map_err(|m| anyhow::anyhow!("--evict: {m}"))?]
        };
        for k in kinds {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    Ok(out)
}

pub fn run(mut args: PlanArgs) -> Result<()> {
    if args.timing.hw.is_none() {
        bail!("`sim plan` prices tokens/s and memory on a GPU: give --hw rtx4060-laptop-wddm (or another, see `sim profile list`)");
    }
    args.timing.refuse_timeline("plan")?;
    if args.timing.predictor.len() > 1 || args.timing.window.len() > 1 {
        bail!("--predictor and --window take one value in `sim plan` (it plans placements, mechanisms and policies); give lists to `sim sweep` or `sim compare`");
    }
    args.timing.admission_cap = args.timing.admission_cap.or(Some(DEFAULT_ADMISSION_CAP));
    let mechanisms = sim::grid::canonical_specs(&args.policies)
        .map_err(|e| super::errors::grid_error(e, "--policies"))?;
    let batch = usize::try_from(args.batch).context("--batch")?;
    let spec = PlanSpec {
        base: RunConfig {
            phase: args.input.phase,
            sizes: args.input.sizes(),
            timing: args.timing.for_grid(args.seed)?,
            ..RunConfig::default()
        },
        retention: RetentionConfig {
            cache: CacheConfig {
                policy: PolicyKind::Lru,
                budget: policies::Budget::Units(1),
                split: Split::Global,
                semantics: Semantics::Group,
                dram: None,
                seed: args.seed,
            },
            batching: Batching {
                batch,
                ..Batching::default()
            },
            target: None,
        },
        mechanisms,
        policies: policies_of(&args.evict)?,
        placements: args.timing.cpu_experts.clone(),
        context_tokens: args.context,
    };
    let config = args.timing.model_config()?;
    let generated = |model: &traces::ModelSpec, label: &str| {
        generated_workload(model, label, args.preset_tokens, args.batch, args.seed)
    };
    let workload = match (&args.preset, &config) {
        (Some(name), _) => {
            let p = traces::presets::preset(name).with_context(|| {
                format!(
                    "--preset {name:?}: unknown; the presets are: {}",
                    traces::presets::preset_names()
                )
            })?;
            generated(&p.model_spec(), p.name)?
        }
        (None, Some(c)) if args.input.trace.is_empty() => generated(&c.spec, &c.spec.name)?,
        (None, _) => args.input.workload()?,
    };
    let p = plan(&spec, &workload)?;
    let intervals = (args.intervals > 0)
        .then(|| sim::plan_interval::plan_intervals(&spec, &p, &workload, args.intervals))
        .transpose()?;
    let engine = args
        .engine
        .as_deref()
        .map(|e| sim::plan_engine::realise(e, &p, &workload.trace.trace.header.model));
    let host = args.host_ram.and_then(|g| sim::plan_host::check(&p, g));
    let vs_belady = match args.vs_belady {
        true => vs_belady(&spec, &p, &workload)?,
        false => None,
    };
    let text = if args.json {
        let json = PlanJson {
            engine: engine.as_ref(),
            host_ram: host.as_ref(),
            vs_belady: vs_belady.as_ref(),
            intervals: intervals.as_ref(),
            ..PlanJson::of(&p)
        };
        serde_json::to_string_pretty(&json)? + "\n"
    } else {
        let mut out = p.recommendation() + "\n";
        if let Some(i) = &intervals {
            out.push_str(&i.text());
        }
        let host_line = host.as_ref().map(|h| h.text()).unwrap_or_default();
        for part in [p.why(), p.curve(), p.memory(), host_line] {
            if !part.is_empty() {
                out.push_str(&part);
                out.push('\n');
            }
        }
        if let Some(v) = &vs_belady {
            out.push_str(&reports::text::run::vs_belady_summary(v));
        }
        let realised = engine
            .as_ref()
            .map(|r| format!("\n{}\n", r.text()))
            .unwrap_or_default();
        out + "\n" + &p.table() + &realised
    };
    emit(args.out.as_deref(), &text)?;
    // The table says why each configuration does not fit; a script needs the failure too.
    if p.recommended.is_none() {
        bail!("nothing fits on `{}` at batch {}: lower --nonexpert-mib, --context or --batch, raise --admission-cap, or plan for a GPU with more VRAM", p.hw, p.batch);
    }
    if let Some(h) = host.filter(|h| !h.fits) {
        bail!(
            "--host-ram {}: the recommendation holds {:.1} GiB of experts in host memory, which with {:.1} GiB for the OS needs {:.1} GiB",
            h.ram_gib,
            h.experts_gib,
            h.os_reserve_gib,
            h.experts_gib + h.os_reserve_gib
        );
    }
    Ok(())
}

/// `--host-ram`: a positive, finite number of GiB.
fn positive_gib(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(g) if g.is_finite() && g > 0.0 => Ok(g),
        _ => Err(format!(
            "{s:?} is not a memory size: give the host's RAM in GiB, e.g. 32"
        )),
    }
}

/// `sim plan --json`: the plan's own fields (`recommended` stays the index into `rows` that
/// earlier readers use), then the recommended row itself, so a reader need not index.
#[derive(serde::Serialize)]
struct PlanJson<'a> {
    #[serde(flatten)]
    plan: &'a Plan,
    /// `rows[recommended]`; null when nothing fits.
    recommended_row: Option<&'a PlanRow>,
    /// The recommendation in `--engine`'s flags; absent without `--engine`.
    #[serde(skip_serializing_if = "Option::is_none")]
    engine: Option<&'a sim::plan_engine::Realisation>,
    /// The recommendation's host memory against `--host-ram`; absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    host_ram: Option<&'a sim::plan_host::HostRam>,
    /// "Policy or working set?" at the recommendation; absent without `--vs-belady`.
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_belady: Option<&'a reports::run::VsBelady>,
    /// The best two answers' intervals; absent without `--intervals`.
    #[serde(skip_serializing_if = "Option::is_none")]
    intervals: Option<&'a sim::plan_interval::PlanIntervals>,
}

impl<'a> PlanJson<'a> {
    fn of(plan: &'a Plan) -> Self {
        PlanJson {
            plan,
            recommended_row: plan.recommended.map(|i| &plan.rows[i]),
            engine: None,
            host_ram: None,
            vs_belady: None,
            intervals: None,
        }
    }
}

/// The `vs_belady` block of the plan's recommendation at its budget: `None` when nothing is
/// recommended or its experts are placed on the CPU (the cache then holds another bank).
fn vs_belady(spec: &PlanSpec, p: &Plan, w: &Workload) -> Result<Option<reports::run::VsBelady>> {
    let Some(row) = p.recommended.map(|i| &p.rows[i]) else {
        return Ok(None);
    };
    let (Some(fit), None) = (&row.fit, &row.placement) else {
        return Ok(None);
    };
    let policy = PolicyKind::parse(&row.evict).map_err(anyhow::Error::msg)?;
    let probe = RunConfig {
        policy: row.mechanism.clone(),
        retention: None,
        timing: None,
        ..spec.base.clone()
    };
    let (map, _) = sim::runner::build_units(&probe, w)?;
    let cw = sim::cache::Workload::build(
        &w.trace.trace,
        &map,
        spec.base.phase,
        spec.retention.batching,
        w.profile.as_ref().map(|t| &t.trace),
    )?;
    let c = &spec.retention.cache;
    Ok(Some(sim::curve::vs_belady::of_workload_at(
        &cw,
        &map,
        policy,
        fit.budget_units,
        c.semantics,
        c.seed,
    )?))
}

/// A trace of `model` (named `label`): `sequences` sequences of `tokens` decode tokens with
/// the mean skew and locality fitted to the embedded granite prose trace
/// (`traces::gen::fit`), seeded by `seed`.
fn generated_workload(
    model: &traces::ModelSpec,
    label: &str,
    tokens: u64,
    sequences: u64,
    seed: u64,
) -> Result<Workload> {
    let prose = TraceInput::load(None)?;
    let stats = traces::stats::trace_stats(&prose.trace, traces::PhaseSel::Decode)
        .context("statistics of the embedded prose trace")?;
    let fits = traces::gen::fit::fit(&stats, &traces::gen::fit::FitOptions::default());
    let mean = |f: fn(&traces::gen::fit::LayerFit) -> f64| {
        fits.iter().map(f).sum::<f64>() / fits.len().max(1) as f64
    };
    let params = GenParams {
        preset: traces::presets::preset_of_model(model).map(|p| p.name.to_string()),
        skew: vec![mean(|f| f.skew)],
        locality: vec![mean(|f| f.locality)],
        cross_layer: 0.0,
        sequences,
        tokens,
        seed,
        fitted_to: Some(prose.label.clone()),
        always_on: Vec::new(),
        archetypes: None,
    };
    let trace = traces::gen::generate_trace(model, &params)
        .map_err(|e| anyhow::anyhow!("generating a trace of {label}: {e}"))?;
    Workload::new(
        TraceInput {
            label: format!("generated:{label}"),
            trace,
        },
        None,
    )
}
