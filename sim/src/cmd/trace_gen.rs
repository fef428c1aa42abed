//! `sim trace gen`: write a labelled synthetic trace (see `traces::gen` for the router model).

use super::args_input::{emit, emit_json};
use anyhow::{bail, Context};
use clap::Args;
use std::path::PathBuf;
use traces::gen::fit::{fit, FitOptions, LayerFit};
use traces::gen::fit_cross::{fit_cross, CrossFit};
use traces::gen::{write_trace_ticking, Archetypes, GenError, GenParams};
use traces::presets::{preset, preset_names, Attention, PRESETS};
use traces::{LayerSpec, ModelSpec, TraceError};

/// Arguments of `sim trace gen`.
#[derive(Args, Debug)]
pub struct GenArgs {
    /// Output trace file (written to a temporary file in the same directory, then renamed).
    #[arg(long, required_unless_present = "list_presets")]
    pub out: Option<PathBuf>,
    /// Model geometry from a preset (see --list-presets): granite-3.0-1b-a400m, olmoe-1b-7b,
    /// gpt-oss-20b, qwen3-30b-a3b, mixtral-8x7b, deepseek-v3, kimi-k2.
    #[arg(long, conflicts_with_all = ["layers", "experts", "top_k"])]
    pub preset: Option<String>,
    /// Model geometry from the model's Hugging Face config.json (the families of `sim plan
    /// --model-config`), e.g. traces/data/configs/qwen3-30b-a3b.json: layers, dense layers,
    /// experts, top-k, shared experts, hidden size and expert FFN.
    #[arg(long, value_name = "FILE",
          conflicts_with_all = ["preset", "layers", "experts", "top_k"])]
    pub model_config: Option<PathBuf>,
    /// Custom geometry: number of MoE layers (with --experts and --top-k).
    #[arg(long, requires_all = ["experts", "top_k"])]
    pub layers: Option<usize>,
    /// Custom geometry: routed experts per MoE layer (at most 65,535).
    #[arg(long)]
    pub experts: Option<u16>,
    /// Custom geometry: experts the router selects per token in each MoE layer.
    #[arg(long)]
    pub top_k: Option<u16>,
    /// Custom geometry: leading dense layers without routed experts.
    #[arg(long, default_value_t = 0)]
    pub dense_layers: usize,
    /// Custom geometry: model name to record in the header.
    #[arg(long, default_value = "synthetic")]
    pub model_name: String,
    /// Zipf exponent of expert popularity (0 = uniform): one value, or one per MoE layer
    /// separated by commas. Required unless --fit-to gives it.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub skew: Vec<f64>,
    /// Probability in [0, 1] that each of the previous token's experts is selected again: one
    /// value, or one per MoE layer. Required unless --fit-to gives it.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub locality: Vec<f64>,
    /// Probability in [0, 1] that a free slot takes the successor (same popularity rank) of the
    /// previous layer's expert in that slot; 0 keeps layers independent. Default: fitted to
    /// the --fit-to trace's next-layer predictability, else 0.
    #[arg(long, allow_negative_numbers = true)]
    pub cross_layer: Option<f64>,
    /// Token archetypes: template tokens, each with one selection per MoE layer, that every
    /// token copies from (one archetype per token, shared by all its layers), 1 to 4,096; with
    /// --archetype-share. Default: fitted with --fit-to (when the geometry is the fitted
    /// trace's), else none.
    #[arg(long, requires = "archetype_share")]
    pub archetypes: Option<u32>,
    /// Probability in [0, 1] that a free slot copies the token's archetype (with
    /// --archetypes).
    #[arg(long, requires = "archetypes", allow_negative_numbers = true)]
    pub archetype_share: Option<f64>,
    /// Decode tokens per sequence.
    #[arg(long, required_unless_present = "list_presets")]
    pub tokens: Option<u64>,
    /// Number of sequences.
    #[arg(long, default_value_t = 1)]
    pub sequences: u64,
    /// Seed of the Pcg64 generator; the same inputs and seed give a byte-identical file.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Estimate --skew and --locality per layer from this real trace (decode phase) by
    /// simulated moments (see traces::gen::fit), and --cross-layer and the always-on experts
    /// per layer and the token archetypes (traces::gen::fit_cross; --json reports them under
    /// `fit_cross`). Without
    /// --preset/--layers the geometry is also taken from it; with a different geometry the
    /// per-layer fits are averaged and no expert is always-on (nor any archetype).
    #[arg(long)]
    pub fit_to: Option<PathBuf>,
    /// Print the parameters used (and the per-layer fit) as JSON.
    #[arg(long)]
    pub json: bool,
    /// List the presets with their geometry (attention and KV cache bytes per token included)
    /// and source, and exit.
    #[arg(long)]
    pub list_presets: bool,
    #[command(flatten)]
    pub progress: super::args_progress::ProgressArgs,
}

