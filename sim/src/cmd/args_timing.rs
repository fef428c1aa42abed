//! Timing options shared by `sim run`, `sim sweep` and `sim compare`: hardware profile,
//! compute model, prefetch predictor, batch memory.

use anyhow::{bail, Context, Result};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::Args;
use sim::cost::OutsideRange;
use sim::engine::cpu::CpuExperts;
use sim::engine::predict::PREDICTORS;
use sim::engine::prefetch::PrefetchIssue;
use sim::engine::{PredictorKind, TimingConfig};
use sim::grid::PrefetchPoint;
use sim::model_profile::{ComputeMode, ComputeOverrides};
use std::path::PathBuf;
use std::sync::Arc;

/// Timing (discrete-event engine) options. With no `--hw` no timing is simulated.
#[derive(Args, Clone, Debug, Default)]
pub struct TimingArgs {
    /// Hardware profile: a shipped name (`sim profile list`: rtx4060-laptop-wddm, h200-linux, h100-linux)
    /// or the path of a profile JSON. Turns on the discrete-event engine and the `timing` block.
    #[arg(long, value_name = "PROFILE", help_heading = "Timing")]
    pub hw: Option<String>,

    /// Host profile combined with --hw: a shipped name (`sim profile list`: dev-box-host, this
    /// project's development CPU; h200-host, the H200 machine's CPU) or the path of a profile
    /// written by `sim calibrate --only host`. Its
    /// host CPU constants (host_expert_*, host_memory_*, host_ssd_*) replace --hw's; a host
    /// constant it lacks is absent, and a run that needs it names it.
    #[arg(long, value_name = "PROFILE", help_heading = "Timing")]
    pub hw_host: Option<String>,

