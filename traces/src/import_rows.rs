//! Importer for row-per-selection traces in CSV or JSON Lines, the generic way to bring
//! selections recorded by any tool into the trace format.
//!
//! One row per (sequence, phase, token, MoE layer):
//!
//! | field      | type                    | meaning |
//! |------------|-------------------------|---------|
//! | `sequence` | string (or JSON number) | sequence name; sequences are ordered by first appearance |
//! | `phase`    | `prefill` or `decode`   | optional; default `decode` |
//! | `token`    | integer >= 0            | token index inside that phase of that sequence; when the input has no token field, tokens are numbered in row order within each (sequence, phase, layer) |
//! | `layer`    | integer >= 0            | model layer index (layers never named are dense) |
//! | `experts`  | ids                     | the top-k expert ids in router order (CSV: separated by spaces or `;`; JSONL: an array) |
//! | `weights`  | floats                  | optional router weights, same count as `experts`; all rows or none |
//!
//! The input's own field names map onto these with [`FieldMap`] (`--map`), rows are kept or
//! skipped by [`RowFilter`]s (`--where`), and the value rules shared by both formats are in
//! [`crate::import_fields`]; reading is in [`crate::import_rows_read`].
//!
//! Rows may come in any order. Each named layer must have the same number of ids in every
//! row (its top-k); every token of a (sequence, phase) must be present from 0 up to its count
//! with every named layer exactly once. Experts per layer are `--num-experts` when given,
//! else the largest id seen + 1 (the same for every MoE layer); layers are `--num-layers`
//! when given, else the largest layer index + 1, refused when that leaves most layers
//! without rows. Without a token field, every recorded layer of a (sequence, phase) must
//! have as many rows as the others (see `import_rows_check.rs`).

use crate::error::TraceError;
use crate::import_fields::{FieldMap, RowFilter};
use crate::import_onnx::ImportOptions;
use crate::import_rows_read::{read_csv, read_jsonl, RowSink};
use crate::model::{Header, LayerSpec, SequenceInfo};
use crate::trace::{Phase, SequenceData, TokenBlock, Trace};
use std::io::BufRead;
use std::path::Path;

/// Options of the row importers beyond [`ImportOptions`].
#[derive(Clone, Debug, Default)]
pub struct RowImportOptions {
    /// Model name, provenance and geometry the rows do not carry.
    pub common: ImportOptions,
    /// Routed experts per MoE layer; default: the largest id seen + 1.
    pub num_experts: Option<u16>,
    /// CSV/JSONL: which input field holds which row field (`--map`).
    pub map: FieldMap,
    /// CSV/JSONL: keep only rows whose fields hold these values (`--where`, all must hold).
    pub filters: Vec<RowFilter>,
    /// CSV/JSONL: remove vLLM's profiling dummy batch, the first sequence (`--drop-warmup`).
    pub drop_warmup: bool,
    /// Engine arrays: prompt tokens of every request (`--prompt-tokens`), when the input
    /// does not say.
    pub prompt_tokens: Option<u64>,
    /// vLLM arrays: a JSON or CSV file of prompt lengths by request (`--prompt-lengths`).
    pub prompt_lengths: Option<std::path::PathBuf>,
    /// SGLang: MoE layers in each flat routed-experts array (`--moe-layers`).
    pub moe_layers: Option<usize>,
    /// SGLang and llama.cpp: experts selected per token and layer (`--top-k`).
    pub top_k: Option<u16>,
    /// CSV/JSONL: the model's layers (`--num-layers`); default: the largest layer index + 1,
    /// refused when that leaves most layers without rows.
    pub num_layers: Option<usize>,
}

/// One parsed row, whatever the input format.
pub(crate) struct Row {
    /// Line number in the input (1-based), for errors.
    pub(crate) line: u64,
    pub(crate) sequence: usize,
    pub(crate) phase: Phase,
    pub(crate) token: u64,
    pub(crate) layer: usize,
    pub(crate) experts: Vec<u16>,
    pub(crate) weights: Option<Vec<f32>>,
}

/// Import a CSV file with a header row naming the columns above.
pub fn import_csv(path: impl AsRef<Path>, opts: &RowImportOptions) -> Result<Trace, TraceError> {
    let file = path.as_ref().display().to_string();
    let f = std::fs::File::open(path.as_ref()).map_err(|e| TraceError::io(&file, "opening", e))?;
    parse_csv(f, &file, opts)
}

/// Import CSV text from any reader; `file` names it in errors.
pub fn parse_csv(
    input: impl std::io::Read,
    file: &str,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    let mut sink = RowSink::new(opts, file);
    read_csv(input, &mut sink)?;
    finish(sink, file, "csv", opts)
}