/// The shipped config.json a preset equals, for `--list-presets` (tested equal in
/// `traces::presets`).
fn backing_config(p: &traces::presets::Preset) -> String {
    p.config.map_or(String::new(), |f| {
        format!(" = --model-config traces/data/configs/{f}")
    })
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

pub fn run_gen(a: GenArgs) -> anyhow::Result<()> {
    if a.list_presets {
        let text: String = PRESETS
            .iter()
            .map(|p| format!(
                "{:<22} {:>2} layers ({} dense), {:>3} experts, top-{}, {} shared, hidden {}, expert FFN {}, {}: KV {} B/token  [{}]{}\n",
                p.name, p.layers, p.dense_layers, p.experts, p.top_k, p.shared_experts,
                p.hidden_size, p.expert_ffn, attention_words(&p.attention),
                p.kv_bytes_per_token(), p.source, backing_config(p)
            ))
            .collect();
        return emit(None, &text);
    }
    let (Some(out), Some(tokens)) = (a.out.clone(), a.tokens) else {
        bail!("--out and --tokens are required");
    };
    let fitted = fitted_of(&a)?;
    let model = model_of(&a, fitted.as_ref())?;
    let params = params_of(&a, tokens, &model, fitted.as_ref())?;
    // Bad parameters are argument errors: report them before the output file is touched, so
    // they do not read as a failure to write it.
    params.validate(&model)?;
    let bar = a.progress.bar(
        "sim trace gen",
        params.sequences.saturating_mul(params.tokens),
        "tokens written",
    );
    // its errors name the file
    let written = write_trace_ticking(&out, &model, &params, &mut |n| bar.inc(n));
    bar.finish();
    written.map_err(gen_error_words)?;
    if a.json {
        let fit_json = fitted.as_ref().map(|(_, f, _)| f);
        let cross_json = fitted.as_ref().map(|(_, _, c)| c);
        let v = serde_json::json!({ "out": out.display().to_string(), "model": model.name,
            "params": params, "fit": fit_json, "fit_cross": cross_json });
        emit_json(&v)?;
    } else {
        emit(
            None,
            &format!(
                "wrote {}: {} ({} MoE layers), {} x {} decode tokens, seed {}\n",
                out.display(),
                model.name,
                model.moe_layers().len(),
                reports::metrics::count(params.sequences, "sequence"),
                params.tokens,
                params.seed
            ),
        )?;
    }
    Ok(())
}

/// A preset's attention geometry in a few words, for `--list-presets`.
fn attention_words(a: &Attention) -> String {
    match a {
        Attention::Grouped { kv_heads, head_dim } => {
            format!("{kv_heads} KV heads x {head_dim}")
        }
        Attention::Latent {
            kv_lora_rank,
            rope_dim,
        } => format!("latent KV rank {kv_lora_rank} + RoPE {rope_dim}"),
    }
}

/// The generator's refusals of what the machine cannot hold, in the words of the flags that
/// ask for less; other errors as they are (they name the file).
fn gen_error_words(e: GenError) -> anyhow::Error {
    use traces::resources::{bytes_words, ResourceError};
    match e {
        GenError::Memory(ResourceError::Memory {
            what,
            need,
            available,
            ..
        }) => anyhow::anyhow!(
            "{what} would need {}, more than the {} of memory available now; give fewer --layers or --experts (or a smaller --preset)",
            bytes_words(need),
            bytes_words(available as u128)
        ),
        GenError::Trace(TraceError::NoSpace {
            file,
            need,
            free,
            dir,
        }) => anyhow::anyhow!(
            "--out {file}: the trace would take {}, more than the {} free in {dir}; give fewer --tokens or --sequences, or an --out in another file system",
            bytes_words(need),
            bytes_words(free as u128)
        ),
        other => other.into(),
    }
}

/// What `--fit-to` fitted: the real trace's model, its per-layer fits, and its always-on
/// counts and cross-layer correlation.
type Fitted = (ModelSpec, Vec<LayerFit>, CrossFit);

/// The model and fits of `--fit-to`, if given.
fn fitted_of(a: &GenArgs) -> anyhow::Result<Option<Fitted>> {
    Ok(match &a.fit_to {
        Some(path) => {
            let st = super::trace_stats::stats_of_file(path, traces::PhaseSel::Decode, &|_| {})
                .with_context(|| format!("fitting to {}", path.display()))?;
            let model = traces::read_header(path)?.model;
            let opts = FitOptions::default();
            let layers = fit(&st, &opts);
            let cross = fit_cross(&model, &st, &layers, &opts);
            Some((model, layers, cross))
        }
        None => None,
    })
}

/// The geometry: a preset, a custom `--layers/--experts/--top-k`, or the fitted trace's.
fn model_of(a: &GenArgs, fitted: Option<&Fitted>) -> anyhow::Result<ModelSpec> {
    if let Some(path) = &a.model_config {
        let what = || format!("--model-config {}", path.display());
        let text = traces::utf8_text::read(path, "a JSON config.json").with_context(what)?;
        let name = path
            .file_stem()
            .map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
        return Ok(traces::hf_config::parse(&text, &name)
            .with_context(what)?
            .spec);
    }
    Ok(if let Some(name) = &a.preset {
        let Some(p) = preset(name) else {
            bail!(
                "unknown preset {name:?}; the presets are: {}",
                preset_names()
            );
        };
        p.model_spec()
    } else if let Some(layers) = a.layers {
        let (experts, top_k) = (a.experts.unwrap_or(0), a.top_k.unwrap_or(0));
        if experts == 0 || top_k == 0 || top_k > experts || layers == 0 {
            bail!("custom geometry needs --layers >= 1, --experts >= 1 and 1 <= --top-k <= --experts (got {layers}, {experts}, {top_k})");
        }
        let total = a
            .dense_layers
            .checked_add(layers)
            .filter(|&n| n <= traces::format::MAX_LAYERS)
            .with_context(|| {
                format!(
                    "--layers {layers} and --dense-layers {} exceed the {} layers a trace may have",
                    a.dense_layers,
                    traces::format::MAX_LAYERS
                )
            })?;
        let mut m = ModelSpec::uniform(&a.model_name, total, experts, top_k);
        for l in &mut m.layers[..a.dense_layers] {
            *l = LayerSpec {
                experts: 0,
                top_k: 0,
                shared_experts: 0,
            };
        }
        m
    } else if let Some((m, _, _)) = fitted {
        m.clone()
    } else {
        bail!("give the geometry: --preset NAME, --model-config FILE, --layers/--experts/--top-k, or --fit-to FILE");
    })
}

/// The generator's parameters; skew and locality default to the fit's (per layer when the fit
/// has one per MoE layer, else their means); the always-on counts and the archetypes carry
/// over to the fitted trace's own layer geometry only (another top-k or expert count has other
/// always-on experts, and the archetypes were fitted for its expert count and top-k).
fn params_of(
    a: &GenArgs,
    tokens: u64,
    model: &ModelSpec,
    fitted: Option<&Fitted>,
) -> anyhow::Result<GenParams> {
    let moe = model.moe_layers().len();
    let (mut skew, mut locality) = (a.skew.clone(), a.locality.clone());
    let mut cross_layer = a.cross_layer.unwrap_or(0.0);
    let mut always_on = Vec::new();
    let mut archetypes = None;
    if let Some((real, fits, cross)) = fitted {
        cross_layer = a.cross_layer.unwrap_or(cross.cross_layer);
        if real.layers == model.layers {
            if cross.always_on.iter().any(|&n| n > 0) {
                always_on = cross.always_on.clone();
            }
            archetypes = cross.archetypes.clone();
        }
        let s: Vec<f64> = fits.iter().map(|f| f.skew).collect();
        let l: Vec<f64> = fits.iter().map(|f| f.locality).collect();
        let same = fits.len() == moe;
        if skew.is_empty() {
            skew = if same { s } else { vec![mean(&s)] };
        }
        if locality.is_empty() {
            locality = if same { l } else { vec![mean(&l)] };
        }
    }
    if let (Some(count), Some(share)) = (a.archetypes, a.archetype_share) {
        archetypes = Some(Archetypes { count, share });
    }
    if skew.is_empty() || locality.is_empty() {
        bail!(
            "give --skew and --locality (e.g. --skew 1.0 --locality 0.3), or --fit-to a real trace"
        );
    }
    Ok(GenParams {
        preset: a.preset.clone(),
        skew,
        locality,
        cross_layer,
        sequences: a.sequences,
        tokens,
        seed: a.seed,
        fitted_to: a.fit_to.as_ref().map(|p| p.display().to_string()),
        always_on,
        archetypes,
    })
}