    // Help and values: `CpuExperts::HELP` and its parser.
    #[arg(long, default_value = "none", value_delimiter = ',', value_name = "PLACEMENT",
          help_heading = "Timing", help = CpuExperts::HELP, value_parser = CpuExperts::parse)]
    pub cpu_experts: Vec<CpuExperts>,

    /// Compute model: `geometry` (non-expert and expert FFN weights read once per step at the
    /// profile's device read bandwidth) or `none` (paging only, to compare with paging
    /// benchmarks).
    #[arg(long, default_value = "geometry", help_heading = "Timing",
          value_parser = compute_parser())]
    pub compute: ComputeMode,

    /// Override: non-expert compute per MoE layer per step, in µs (KV read excluded).
    #[arg(
        long,
        value_name = "US",
        help_heading = "Timing",
        allow_negative_numbers = true
    )]
    pub nonexpert_us: Option<f64>,

    /// Override: compute of one selected expert, in µs.
    #[arg(
        long,
        value_name = "US",
        help_heading = "Timing",
        allow_negative_numbers = true
    )]
    pub expert_us: Option<f64>,

    /// Override: non-expert weights resident in VRAM for the whole model, in MiB (default from
    /// the geometry: 4 x hidden^2 attention + router parameters per layer).
    #[arg(
        long,
        value_name = "MIB",
        help_heading = "Timing",
        allow_negative_numbers = true
    )]
    pub nonexpert_mib: Option<f64>,

    /// KV cache bytes per token per sequence, all layers (default: from the preset's attention
    /// geometry when the trace's model is a `sim trace gen` preset, else 2 x hidden x 2 bytes x
    /// layers).
    #[arg(long, value_name = "BYTES", help_heading = "Timing")]
    pub kv_bytes_per_token: Option<u64>,

    /// The model's Hugging Face config.json (families: qwen3_moe, qwen2_moe, mixtral, olmoe,
    /// deepseek_v2, deepseek_v3, kimi_k2; e.g. traces/data/configs/qwen3-30b-a3b.json): every
    /// non-expert weight by part (embeddings, LM head tied or not, attention, norms, routers,
    /// dense MLPs, shared experts) and the KV cache per token come from it instead of the
    /// geometry's estimates. Its layers, experts and top-k must be the trace's.
    #[arg(long, value_name = "FILE", help_heading = "Timing")]
    pub model_config: Option<PathBuf>,

    /// Dtype of the non-expert weights, when it differs from the experts' (--dtype): e.g.
    /// int4 experts with bf16 attention, embeddings and LM head, as GGUF Q4_K_M and AWQ
    /// checkpoints keep them: bf16, fp16, fp8, int4, int4-noscale, nvfp4, mxfp4.
    #[arg(long, value_name = "DTYPE", help_heading = "Timing",
          value_parser = super::args_input::dtype_parser())]
    pub nonexpert_dtype: Option<traces::DType>,

    /// Reuse pooled physical handles: a page-in costs cuMemMap + cuMemSetAccess per granule
    /// (no cuMemCreate), an eviction cuMemUnmap (no cuMemRelease). Needs the per-call constants.
    #[arg(long, help_heading = "Timing")]
    pub handle_pool: bool,

    /// Unmap evicted units off the critical path: the driver runs the decommits when idle,
    /// and the memory stays mapped until then, or until a page-in would map past 90% of
    /// usable VRAM (the oldest queued decommits then run first). Helps when the driver has
    /// idle time; in a paging-bound run it never has, so the mapped memory and with it every
    /// VMM call's price grow, and the run is slower. Wasted prefetches are unmapped this way
    /// with or without the flag.
    #[arg(long, help_heading = "Timing")]
    pub deferred_unmap: bool,

    /// One loader thread doing synchronous copies: a unit's copy blocks the next VMM call
    /// (as in the onnx-genai paging harness). Default: commits overlap the previous copy.
    #[arg(long, help_heading = "Timing")]
    pub serial_loader: bool,

    // Help and values: the predictor registry (see `predictor_help`).
    #[arg(long, default_value = "none", value_delimiter = ',', value_name = "PREDICTOR",
          help_heading = "Timing", help = predictor_help(), value_parser = predictor_parser())]
    pub predictor: Vec<PredictorKind>,

    /// Prefetch lead in MoE layers (1 to the number of MoE layers). `sim sweep` and
    /// `sim compare` take a comma-separated list (an axis, crossed with --predictor).
    #[arg(
        long,
        default_value = "1",
        value_delimiter = ',',
        value_name = "L",
        help_heading = "Timing"
    )]
    pub window: Vec<usize>,

    /// How prefetches share the driver and the copy engine with demand page-ins (VMM
    /// paging): `demand-first` (as MoE-Infinity) queues them behind demand work, lets a
    /// started one finish and drops a queued one once its target layer is reached;
    /// `idle-only` also starts one only when it ends before the next demand work, so it
    /// never delays demand; `legacy` issues every prediction at once and never cancels (the
    /// engine before these policies). See docs/DESIGN.md, "Prefetch issue policies".
    #[arg(
        long,
        value_enum,
        default_value = "demand-first",
        value_name = "POLICY",
        help_heading = "Timing"
    )]
    pub prefetch_issue: PrefetchIssue,

    /// Cap on the committed MiB of prefetches started and not yet resident (demand-first
    /// only); a prefetch waits for earlier ones to finish (one at a time when a unit alone
    /// exceeds it). Default: no cap.
    #[arg(
        long,
        value_name = "MIB",
        help_heading = "Timing",
        allow_negative_numbers = true
    )]
    pub prefetch_cap: Option<f64>,

    /// A staging buffer of N units for started prefetches, as mixtral-offloading's
    /// `buffer_size` (demand-first or idle-only): a prefetch starts only into a free slot,
    /// freed when a group pages its unit in or it is unmapped unused. Default: no bound.
    #[arg(
        long,
        value_name = "N",
        help_heading = "Timing",
        allow_negative_numbers = true
    )]
    pub prefetch_buffer: Option<usize>,

    /// Confidence cut: a predictor issues only the experts scoring at least this fraction of
    /// its prediction's best score, in (0, 1] (scores per predictor: DESIGN.md, "Prefetch
    /// predictors"); precision and recall are then against the cut. `auto` (`sim run`, with
    /// --profile-trace): the cut among none and 0.1, 0.2, ..., 1 whose run of the profile
    /// trace is fastest, never read from the evaluated run. Default: no cut.
    #[arg(
        long,
        value_name = "FRACTION|auto",
        help_heading = "Timing",
        allow_negative_numbers = true
    )]
    pub prefetch_min_score: Option<MinScore>,

    /// Admission cap as a fraction of usable VRAM (e.g. 0.90): sequences of the batch that
    /// would push mapped memory past cap x usable are refused.
    #[arg(
        long,
        value_name = "FRACTION",
        help_heading = "Timing",
        allow_negative_numbers = true
    )]
    pub admission_cap: Option<f64>,

    /// Write a Chrome trace-event JSON of the run's resources (open in ui.perfetto.dev).
    #[arg(long, value_name = "FILE", help_heading = "Timing")]
    pub timeline: Option<PathBuf>,

    /// What to do with a live-set slope (vmm_*_live_slope) at a live set past the one its
    /// fit measured: `clamp` prices the slope term at the measured edge, `extrapolate`
    /// extends the line, `refuse` fails the run. Either way the run reports the constant,
    /// how far past, and the share of time priced so (docs/DESIGN.md, "Outside the
    /// measured range").
    #[arg(long, value_enum, default_value = "clamp", help_heading = "Timing")]
    pub outside_range: OutsideRange,
}

