//! MoE router traces: which experts each MoE layer's router selected for each token.
//!
//! This crate owns the trace data model ([`Header`], [`Trace`]), the versioned binary format
//! (see `FORMAT.md`), the streaming reader and the atomic writer, importers (listed in the
//! [`import_formats`] registry) and exporters,
//! the synthetic generator and trace statistics. It knows nothing about GPUs, paging mechanisms
//! or eviction policies: those live in the `policies` and `sim` crates.

pub mod cleanup;
pub mod config_geometry;
pub mod error;
pub mod export;
mod export_passes;
pub mod file_mode;
pub mod format;
mod format_layouts;
pub mod gen;
pub mod hf_config;
mod hf_config_families;
mod import_arrays;
pub mod import_fields;
pub mod import_formats;
pub mod import_llama;
pub mod import_memory;
mod import_model;
pub mod import_onnx;
mod import_passes;
pub mod import_rows;
mod import_rows_check;
mod import_rows_read;
pub mod import_sglang;
pub mod import_strata;
pub mod import_vllm;
mod import_warmup;
pub mod model;
pub mod presets;
pub mod reader;
pub mod resources;
pub mod stats;
pub mod trace;
pub mod utf8_text;
pub mod writer;

pub use model::{
    DType, Header, LayerSpec, ModelSpec, Pass, PassRun, Provenance, SequenceInfo,
    GATED_EXPERT_MATRICES,
};
pub use trace::{KeySpace, Phase, PhaseSel, SequenceData, TokenBlock, Trace};

pub use error::{TokenPos, TraceError};
pub use import_fields::{FieldMap, RowField, RowFilter};
pub use import_formats::{
    import_format, FileKind, ImportFormat, ImportOutput, Imported, IMPORT_FORMATS,
};
pub use import_onnx::{import_onnx_genai_json, ImportOptions, OnnxGenaiImport};
pub use import_rows::{import_csv, import_jsonl, RowImportOptions};
pub use reader::{read_bytes, read_file, read_header, TokenRef, TraceReader};
pub use writer::{write_file, TraceWriter};
