//! `sim trace import` and `sim trace export`: converting traces from and to other formats.

use super::args_input::emit_json;
use anyhow::{bail, Context};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use traces::{ImportFormat, ImportOptions, ImportOutput, Imported, IMPORT_FORMATS};

/// Arguments of `sim trace import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// Format of FILE.
    #[arg(long, value_parser = import_format_parser())]
    pub format: &'static ImportFormat,
    /// The file to convert.
    pub file: PathBuf,
    // Help: what each registered format writes (see `out_help`).
    #[arg(long, help = out_help())]
    pub out: PathBuf,
    /// Model name to record in the header (default: the name in the file, or "unknown").
    #[arg(long)]
    pub model_name: Option<String>,
    /// Model revision (commit or tag) to record, when known.
    #[arg(long)]
    pub revision: Option<String>,
    /// Hidden size of the model, from its public config (e.g. 1024 for granite-3.0-1b-a400m);
    /// with --expert-ffn it lets the simulator derive expert bytes.
    #[arg(long)]
    pub hidden_size: Option<u32>,
    /// Intermediate (FFN) size of one routed expert, from the model's public config
    /// (e.g. 512 for granite-3.0-1b-a400m).
    #[arg(long)]
    pub expert_ffn: Option<u32>,
    /// Where the data came from, recorded as provenance (default: FILE's path).
    #[arg(long)]
    pub source: Option<String>,
    /// Licence / attribution notice that must travel with the data.
    #[arg(long)]
    pub licence: Option<String>,
    /// Recording date (ISO 8601) to record (default: "unknown").
    #[arg(long)]
    pub date: Option<String>,
    /// Shared (always-active) experts of every MoE layer, from the model's config; each of
    /// the routed size unless --shared-expert-ffn gives theirs (Qwen1.5-MoE-A2.7B: 1 with
    /// --shared-expert-ffn 5632, or 4 routed-sized, 5632 / 1408); recorded in the header.
    #[arg(long)]
    pub shared_experts: Option<u16>,
    /// Intermediate (FFN) size of one shared expert, from the model's config when it differs
    /// from the routed one's (`shared_expert_intermediate_size`, e.g. 5632 for
    /// Qwen1.5-MoE-A2.7B); recorded in the header (trace format version 3).
    #[arg(long, value_name = "FFN", requires = "shared_experts", value_parser = clap::value_parser!(u32).range(1..))]
    pub shared_expert_ffn: Option<u32>,
    /// Weight matrices of one routed expert, each hidden x expert FFN, when not the 3 of
    /// gate/up/down (SwiGLU): 2 for Switch-style up/down experts. Sets the expert size.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..))]
    pub expert_matrices: Option<u8>,
    /// Model layers that are MoE but whose selections the input does not record, e.g.
    /// `24-47` or `3,5,7` (distinct from dense layers, which have no experts).
    #[arg(long, value_name = "LAYERS", value_parser = parse_layer_list)]
    pub unrecorded_layers: Option<LayerList>,
    // Help: the formats that read it (see `format_flag_help`).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..), help = format_flag_help("--num-experts", "experts per layer, when the largest id seen + 1 would understate it (at least 1)"))]
    pub num_experts: Option<u16>,
    #[arg(long, value_name = "L", value_parser = clap::value_parser!(u64).range(1..=traces::format::MAX_LAYERS as u64), help = format_flag_help("--num-layers", "the model's layers, when the largest layer index + 1 would understate it; needed when that index leaves most layers without rows (e.g. a log of layers 20-23 of 24)"))]
    pub num_layers: Option<u64>,
    #[arg(long, value_name = "FIELD=NAME,...", value_parser = traces::FieldMap::parse, help = format_flag_help("--map", "the input's names for the row fields sequence, phase, token, layer, experts, weights, e.g. sequence=req_id,token=token_idx,experts=topk_ids,weights=topk_weights"))]
    pub map: Option<traces::FieldMap>,
    #[arg(long = "where", value_name = "FIELD=VALUE", value_parser = traces::RowFilter::parse, help = format_flag_help("--where", "keep only rows whose input field FIELD holds VALUE, e.g. type=route (repeatable; every one must hold)"))]
    pub filters: Vec<traces::RowFilter>,
    #[arg(long, help = format_flag_help("--drop-warmup", "remove vLLM's warm-up: on a log whose token restarts at each forward pass, the passes before the first real one and any pass whose rows all select one expert set; otherwise the first sequence, many tokens all with one selection per layer"))]
    pub drop_warmup: bool,
    #[arg(long, value_name = "N", help = format_flag_help("--prompt-tokens", "prompt tokens of every request (the first N rows of each array are prefill)"))]
    pub prompt_tokens: Option<u64>,
    #[arg(long, value_name = "FILE", help = format_flag_help("--prompt-lengths", "prompt tokens per request: a JSON object {\"name\": tokens} or CSV sequence,prompt_tokens"))]
    pub prompt_lengths: Option<PathBuf>,
    #[arg(long, value_name = "L", value_parser = clap::value_parser!(u64).range(1..=65536), help = format_flag_help("--moe-layers", "MoE layers in each flat routed-experts array (e.g. 48 for Qwen3-30B-A3B)"))]
    pub moe_layers: Option<u64>,
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(1..), help = format_flag_help("--top-k", "experts selected per token and layer (e.g. 8 for Qwen3-30B-A3B)"))]
    pub top_k: Option<u16>,
    /// The model's Hugging Face config.json (the families of `sim plan --model-config`), e.g.
    /// traces/data/configs/qwen3-30b-a3b.json: the header's hidden size, expert FFN, shared
    /// experts and their FFN, dense layers and layer count come from it; a config whose layers,
    /// experts or top-k disagree with the log's is an error naming the config field.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["hidden_size", "expert_ffn", "shared_experts", "shared_expert_ffn", "expert_matrices"])]
    pub model_config: Option<PathBuf>,
    /// Print what was written as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The layers of `--unrecorded-layers`, sorted and distinct. A type of its own: clap reads an