/// `--compute` values from [`ComputeMode::ALL`], each with its summary in `--help`.
fn compute_parser() -> impl clap::builder::TypedValueParser<Value = ComputeMode> {
    let values = ComputeMode::ALL.map(|(_, name, help)| PossibleValue::new(name).help(help));
    PossibleValuesParser::new(values).map(|s| {
        ComputeMode::ALL
            .into_iter()
            .find(|(_, name, _)| *name == s)
            .map_or(ComputeMode::Geometry, |(mode, _, _)| mode)
    })
}

/// The `--predictor` help, from the predictor registry: every name with its help note.
fn predictor_help() -> String {
    let names: Vec<String> = PREDICTORS
        .iter()
        .map(|e| match e.help_note {
            Some(n) => format!("{} ({n})", e.name),
            None => e.name.to_string(),
        })
        .collect();
    format!(
        "Prefetch predictor naming the units of the MoE layer `--window` layers ahead: {}. \
         static, next-layer and eam learn from --profile-trace when one is given, else online \
         from the evaluated trace's earlier tokens; prev-token reads the step before, oracle \
         the plan. `sim sweep` and `sim compare` take a \
         comma-separated list (an axis)",
        names.join(", ")
    )
}

/// `--predictor` values: the registry's names, each with its summary.
fn predictor_parser() -> impl TypedValueParser<Value = PredictorKind> {
    let values = PREDICTORS.iter().map(|e| {
        PossibleValue::new(e.name)
            .help(e.summary)
            .aliases(e.aliases.iter().copied())
    });
    PossibleValuesParser::new(values)
        .map(|s| PredictorKind::parse(&s).expect("a possible value is a registered predictor"))
}

impl TimingArgs {
    /// Refuse `--timeline` in `command` (`sim sweep`, `sim compare`, `sim plan`): the file
    /// holds one run's resources, so only `sim run` writes it.
    pub fn refuse_timeline(&self, command: &str) -> Result<()> {
        if self.timeline.is_some() {
            bail!("--timeline writes one run's resources; it is a `sim run` option, not a `sim {command}` one");
        }
        Ok(())
    }

    /// Whether any `--predictor` other than `none` was given.
    pub fn predicts(&self) -> bool {
        self.predictor.iter().any(|&k| k != PredictorKind::None)
    }

    /// The prefetch axis of a sweep or comparison: every `--predictor` at every `--window`.
    pub fn prefetch_points(&self) -> Vec<PrefetchPoint> {
        sim::grid::prefetch_points(&self.predictor, &self.window)
    }

    /// The timing configuration of `sim run`; `None` without `--hw`. Errors when
    /// `--predictor` or `--window` lists more than one value (an axis of sweep and compare).
    pub fn for_run(&self, seed: u64) -> Result<Option<TimingConfig>> {
        if self.predictor.len() > 1 || self.window.len() > 1 {
            bail!("--predictor and --window take one value in `sim run`; give lists to `sim sweep` or `sim compare`, which run every predictor at every window");
        }
        if self.cpu_experts.len() > 1 {
            bail!("--cpu-experts takes one placement in `sim run`; give a list to `sim sweep` or `sim compare`, which run every placement");
        }
        self.timing_config(seed, true)
    }

    /// Whether `--prefetch-min-score auto` asks `sim run` to choose the cut.
    pub fn min_score_auto(&self) -> bool {
        self.prefetch_min_score == Some(MinScore::Auto)
    }

