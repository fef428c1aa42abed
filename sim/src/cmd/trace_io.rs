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
    /// csv/jsonl only: experts per layer, when the largest id seen + 1 would understate it.
    #[arg(long)]
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
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("creating the output directory {}", a.out.display()))?;
    match a.format {
        ImportFormat::OnnxGenaiJson => {
            let imported = traces::import_onnx_genai_json(&a.file, &opts)?;
            for (key, trace) in &imported.prompts {
                check_file_stem(key)?;
                write(&a.out.join(format!("{key}.bin")), trace)?;
            }
            write(&a.out.join("all.bin"), &imported.all)?;
        }
        ImportFormat::Csv | ImportFormat::Jsonl => {
            bail!("--format csv/jsonl is not available yet")
        }
    }
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
        "wrote {} ({} sequences, {tokens} tokens)",
        path.display(),
        trace.sequences.len()
    );
    Ok(())
}