/// `Option<Vec<T>>` field as a repeatable flag of `T` values, not as one parsed list.
#[derive(Clone, Debug)]
pub struct LayerList(pub Vec<usize>);

/// Parse a layer list: comma-separated layer numbers and inclusive ranges `a-b`.
fn parse_layer_list(s: &str) -> Result<LayerList, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("{x:?} is not a layer number (use e.g. 24-47 or 3,5,7)"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi || hi >= traces::format::MAX_LAYERS {
            return Err(format!(
                "{part:?} is not a range of layers below {}",
                traces::format::MAX_LAYERS
            ));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(LayerList(out))
}

/// `--format` values: the import-format registry's names, each with its summary.
fn import_format_parser() -> impl TypedValueParser<Value = &'static ImportFormat> {
    let values = IMPORT_FORMATS.iter().map(|f| {
        PossibleValue::new(f.name)
            .help(f.summary)
            .aliases(f.aliases.iter().copied())
    });
    PossibleValuesParser::new(values)
        .map(|s| traces::import_format(&s).expect("a possible value is a registered import format"))
}

/// The names of the formats `keep` selects, as prose: `a`, `a and b`, `a, b and c`.
fn format_names(keep: impl Fn(&ImportFormat) -> bool) -> (String, usize) {
    let names: Vec<&str> = IMPORT_FORMATS
        .iter()
        .filter(|f| keep(f))
        .map(|f| f.name)
        .collect();
    let text = match names.split_last() {
        None => String::new(),
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    };
    (text, names.len())
}

/// The `--out` help: what each registered format writes.
fn out_help() -> String {
    let mut parts = Vec::new();
    let verb = |n: usize| if n == 1 { "writes" } else { "write" };
    let (per, n) = format_names(|f| f.output == ImportOutput::PerPrompt);
    if n > 0 {
        parts.push(format!(
            "{per} {} one `<prompt key>.bin` per prompt plus `all.bin`",
            verb(n)
        ));
    }
    let (one, n) = format_names(|f| f.output == ImportOutput::OneTrace);
    if n > 0 {
        parts.push(format!("{one} {} `<FILE stem>.bin`", verb(n)));
    }
    format!(
        "Output directory (created if missing; a file, or a name ending in .bin, is refused). {}",
        parts.join("; ")
    )
}

/// The help of a format-specific flag: the formats that read it, then what it means.
fn format_flag_help(flag: &str, what: &str) -> String {
    let (names, _) = format_names(|f| f.flags.contains(&flag));
    format!("{names} only: {what}")
}