    /// The timing configuration shared by a grid's runs (predictor and window from the first
    /// prefetch point; [`with_prefetch`] sets each run's); `None` without `--hw`. `seed`
    /// (the run's `--seed`) drives the oversubscription jitter.
    pub fn for_grid(&self, seed: u64) -> Result<Option<TimingConfig>> {
        self.timing_config(seed, false)
    }

    /// [`TimingArgs::for_run`] (`run`: `--prefetch-min-score auto` is left to the caller,
    /// as no cut) or [`TimingArgs::for_grid`] (which refuses `auto`).
    fn timing_config(&self, seed: u64, run: bool) -> Result<Option<TimingConfig>> {
        if !run && self.min_score_auto() {
            bail!("--prefetch-min-score auto chooses one cut for one `sim run` from its --profile-trace; give a sweep or comparison a fraction (e.g. 0.5)");
        }
        let Some(hw) = &self.hw else {
            let used = self.handle_pool
                || self.deferred_unmap
                || self.serial_loader
                || self.predicts()
                || self.admission_cap.is_some()
                || self.timeline.is_some()
                || self.hw_host.is_some()
                || self.places_on_cpu();
            if used {
                bail!("timing flags (--handle-pool, --deferred-unmap, --serial-loader, --predictor, --admission-cap, --timeline, --hw-host, --cpu-experts) need a hardware profile: add --hw rtx4060-laptop-wddm (or another, see `sim profile list`)");
            }
            if self.model_config.is_some() || self.nonexpert_dtype.is_some() {
                bail!("--model-config and --nonexpert-dtype size the non-expert weights and the KV cache of the timing model, which needs a hardware profile: add --hw rtx4060-laptop-wddm (or another, see `sim profile list`)");
            }
            return Ok(None);
        };
        for (name, v) in [
            ("--nonexpert-us", self.nonexpert_us),
            ("--expert-us", self.expert_us),
            ("--nonexpert-mib", self.nonexpert_mib),
        ] {
            if let Some(x) = v {
                if !(x.is_finite() && x >= 0.0) {
                    bail!("{name} {x}: give a finite non-negative number");
                }
            }
        }
        if let Some(c) = self.admission_cap {
            if !(c > 0.0 && c.is_finite()) {
                bail!("--admission-cap {c}: give a positive fraction of usable VRAM, e.g. 0.90");
            }
        }
        let prefetch_cap = self.prefetch_cap_bytes()?;
        let prefetch_min_score = self.prefetch_min_score()?;
        let prefetch_buffer = self.prefetch_buffer_units()?;
        if self.predicts() && self.window.contains(&0) {
            bail!("--window 0: a prefetch needs a lead of at least one MoE layer");
        }
        let (predictor, window) = self.prefetch_points()[0];
        let profile = self.profile(hw)?;
        if self.places_on_cpu() && self.hw_host.is_none() && !has_host_constants(&profile) {
            bail!("--cpu-experts {} computes experts on the CPU, and --hw {hw} has no host CPU constant: add --hw-host dev-box-host (this project's development CPU) or a profile of your CPU from `sim calibrate --only host --out FILE`", self.cpu_experts.iter().find(|&&c| c != CpuExperts::None).expect("a placement on the CPU"));
        }
        Ok(Some(TimingConfig {
            compute: self.compute,
            overrides: ComputeOverrides {
                nonexpert_us: self.nonexpert_us,
                expert_us: self.expert_us,
                nonexpert_mib: self.nonexpert_mib,
                kv_bytes_per_token: self.kv_bytes_per_token,
                model_config: self.model_config()?,
                nonexpert_dtype: self.nonexpert_dtype,
            },
            handle_pool: self.handle_pool,
            deferred_unmap: self.deferred_unmap,
            serial_loader: self.serial_loader,
            predictor,
            window,
            prefetch_issue: self.prefetch_issue,
            prefetch_cap,
            prefetch_buffer,
            prefetch_min_score,
            admission_cap: self.admission_cap,
            timeline: self.timeline.clone(),
            seed,
            hw_host: self.hw_host.clone(),
            cpu_experts: self.cpu_experts.first().copied().unwrap_or_default(),
            outside_range: self.outside_range,
            ..TimingConfig::new(hw.clone(), Arc::new(profile))
        }))
    }