/// Import a JSON Lines file, one object per line (blank lines are skipped).
pub fn import_jsonl(path: impl AsRef<Path>, opts: &RowImportOptions) -> Result<Trace, TraceError> {
    let file = path.as_ref().display().to_string();
    let f = std::fs::File::open(path.as_ref()).map_err(|e| TraceError::io(&file, "opening", e))?;
    parse_jsonl(std::io::BufReader::new(f), &file, opts)
}

/// Import JSON Lines from any buffered reader; `file` names it in errors.
pub fn parse_jsonl(
    input: impl BufRead,
    file: &str,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    let mut sink = RowSink::new(opts, file);
    read_jsonl(input, &mut sink)?;
    finish(sink, file, "jsonl", opts)
}

/// What starts the `--drop-warmup` note in a trace's `provenance.tool`.
const WARMUP_MARK: &str = "warm-up: ";

/// The `--drop-warmup` note an import left in `provenance.tool` (what it dropped and why),
/// if any.
pub fn warmup_note(p: &crate::Provenance) -> Option<&str> {
    p.tool.split_once(WARMUP_MARK).map(|(_, note)| note)
}

/// Cut the rows into forward passes when their position field restarts at each pass
/// ([`crate::import_passes`]), drop the warmup batch or passes when asked, then build the
/// trace.
fn finish(
    sink: RowSink<'_>,
    file: &str,
    format: &str,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    if sink.rows.is_empty() && sink.filtered > 0 {
        let filters: Vec<String> = opts
            .filters
            .iter()
            .map(|f| format!("--where {}={}", f.field, f.value))
            .collect();
        return Err(TraceError::Import {
            file: file.to_string(),
            location: "input".into(),
            detail: format!(
                "no rows: {} skipped every one of the {} rows",
                filters.join(" "),
                sink.filtered
            ),
        });
    }
    let numbered = sink.tokens_numbered();
    let (mut rows, mut names) = (sink.rows, sink.names);
    if crate::import_passes::restarts(&rows) {
        let p = crate::import_passes::split(rows, names, opts.drop_warmup, sink.phase_given)
            .map_err(|(line, detail)| at_line(file, line, detail))?;
        let mut trace = build(p.rows, p.names, file, format, opts)?;
        if let Some(note) = p.warmup {
            trace.header.provenance.tool =
                format!("{}; {WARMUP_MARK}{note}", trace.header.provenance.tool);
        }
        trace.header.passes = Some(p.passes);
        trace.check().map_err(|d| TraceError::Import {
            file: file.to_string(),
            location: "rows".into(),
            detail: d,
        })?;
        return Ok(trace);
    }
    if opts.drop_warmup && !rows.is_empty() {
        crate::import_warmup::drop_warmup(&mut rows, &mut names).map_err(|detail| {
            TraceError::Import {
                file: file.to_string(),
                location: "rows".into(),
                detail,
            }
        })?;
    }
    if numbered {
        // A corrupt layer index is named as such before it shows as a layer short of rows.
        crate::import_rows_check::check_layer_span(
            &rows,
            opts.num_layers,
            &opts.common.unrecorded_layers,
            file,
        )?;
        crate::import_rows_check::check_layer_rounds(&rows, &names, file)?;
    }
    build(rows, names, file, format, opts)
}

/// Infer the geometry, check completeness and assemble the trace.
fn build(
    mut rows: Vec<Row>,
    names: Vec<String>,
    file: &str,
    format: &str,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    if rows.is_empty() {
        return Err(TraceError::Import {
            file: file.to_string(),
            location: "input".into(),
            detail: "no rows".into(),
        });
    }
    let geometry = Geometry::infer(&rows, file, opts)?;
    let common = &opts.common;
    let model = common
        .model("unknown", geometry.layers)
        .map_err(|detail| TraceError::Import {
            file: file.to_string(),
            location: "options".into(),
            detail,
        })?;
    crate::format::validate_geometry(&model, file)?;
    let ks = crate::trace::KeySpace::new(&model);
    // MoE index of each model layer.
    let mut moe_index = vec![usize::MAX; geometry.num_layers];
    for (m, &l) in ks.moe_layers.iter().enumerate() {
        moe_index[l] = m;
    }
    rows.sort_by_key(|r| (r.sequence, r.phase, r.token, moe_index[r.layer]));
    let asm = Assembly {
        rows: &rows,
        names: &names,
        ks: &ks,
        moe_index: &moe_index,
        file,
    };
    let (infos, datas) = asm.sequences(geometry.has_weights)?;
    let trace = Trace {
        header: Header {
            model,
            provenance: common.provenance(file, format, names),
            sequences: infos,
            has_weights: geometry.has_weights,
            passes: None,
        },
        sequences: datas,
    };
    // Ids in range and no repeats (message names sequence, phase, token and layer).
    trace.check().map_err(|d| TraceError::Import {
        file: file.to_string(),
        location: "rows".into(),
        detail: d,
    })?;
    Ok(trace)
}