/// Refuse a format-specific flag the chosen format does not read, naming the ones that do.
fn check_format_flags(a: &ImportArgs) -> anyhow::Result<()> {
    let given = [
        ("--num-experts", a.num_experts.is_some()),
        ("--num-layers", a.num_layers.is_some()),
        ("--map", a.map.is_some()),
        ("--where", !a.filters.is_empty()),
        ("--drop-warmup", a.drop_warmup),
        ("--prompt-tokens", a.prompt_tokens.is_some()),
        ("--prompt-lengths", a.prompt_lengths.is_some()),
        ("--moe-layers", a.moe_layers.is_some()),
        ("--top-k", a.top_k.is_some()),
    ];
    for (flag, present) in given {
        if present && !a.format.flags.contains(&flag) {
            let (names, _) = format_names(|f| f.flags.contains(&flag));
            bail!(
                "--format {} does not read {flag} (only {names} do); leave it out",
                a.format.name
            );
        }
    }
    Ok(())
}

pub fn run_import(a: ImportArgs) -> anyhow::Result<()> {
    check_format_flags(&a)?;
    check_out_dir(&a.out)?;
    sim::runner::require_file(
        &a.file.display().to_string(),
        &a.file,
        &format!(
            "the path of the --format {} log to convert (`sim trace import --help` says what each format reads)",
            a.format.name
        ),
    )?;
    let opts = ImportOptions {
        model_name: a.model_name.clone(),
        revision: a.revision.clone(),
        hidden_size: a.hidden_size,
        expert_ffn: a.expert_ffn,
        source: a.source.clone(),
        licence: a.licence.clone(),
        date: a.date.clone(),
        shared_experts: a.shared_experts,
        expert_matrices: a.expert_matrices,
        shared_expert_ffn: a.shared_expert_ffn,
        unrecorded_layers: a.unrecorded_layers.clone().map(|l| l.0).unwrap_or_default(),
    };
    // Import and check everything before touching --out, so bad input leaves nothing behind.
    // Where the format would infer the layer or expert count, the config gives it.
    let config = model_config(&a)?;
    let reads = |flag: &str| a.format.flags.contains(&flag);
    let from_config = |given: Option<u64>, flag: &str, of: &dyn Fn(&traces::ModelSpec) -> u64| {
        given.or_else(|| Some(of(&config.as_ref()?.spec)).filter(|_| reads(flag)))
    };
    let num_experts = from_config(a.num_experts.map(u64::from), "--num-experts", &|m| {
        m.layers
            .iter()
            .map(|l| u64::from(l.experts))
            .max()
            .unwrap_or(0)
    });
    let num_layers = from_config(a.num_layers, "--num-layers", &|m| m.layers.len() as u64);
    let ropts = traces::RowImportOptions {
        common: opts,
        num_experts: num_experts.map(|e| e as u16),
        map: a.map.clone().unwrap_or_default(),
        filters: a.filters.clone(),
        drop_warmup: a.drop_warmup,
        prompt_tokens: a.prompt_tokens,
        prompt_lengths: a.prompt_lengths.clone(),
        moe_layers: a.moe_layers.map(|l| l as usize),
        top_k: a.top_k,
        num_layers: num_layers.map(|l| l as usize),
    };
    let imported = (a.format.import)(&a.file, &ropts);
    // only an import given the config's counts says so; other errors read as before
    let counts_given = num_layers != a.num_layers || num_experts != a.num_experts.map(u64::from);
    let imported = match &config {
        Some(c) if counts_given => imported.with_context(|| {
            format!(
                "importing with --model-config's {} layers (num_hidden_layers) and its {} experts per layer where the format would infer them",
                c.spec.layers.len(),
                num_experts.unwrap_or(0)
            )
        })?,
        _ => imported?,
    };
    let mut outputs: Vec<(String, traces::Trace)> = match imported {
        Imported::PerPrompt(imported) => {
            let mut outputs = Vec::with_capacity(imported.prompts.len() + 1);
            for (key, trace) in imported.prompts {
                check_file_stem(&key)?;
                outputs.push((format!("{key}.bin"), trace));
            }
            outputs.push(("all.bin".to_string(), imported.all));
            outputs
        }
        Imported::OneTrace(trace) => {
            let stem = a
                .file
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|s| !s.is_empty())
                .with_context(|| {
                    format!(
                        "{} has no usable file name to name the output after",
                        a.file.display()
                    )
                })?;
            vec![(format!("{stem}.bin"), trace)]
        }
    };
    apply_model_config(&a, config.as_ref(), &mut outputs)?;
    // The topmost directory of --out that does not exist yet: removed again if writing fails.
    let created = a
        .out
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .last()
        .map(Path::to_path_buf);
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("creating the output directory {}", a.out.display()))?;
    let written = outputs
        .iter()
        .try_for_each(|(name, trace)| write(&a.out.join(name), trace));
    if written.is_err() {
        if let Some(d) = created {
            // Best effort: the write error is what the user needs to see.
            let _ = std::fs::remove_dir_all(d);
        }
    }
    written?;
    for (_, t) in &outputs {
        if let Some(note) = traces::import_rows::warmup_note(&t.header.provenance) {
            eprintln!("{note}");
        }
    }
    if let Some((_, all)) = outputs.last() {
        print_inferred(&a, all);
        print_size_unknown(all);
    }
    if a.json {
        let files: Vec<_> = outputs
            .iter()
            .map(|(name, t)| import_summary(&a.out.join(name), t))
            .collect();
        emit_json(&files)?;
    }
    Ok(())
}