    /// The parsed `--model-config`, if given; errors name the flag and the file.
    pub fn model_config(&self) -> Result<Option<Arc<traces::hf_config::ModelConfig>>> {
        let Some(path) = &self.model_config else {
            return Ok(None);
        };
        let what = || format!("--model-config {}", path.display());
        let text = traces::utf8_text::read(path, "a JSON config.json").with_context(what)?;
        let name = path
            .file_stem()
            .map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
        let config = traces::hf_config::parse(&text, &name).with_context(what)?;
        Ok(Some(Arc::new(config)))
    }

    /// `--prefetch-cap` in bytes: a positive MiB count, with a predictor, under demand-first.
    fn prefetch_cap_bytes(&self) -> Result<Option<u64>> {
        let Some(mib) = self.prefetch_cap else {
            return Ok(None);
        };
        if !(mib > 0.0 && mib.is_finite()) {
            bail!("--prefetch-cap {mib}: give a positive number of MiB of prefetches in flight");
        }
        if !self.predicts() {
            bail!("--prefetch-cap limits prefetches: add a --predictor (e.g. next-layer)");
        }
        if self.prefetch_issue == PrefetchIssue::Legacy {
            bail!("--prefetch-cap applies to queued prefetches: use it with --prefetch-issue demand-first or idle-only, not legacy");
        }
        Ok(Some((mib * sim::MIB).round() as u64))
    }

    /// `--prefetch-buffer`: a positive unit count, with a predictor, not under legacy.
    fn prefetch_buffer_units(&self) -> Result<Option<usize>> {
        let Some(n) = self.prefetch_buffer else {
            return Ok(None);
        };
        if n == 0 {
            bail!("--prefetch-buffer {n}: give a positive number of unit slots (e.g. 4)");
        }
        if !self.predicts() {
            bail!("--prefetch-buffer stages prefetches: add a --predictor (e.g. next-layer)");
        }
        if self.prefetch_issue == PrefetchIssue::Legacy {
            bail!("--prefetch-buffer applies to queued prefetches: use it with --prefetch-issue demand-first or idle-only, not legacy");
        }
        Ok(Some(n))
    }

    /// `--prefetch-min-score`: a fraction in (0, 1], with a predictor (`auto`: no cut here;
    /// `sim run` chooses one).
    fn prefetch_min_score(&self) -> Result<Option<f64>> {
        let min = match self.prefetch_min_score {
            None => return Ok(None),
            Some(MinScore::Auto) => {
                if !self.predicts() {
                    bail!("--prefetch-min-score auto cuts a predictor's predictions: add a --predictor (e.g. next-layer)");
                }
                return Ok(None);
            }
            Some(MinScore::Cut(x)) => x,
        };
        if !(min > 0.0 && min <= 1.0) {
            bail!("--prefetch-min-score {min}: give a fraction of the prediction's best score, above 0 and at most 1 (e.g. 0.5)");
        }
        if !self.predicts() {
            bail!("--prefetch-min-score cuts a predictor's predictions: add a --predictor (e.g. next-layer)");
        }
        Ok(Some(min))
    }

    /// Whether any `--cpu-experts` places experts on the CPU.
    pub fn places_on_cpu(&self) -> bool {
        self.cpu_experts.iter().any(|&c| c != CpuExperts::None)
    }

    /// The profile `--hw` names, combined with `--hw-host` when given.
    fn profile(&self, hw: &str) -> Result<profile::Profile> {
        let gpu = profile::load(hw)?;
        let Some(host) = &self.hw_host else {
            return Ok(gpu);
        };
        let h = profile::load(host).with_context(|| format!("--hw-host {host}"))?;
        profile::with_host(&gpu, &h).with_context(|| format!("--hw-host {host}"))
    }
}

/// Whether `p` holds any host CPU constant (a GPU profile calibrated with its host arms).
fn has_host_constants(p: &profile::Profile) -> bool {
    profile::HOST_CONSTANTS.iter().any(|&n| p.get(n).is_some())
}

/// `t` with the predictor and window of prefetch point `p`.
pub fn with_prefetch(t: &TimingConfig, p: PrefetchPoint) -> TimingConfig {
    TimingConfig {
        predictor: p.0,
        window: p.1,
        ..t.clone()
    }
}

/// `t` with the placement named `placement` (a `--cpu-experts` value as printed; `None`:
/// `t` as it is).
pub fn with_placement(t: &TimingConfig, placement: Option<&str>) -> TimingConfig {
    let cpu_experts = placement
        .and_then(|s| CpuExperts::parse(s).ok())
        .unwrap_or(t.cpu_experts);
    TimingConfig {
        cpu_experts,
        ..t.clone()
    }
}

