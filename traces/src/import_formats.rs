//! The registry of import formats (`sim trace import --format`): the one list that the CLI's
//! dispatch, its `--help` value lists and the docs check read. Adding a format is its
//! importer plus one entry in [`IMPORT_FORMATS`].

use crate::error::TraceError;
use crate::import_onnx::OnnxGenaiImport;
use crate::import_rows::RowImportOptions;
use crate::trace::Trace;
use std::path::Path;

/// What kind of file a format reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// One JSON document.
    JsonDocument,
    /// CSV text with a header row.
    Csv,
    /// JSON Lines: one object per line.
    JsonLines,
    /// NumPy arrays: one `.npy`, a directory of them, or one `.npz` archive.
    NumPy,
    /// Plain text rows, comma-separated, without a required header.
    TextRows,
}

/// What an import produces, which decides the output files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportOutput {
    /// One trace per prompt, named by the prompt key, plus `all` with every prompt.
    PerPrompt,
    /// One trace, named after the input file.
    OneTrace,
}

/// The traces of one import.
#[derive(Clone, Debug, PartialEq)]
pub enum Imported {
    /// [`ImportOutput::PerPrompt`]: the per-prompt traces and the combined one.
    PerPrompt(OnnxGenaiImport),
    /// [`ImportOutput::OneTrace`].
    OneTrace(Trace),
}

/// One input format of `sim trace import`.
#[derive(Clone, Copy, Debug)]
pub struct ImportFormat {
    /// The `--format` name.
    pub name: &'static str,
    /// Other names `--format` accepts.
    pub aliases: &'static [&'static str],
    /// One line on the format (no trailing period); `--help` lists it.
    pub summary: &'static str,
    /// What kind of file it reads.
    pub file_kind: FileKind,
    /// What it produces.
    pub output: ImportOutput,
    /// The format-specific flags it reads (beyond the model and provenance flags every
    /// format reads); the CLI refuses the others for this format.
    pub flags: &'static [&'static str],
    /// Read and convert the file.
    pub import: fn(&Path, &RowImportOptions) -> Result<Imported, TraceError>,
}

/// Every import format, in the order `--help` lists them.
pub const IMPORT_FORMATS: &[ImportFormat] = &[
    ImportFormat {
        name: "onnx-genai-json",
        aliases: &[],
        summary: "The onnx-genai router-trace JSON (one object with `prompts`), e.g. the granite \
                  trace",
        file_kind: FileKind::JsonDocument,
        output: ImportOutput::PerPrompt,
        flags: &[],
        import: |path, opts| {
            crate::import_onnx::import_onnx_genai_json(path, &opts.common).map(Imported::PerPrompt)
        },
    },
    ImportFormat {
        name: "csv",
        aliases: &[],
        summary: "CSV rows `sequence,phase,token,layer,experts[,weights]` (see traces/FORMAT.md)",
        file_kind: FileKind::Csv,
        output: ImportOutput::OneTrace,
        flags: ROW_FLAGS,
        import: |path, opts| crate::import_rows::import_csv(path, opts).map(Imported::OneTrace),
    },
    ImportFormat {
        name: "jsonl",
        aliases: &[],
        summary: "JSON Lines rows `{\"sequence\",\"phase\",\"token\",\"layer\",\"experts\"[,\"weights\"]}`",
        file_kind: FileKind::JsonLines,
        output: ImportOutput::OneTrace,
        flags: ROW_FLAGS,
        import: |path, opts| crate::import_rows::import_jsonl(path, opts).map(Imported::OneTrace),
    },
    ImportFormat {
        name: "vllm-routed-experts",
        aliases: &["vllm"],
        summary: "vLLM's RequestOutput.routed_experts saved with numpy.save: a .npy [tokens, \
                  layers, top_k] per request, a directory of them or one .npz",
        file_kind: FileKind::NumPy,
        output: ImportOutput::OneTrace,
        flags: &["--num-experts", "--prompt-tokens", "--prompt-lengths"],
        import: |path, opts| {
            crate::import_vllm::import_vllm_routed_experts(path, opts).map(Imported::OneTrace)
        },
    },
    ImportFormat {
        name: "sglang-routed-experts",
        aliases: &["sglang"],
        summary: "SGLang responses with meta_info.routed_experts (base64 int32 [tokens, layers, \
                  top_k]), one JSON response per line",
        file_kind: FileKind::JsonLines,
        output: ImportOutput::OneTrace,
        flags: &["--num-experts", "--moe-layers", "--top-k", "--prompt-tokens"],
        import: |path, opts| {
            crate::import_sglang::import_sglang_routed_experts(path, opts).map(Imported::OneTrace)
        },
    },
    ImportFormat {
        name: "stratamoe-router-trace",
        aliases: &["stratamoe"],
        summary: "StrataMoE RouterTrace v2 JSON (selections[token][layer][rank] and its source \
                  provenance), one sequence",
        file_kind: FileKind::JsonDocument,
        output: ImportOutput::OneTrace,
        flags: &["--prompt-tokens"],
        import: |path, opts| {
            crate::import_strata::import_strata_router_trace(path, opts).map(Imported::OneTrace)
        },
    },
    ImportFormat {
        name: "llama-moe-trace",
        aliases: &["llama"],
        summary: "llama.cpp MoE trace rows `layer,expert` in evaluation order (tokens rebuilt \
                  from --top-k and the layer order)",
        file_kind: FileKind::TextRows,
        output: ImportOutput::OneTrace,
        flags: &["--num-experts", "--top-k"],
        import: |path, opts| {
            crate::import_llama::import_llama_moe_trace(path, opts).map(Imported::OneTrace)
        },
    },
];

/// The flags the CSV and JSON Lines row importers read.
const ROW_FLAGS: &[&str] = &[
    "--num-experts",
    "--num-layers",
    "--map",
    "--where",
    "--drop-warmup",
];

/// The import format called `name` (or an alias of it).
pub fn import_format(name: &str) -> Option<&'static ImportFormat> {
    IMPORT_FORMATS
        .iter()
        .find(|f| f.name == name || f.aliases.contains(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        let mut seen = std::collections::HashSet::new();
        for f in IMPORT_FORMATS {
            for n in std::iter::once(&f.name).chain(f.aliases) {
                assert!(seen.insert(*n), "{n} is registered twice");
                assert_eq!(import_format(n).unwrap().name, f.name);
            }
            assert!(!f.summary.ends_with('.'), "{}", f.name);
        }
        assert!(import_format("parquet").is_none());
    }
}