/// The parsed `--model-config`, if given.
fn model_config(a: &ImportArgs) -> anyhow::Result<Option<traces::hf_config::ModelConfig>> {
    let Some(path) = &a.model_config else {
        return Ok(None);
    };
    let what = || format!("--model-config {}", path.display());
    let text = traces::utf8_text::read(path, "a JSON config.json").with_context(what)?;
    Ok(Some(
        traces::hf_config::parse(&text, "model").with_context(what)?,
    ))
}

/// `--model-config`: every output's geometry from the config, checked against the log's.
fn apply_model_config(
    a: &ImportArgs,
    config: Option<&traces::hf_config::ModelConfig>,
    outputs: &mut [(String, traces::Trace)],
) -> anyhow::Result<()> {
    let (Some(config), Some(path)) = (config, &a.model_config) else {
        return Ok(());
    };
    for (_, t) in outputs.iter_mut() {
        traces::config_geometry::apply(&mut t.header.model, config).with_context(|| {
            format!(
                "--model-config {}; give the config.json of the model the log was recorded from",
                path.display()
            )
        })?;
    }
    Ok(())
}

/// Say on stderr which geometry was inferred from the rows rather than given: experts per
/// layer (the largest id + 1) without `--num-experts`, layers (the largest index + 1) without
/// `--num-layers`, so that a corrupt id or layer index that grew the model is seen.
fn print_inferred(a: &ImportArgs, t: &traces::Trace) {
    if a.model_config.is_some() {
        return; // the config gave the geometry
    }
    let layers = &t.header.model.layers;
    let reads = |flag: &str| a.format.flags.contains(&flag);
    if reads("--num-experts") && a.num_experts.is_none() {
        if let Some(e) = layers.iter().map(|l| l.experts).max().filter(|&e| e > 0) {
            eprintln!(
                "experts per layer: {e}, inferred as the largest expert id seen ({}) + 1; give --num-experts if the model has more (an id at or above it is then refused)",
                e - 1
            );
        }
    }
    if reads("--num-layers") && a.num_layers.is_none() {
        let recorded = layers.iter().filter(|l| l.is_moe()).count();
        eprintln!(
            "layers: {}, inferred as the largest layer index seen + 1 ({recorded} with selections); give --num-layers if the model has more",
            layers.len()
        );
    }
}

/// `--out` is the directory the traces are written into: a path that is a file, or that is
/// named like a trace (`x.bin`, which would become a directory holding `x.bin/NAME.bin`), is
/// refused before anything is read or created.
fn check_out_dir(out: &Path) -> anyhow::Result<()> {
    let shown = out.display();
    if out.exists() && !out.is_dir() {
        bail!("--out {shown} is a file, but trace import writes into a directory (one `<name>.bin` per trace, named after the input): give a directory, e.g. --out traces");
    }
    if out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("bin"))
    {
        let made = if out.is_dir() {
            "is a directory (an earlier import made it?)"
        } else {
            "would be made a directory"
        };
        bail!("--out {shown} {made}: trace import writes into a directory, one `<name>.bin` per trace named after the input, so --out names that directory, not the file; give e.g. --out traces to get traces/<name>.bin");
    }
    Ok(())
}