/// Give every sweep configuration the timing options, once per prefetch point and, inside
/// it, once per `--cpu-experts` placement (innermost); with `--admission-cap` each runs
/// twice, without and with the cap (adjacent rows), for [`batch_table`].
pub fn with_timing(
    configs: Vec<sim::runner::RunConfig>,
    args: &TimingArgs,
    seed: u64,
) -> Result<Vec<sim::runner::RunConfig>> {
    let Some(base) = args.for_grid(seed)? else {
        return Ok(configs);
    };
    let points = args.prefetch_points();
    let placements = &args.cpu_experts;
    let mut out = Vec::with_capacity(configs.len() * 2 * points.len() * placements.len());
    for (c, &p, &cpu) in configs.iter().flat_map(|c| {
        points
            .iter()
            .flat_map(move |p| placements.iter().map(move |x| (c, p, x)))
    }) {
        let t = TimingConfig {
            cpu_experts: cpu,
            ..with_prefetch(&base, p)
        };
        let c = c.clone();
        if t.admission_cap.is_some() {
            let mut free = t.clone();
            free.admission_cap = None;
            free.timeline = None;
            out.push(sim::runner::RunConfig {
                timing: Some(free),
                ..c.clone()
            });
        }
        let mut capped = t.clone();
        capped.timeline = None; // one file cannot hold every row
        out.push(sim::runner::RunConfig {
            timing: Some(capped),
            ..c
        });
    }
    Ok(out)
}

/// Warn on stderr when, without `--admission-cap`, timed runs mapped more than the profile's
/// usable VRAM: their page-ins and touches were priced on the oversubscription curve, which a
/// reader of the tables may not notice. Names each such budget (in the order first seen) with
/// the largest `timing.peak_mapped_mib` of its runs, against `timing_detail.usable_mib`, and
/// says how to cap. Prints nothing with a cap (capped grids say what was refused) or when no
/// run went over. Output files and stdout are untouched.
pub fn warn_over_vram<'a>(
    runs: impl IntoIterator<Item = &'a sim::runner::RunReport>,
    cap: Option<f64>,
) {
    if cap.is_some() {
        return;
    }
    // (budget as written, largest peak mapped MiB), usable MiB and profile of the runs over
    let mut over: Vec<(String, f64)> = Vec::new();
    let mut vram: Option<(f64, String)> = None;
    for r in runs {
        let (Some(t), Some(d)) = (&r.timing, &r.timing_detail) else {
            continue;
        };
        if t.peak_mapped_mib <= d.usable_mib {
            continue;
        }
        let budget = r.retention.as_ref().map_or_else(
            || "streaming (no budget)".to_string(),
            |x| reports::sizes::given_text(&x.budget),
        );
        match over.iter_mut().find(|(b, _)| *b == budget) {
            Some((_, peak)) => *peak = peak.max(t.peak_mapped_mib),
            None => over.push((budget, t.peak_mapped_mib)),
        }
        vram.get_or_insert_with(|| (d.usable_mib, d.profile.clone()));
    }
    let Some((usable, profile)) = vram else {
        return;
    };
    let mib = |x: f64| reports::sizes::thousands(x.round() as u64);
    let named: Vec<String> = over
        .iter()
        .map(|(b, peak)| format!("{b} (peak {} MiB mapped)", mib(*peak)))
        .collect();
    eprintln!(
        "warning: without --admission-cap, the runs at budget{} {} map more than the {} MiB of usable VRAM of `{profile}`, so they are priced on its oversubscription curve; give --admission-cap 1.0 (a fraction of usable VRAM; 0.9 keeps a tenth back) to refuse the sequences past it, or lower --budget",
        if over.len() == 1 { "" } else { "s" },
        named.join(", "),
        mib(usable)
    );
}

/// A `--prefetch-min-score` value: a fraction, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MinScore {
    Cut(f64),
    /// Chosen from the profile trace by `sim run` ([`super::auto_cut`]).
    Auto,
}

impl std::str::FromStr for MinScore {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(MinScore::Auto);
        }
        s.parse::<f64>().map(MinScore::Cut).map_err(|_| {
            format!("`{s}` is neither a fraction of the best score (e.g. 0.5) nor `auto`")
        })
    }
}