/// An import error at input line `line` of `file`.
fn at_line(file: &str, line: u64, detail: String) -> TraceError {
    TraceError::Import {
        file: file.to_string(),
        location: format!("line {line}"),
        detail,
    }
}

/// The model geometry the rows imply.
struct Geometry {
    /// Model layers: the named ones with their top-k, the others dense.
    layers: Vec<LayerSpec>,
    /// `--num-layers`, else the largest layer named + 1.
    num_layers: usize,
    /// Whether the rows carry router weights (all of them or none).
    has_weights: bool,
}

impl Geometry {
    /// Top-k per named layer (from the first row naming it), experts per layer, and the
    /// checks that every row agrees with them.
    fn infer(rows: &[Row], file: &str, opts: &RowImportOptions) -> Result<Self, TraceError> {
        let at = |line: u64, detail: String| at_line(file, line, detail);
        if let Some(r) = rows.iter().find(|r| r.layer >= crate::format::MAX_LAYERS) {
            return Err(at(
                r.line,
                format!(
                    "layer {} is beyond the {} layers a trace may have",
                    r.layer,
                    crate::format::MAX_LAYERS
                ),
            ));
        }
        let num_layers = crate::import_rows_check::check_layer_span(
            rows,
            opts.num_layers,
            &opts.common.unrecorded_layers,
            file,
        )?;
        let has_weights = rows[0].weights.is_some();
        let (top_k, max_id) = top_k_per_layer(rows, num_layers, has_weights, file)?;
        let experts = experts_per_layer(rows, max_id, file, opts)?;
        let layers = top_k
            .iter()
            .map(|k| match k {
                Some((k, _)) => LayerSpec {
                    experts,
                    top_k: *k,
                    shared_experts: 0,
                },
                None => LayerSpec {
                    experts: 0,
                    top_k: 0,
                    shared_experts: 0,
                },
            })
            .collect();
        Ok(Geometry {
            layers,
            num_layers,
            has_weights,
        })
    }
}

/// A layer's top-k and the input line that first named it.
type TopK = (u16, u64);

/// Per model layer, its top-k and the line first naming it (`None`: never named), checking
/// every row's selection against it and its weights against `has_weights`; and the largest
/// expert id seen.
fn top_k_per_layer(
    rows: &[Row],
    num_layers: usize,
    has_weights: bool,
    file: &str,
) -> Result<(Vec<Option<TopK>>, u16), TraceError> {
    let at = |line: u64, detail: String| at_line(file, line, detail);
    let mut top_k: Vec<Option<TopK>> = vec![None; num_layers];
    let mut max_id = 0u16;
    for r in rows {
        let k = u16::try_from(r.experts.len()).map_err(|_| {
            at(
                r.line,
                format!("{} expert ids in one selection", r.experts.len()),
            )
        })?;
        if k == 0 {
            return Err(at(r.line, "empty expert list".into()));
        }
        match top_k[r.layer] {
            None => top_k[r.layer] = Some((k, r.line)),
            Some((k0, line0)) if k0 != k => {
                return Err(at(
                    r.line,
                    format!("layer {} has {k} expert ids here but {k0} on line {line0}; top-k must be constant per layer", r.layer),
                ))
            }
            _ => {}
        }
        if r.weights.is_some() != has_weights {
            return Err(at(
                r.line,
                "router weights must be given on every row or on none".into(),
            ));
        }
        if let Some(w) = &r.weights {
            if w.len() != r.experts.len() {
                return Err(at(
                    r.line,
                    format!("{} weights for {} expert ids", w.len(), r.experts.len()),
                ));
            }
        }
        max_id = max_id.max(r.experts.iter().copied().max().unwrap_or(0));
    }
    Ok((top_k, max_id))
}