/// Said after an import whose header lacks the hidden and expert FFN sizes: `sim run` then
/// cannot size an expert by itself.
fn print_size_unknown(t: &traces::Trace) {
    if t.header.model.expert_params().is_none() {
        eprintln!("expert size: unknown (the trace records no hidden and expert FFN sizes), so `sim run` on it needs --expert-mib X (MiB per expert); give --hidden-size and --expert-ffn (or --model-config config.json) to this import to record it");
    }
}

/// What `--json` says of one written trace.
fn import_summary(path: &Path, t: &traces::Trace) -> serde_json::Value {
    let layers = &t.header.model.layers;
    let mut v = serde_json::json!({
        "file": path.display().to_string(),
        "format_version": traces::format::version_for(&t.header),
        "sequences": t.sequences.len(),
        "prefill_tokens": t.total_tokens(traces::PhaseSel::Prefill),
        "decode_tokens": t.total_tokens(traces::PhaseSel::Decode),
        "layers": layers.len(),
        "moe_layers_recorded": layers.iter().filter(|l| l.is_moe()).count(),
        "moe_layers_unrecorded": layers.iter().filter(|l| l.is_unrecorded_moe()).count(),
        "experts_per_layer": layers.iter().map(|l| l.experts).max(),
        "top_k": layers.iter().map(|l| l.top_k).max(),
        "has_weights": t.header.has_weights,
    });
    // Only traces with forward passes or a dropped warm-up say so: other summaries are as
    // they were.
    if let Some(p) = &t.header.passes {
        v["forward_passes"] = p.len().into();
    }
    if let Some(note) = traces::import_rows::warmup_note(&t.header.provenance) {
        v["warmup_dropped"] = note.into();
    }
    v
}

/// Output formats of `sim trace export`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// CSV rows `sequence,phase,token,layer,experts[,weights]`, readable by `sim trace import --format csv`.
    Csv,
    /// libCacheSim's oracleGeneral binary requests (24 bytes: u32 time = token index, u64 object
    /// id = MoE layer x experts + expert, u32 size, i64 1-based position of the next request
    /// for the same object or -1).
    OracleGeneral,
}

/// Phases to export.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PhaseArg {
    /// Generated tokens only.
    Decode,
    /// Prompt tokens only.
    Prefill,
    /// Both, each sequence's prefill tokens before its decode tokens.
    All,
}

impl From<PhaseArg> for traces::PhaseSel {
    fn from(p: PhaseArg) -> Self {
        match p {
            PhaseArg::Decode => traces::PhaseSel::Decode,
            PhaseArg::Prefill => traces::PhaseSel::Prefill,
            PhaseArg::All => traces::PhaseSel::All,
        }
    }
}

/// Arguments of `sim trace export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Output format.
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// The trace file to export.
    pub file: PathBuf,
    /// Output file (written to a temporary file and renamed when complete); `-` writes the
    /// CSV to stdout (oracleGeneral, a binary format, needs a file).
    #[arg(long)]
    pub out: PathBuf,
    /// Which tokens to export.
    #[arg(long, value_enum, default_value = "decode")]
    pub phase: PhaseArg,
    /// oracle-general only: object size in bytes written in every record (default 1: count
    /// objects, so a libCacheSim cache size is a number of experts).
    #[arg(long, conflicts_with = "dtype", value_parser = clap::value_parser!(u32).range(1..))]
    pub object_size: Option<u32>,
    /// oracle-general only: write each expert's size in bytes in this dtype (bf16, fp16, fp8,
    /// int4, int4-noscale, nvfp4, mxfp4), from the header's hidden and expert FFN sizes.
    #[arg(long)]
    pub dtype: Option<String>,
    /// Print what was written as one JSON object on stdout: `format`, the input `file`, the
    /// output `out`, `phase`, `count` and its `unit` (CSV rows, or oracleGeneral requests),
    /// and for oracle-general the `object_size` in bytes written in every request.
    #[arg(long)]
    pub json: bool,
}

