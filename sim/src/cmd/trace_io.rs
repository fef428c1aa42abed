//! `sim trace import` and `sim trace export`: converting traces from and to other formats.

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use traces::ImportOptions;

/// Input formats of `sim trace import`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ImportFormat {
    /// The onnx-genai router-trace JSON (one object with `prompts`), e.g. the granite trace.
    OnnxGenaiJson,
    /// CSV rows `sequence,phase,token,layer,experts[,weights]` (see traces/FORMAT.md).
    Csv,
    /// JSON Lines rows `{"sequence","phase","token","layer","experts"[,"weights"]}`.
    Jsonl,
}

/// Arguments of `sim trace import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// Format of FILE.
    #[arg(long, value_enum)]
    pub format: ImportFormat,
    /// The file to convert.
    pub file: PathBuf,
    /// Output directory (created if missing). onnx-genai-json writes one `<prompt key>.bin`
    /// per prompt plus `all.bin`; csv and jsonl write `<FILE stem>.bin`.
    #[arg(long)]
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
    /// csv/jsonl only: experts per layer, when the largest id seen + 1 would understate it
    /// (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub num_experts: Option<u16>,
}

pub fn run_import(a: ImportArgs) -> anyhow::Result<()> {
    let opts = ImportOptions {
        model_name: a.model_name.clone(),
        revision: a.revision.clone(),
        hidden_size: a.hidden_size,
        expert_ffn: a.expert_ffn,
        source: a.source.clone(),
        licence: a.licence.clone(),
        date: a.date.clone(),
    };
    // Import and check everything before touching --out, so bad input leaves nothing behind.
    let outputs: Vec<(String, traces::Trace)> = match a.format {
        ImportFormat::OnnxGenaiJson => {
            let imported = traces::import_onnx_genai_json(&a.file, &opts)?;
            let mut outputs = Vec::with_capacity(imported.prompts.len() + 1);
            for (key, trace) in imported.prompts {
                check_file_stem(&key)?;
                outputs.push((format!("{key}.bin"), trace));
            }
            outputs.push(("all.bin".to_string(), imported.all));
            outputs
        }
        ImportFormat::Csv | ImportFormat::Jsonl => {
            let ropts = traces::RowImportOptions {
                common: opts,
                num_experts: a.num_experts,
            };
            let trace = match a.format {
                ImportFormat::Csv => traces::import_csv(&a.file, &ropts)?,
                _ => traces::import_jsonl(&a.file, &ropts)?,
            };
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
    written
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
    /// Output file (written to a temporary file and renamed when complete).
    #[arg(long)]
    pub out: PathBuf,
    /// Which tokens to export.
    #[arg(long, value_enum, default_value = "decode")]
    pub phase: PhaseArg,
    /// oracle-general only: object size in bytes written in every record (1 = count objects,
    /// so a libCacheSim cache size is a number of experts).
    #[arg(long, default_value_t = 1, conflicts_with = "dtype")]
    pub object_size: u32,
    /// oracle-general only: write each expert's size in bytes in this dtype (bf16, fp16, fp8,
    /// int4, int4-noscale, nvfp4, mxfp4), from the header's hidden and expert FFN sizes.
    #[arg(long)]
    pub dtype: Option<String>,
}

pub fn run_export(a: ExportArgs) -> anyhow::Result<()> {
    sim::runner::require_trace_file(&a.file)?;
    let phases: traces::PhaseSel = a.phase.into();
    let n = match a.format {
        ExportFormat::Csv => traces::export::export_csv_file(&a.file, phases, &a.out)?,
        ExportFormat::OracleGeneral => {
            let size = match &a.dtype {
                None => a.object_size,
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
            traces::export::export_oracle_general_file(&a.file, phases, size, &a.out)?
        }
    };
    let unit = match a.format {
        ExportFormat::Csv => "rows",
        ExportFormat::OracleGeneral => "requests",
    };
    eprintln!("wrote {} ({n} {unit})", a.out.display());
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