/// Routed experts per MoE layer: `--num-experts` (every id checked below it), else the
/// largest id seen + 1.
fn experts_per_layer(
    rows: &[Row],
    max_id: u16,
    file: &str,
    opts: &RowImportOptions,
) -> Result<u16, TraceError> {
    let at = |line: u64, detail: String| at_line(file, line, detail);
    let experts = match opts.num_experts {
        Some(e) => e,
        None => max_id.checked_add(1).ok_or_else(|| {
            at(
                rows.iter()
                    .find(|r| r.experts.contains(&u16::MAX))
                    .map_or(0, |r| r.line),
                "expert id 65535 needs 65,536 experts, more than the format's u16 ids allow".into(),
            )
        })?,
    };
    // With --num-experts given, an id at or above it is named with its line here (the trace's
    // own check later knows only sequence, token and layer).
    if opts.num_experts.is_some() {
        if let Some((line, id)) = rows.iter().find_map(|r| {
            r.experts
                .iter()
                .find(|&&x| x >= experts)
                .map(|&x| (r.line, x))
        }) {
            return Err(at(
                line,
                format!(
                    "expert id {id} >= {experts} experts (--num-experts): ids run from 0 to {}",
                    experts.saturating_sub(1)
                ),
            ));
        }
    }
    Ok(experts)
}

/// Sorted rows (by sequence, phase, token, MoE layer) and what assembling them needs.
struct Assembly<'a> {
    rows: &'a [Row],
    names: &'a [String],
    ks: &'a crate::trace::KeySpace,
    /// MoE index of each model layer (`usize::MAX`: dense).
    moe_index: &'a [usize],
    file: &'a str,
}

impl Assembly<'_> {
    fn at(&self, line: u64, detail: String) -> TraceError {
        at_line(self.file, line, detail)
    }

    /// Each sequence's info and selections. Sorted rows come in groups of one per MoE layer
    /// per token; each group is checked complete.
    fn sequences(
        &self,
        has_weights: bool,
    ) -> Result<(Vec<SequenceInfo>, Vec<SequenceData>), TraceError> {
        let (rows, names) = (self.rows, self.names);
        let n_moe = self.ks.num_moe_layers();
        let mut infos: Vec<SequenceInfo> = names
            .iter()
            .map(|n| SequenceInfo {
                name: n.clone(),
                prefill_tokens: 0,
                decode_tokens: 0,
            })
            .collect();
        let mut datas: Vec<SequenceData> = names.iter().map(|_| SequenceData::default()).collect();
        if has_weights {
            for d in &mut datas {
                d.prefill.weights = Some(Vec::new());
                d.decode.weights = Some(Vec::new());
            }
        }
        let mut i = 0;
        while i < rows.len() {
            let first = &rows[i];
            let (s, phase, token) = (first.sequence, first.phase, first.token);
            let info = &mut infos[s];
            let count = match phase {
                Phase::Prefill => &mut info.prefill_tokens,
                Phase::Decode => &mut info.decode_tokens,
            };
            if token != *count {
                return Err(self.at(
                    first.line,
                    format!(
                        "sequence {:?} {phase}: token {token} present but token {} missing",
                        names[s], *count
                    ),
                ));
            }
            let block: &mut TokenBlock = match phase {
                Phase::Prefill => &mut datas[s].prefill,
                Phase::Decode => &mut datas[s].decode,
            };
            self.token(i, block)?;
            debug_assert_eq!(
                block.ids.len() as u64,
                (*count + 1) * self.ks.ids_per_token() as u64
            );
            *count += 1;
            i += n_moe;
        }
        Ok((infos, datas))
    }

    /// Append to `block` the token whose rows start at `rows[i]`: one row per MoE layer in
    /// order, each exactly once.
    fn token(&self, i: usize, block: &mut TokenBlock) -> Result<(), TraceError> {
        let (rows, names, ks) = (self.rows, self.names, self.ks);
        let n_moe = ks.num_moe_layers();
        let first = &rows[i];
        let (s, phase, token) = (first.sequence, first.phase, first.token);
        for m in 0..n_moe {
            let r = rows
                .get(i + m)
                .filter(|r| r.sequence == s && r.phase == phase && r.token == token);
            let Some(r) = r else {
                return Err(self.at(
                    first.line,
                    format!(
                        "sequence {:?} {phase} token {token}: layer {} missing",
                        names[s], ks.moe_layers[m]
                    ),
                ));
            };
            if self.moe_index[r.layer] != m {
                return Err(self.at(
                    r.line,
                    format!("sequence {:?} {phase} token {token}: layer {} given twice (or layer {} missing)", names[s], r.layer, ks.moe_layers[m]),
                ));
            }
            block.ids.extend_from_slice(&r.experts);
            if let (Some(dst), Some(w)) = (block.weights.as_mut(), &r.weights) {
                dst.extend_from_slice(w);
            }
        }
        if let Some(r) = rows
            .get(i + n_moe)
            .filter(|r| r.sequence == s && r.phase == phase && r.token == token)
        {
            return Err(self.at(
                r.line,
                format!(
                    "sequence {:?} {phase} token {token}: layer {} given twice",
                    names[s], r.layer
                ),
            ));
        }
        Ok(())
    }
}