/// What `sim trace export --json` prints.
#[derive(serde::Serialize)]
struct ExportSummary {
    /// `csv` or `oracle-general`, as `--format` spells it.
    format: String,
    /// The trace exported, as given.
    file: String,
    /// The file written, as given.
    out: String,
    /// `decode`, `prefill` or `all`.
    phase: &'static str,
    /// Records written: CSV rows (one per sequence, phase, token and MoE layer, header not
    /// counted) or oracleGeneral requests (one per selected expert).
    count: u64,
    /// `rows` or `requests`.
    unit: &'static str,
    /// Bytes written in every oracleGeneral request's size field; absent for CSV.
    #[serde(skip_serializing_if = "Option::is_none")]
    object_size: Option<u32>,
}

pub fn run_export(a: ExportArgs) -> anyhow::Result<()> {
    sim::runner::require_trace_file(&a.file)?;
    let phases: traces::PhaseSel = a.phase.into();
    if matches!(a.format, ExportFormat::Csv) && (a.object_size.is_some() || a.dtype.is_some()) {
        bail!("--object-size and --dtype set the size field of oracleGeneral records; CSV rows have none, so leave them out or use --format oracle-general");
    }
    if a.out.as_os_str() == "-" {
        return export_to_stdout(&a, phases);
    }
    let (n, object_size) = match a.format {
        ExportFormat::Csv => (
            traces::export::export_csv_file(&a.file, phases, &a.out)?,
            None,
        ),
        ExportFormat::OracleGeneral => {
            let size = match &a.dtype {
                None => a.object_size.unwrap_or(1),
                Some(d) => {
                    let dtype = traces::DType::parse(d).with_context(|| {
                        format!("unknown --dtype {d:?}; use bf16, fp16, fp8, int4, int4-noscale, nvfp4 or mxfp4")
                    })?;
                    let header = traces::read_header(&a.file)?;
                    let params = header.model.expert_params().with_context(|| {
                        format!("{} does not record the hidden and expert FFN sizes, so expert bytes are unknown; give --object-size instead", a.file.display())
                    })?;
                    let bytes = dtype.bytes_for(params);
                    u32::try_from(bytes).with_context(|| {
                        format!("an expert of {bytes} bytes does not fit oracleGeneral's u32 size field")
                    })?
                }
            };
            let n = traces::export::export_oracle_general_file(&a.file, phases, size, &a.out)?;
            (n, Some(size))
        }
    };
    let unit = match a.format {
        ExportFormat::Csv => "rows",
        ExportFormat::OracleGeneral => "requests",
    };
    eprintln!("wrote {} ({n} {unit})", a.out.display());
    if a.json {
        let format = a.format.to_possible_value().expect("no variant is skipped");
        let summary = ExportSummary {
            format: format.get_name().to_string(),
            file: a.file.display().to_string(),
            out: a.out.display().to_string(),
            phase: phases.as_str(),
            count: n,
            unit,
            object_size,
        };
        emit_json(&summary)?;
    }
    Ok(())
}

/// `sim trace export --out -`: the CSV on stdout. A reader that stops early (`| head`) ends
/// the export quietly, as every command's stdout does.
fn export_to_stdout(a: &ExportArgs, phases: traces::PhaseSel) -> anyhow::Result<()> {
    if a.json {
        bail!("--out - writes the export to stdout, where --json would print its summary too; give --out a file path, or leave out --json");
    }
    if !matches!(a.format, ExportFormat::Csv) {
        bail!("--out -: oracleGeneral is a binary format written with seeks, so it needs a file; give --out a file path");
    }
    let mut reader = traces::TraceReader::open(&a.file)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let n = traces::export::export_csv(&mut reader, phases, &mut out)?;
    std::io::Write::flush(&mut out)?;
    eprintln!("wrote {n} rows to stdout");
    Ok(())
}

/// A prompt key becomes a file name: refuse anything that could escape the directory.
fn check_file_stem(key: &str) -> anyhow::Result<()> {
    let ok = !key.is_empty()
        && key != "all"
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        && !key.starts_with('.');
    if !ok {
        bail!("prompt key {key:?} cannot be used as a file name (allowed: letters, digits, '_', '-', '.'; not \"all\"); rename it in the input");
    }
    Ok(())
}

fn write(path: &Path, trace: &traces::Trace) -> anyhow::Result<()> {
    traces::write_file(path, trace)?;
    let tokens = trace.total_tokens(traces::PhaseSel::All);
    eprintln!(
        "wrote {} ({}, {tokens} tokens)",
        path.display(),
        reports::metrics::count(trace.sequences.len() as u64, "sequence")
    );
    Ok(())
}
