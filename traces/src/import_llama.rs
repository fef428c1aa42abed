//! Importer for llama.cpp MoE trace rows (`--format llama-moe-trace`).
//!
//! The rows are `layer,expert`, one per selected expert, in the order llama.cpp evaluates
//! them (a header line naming the two columns is optional; any further columns are ignored).
//! There is no token index, so tokens are reconstructed from `--top-k` and the layer order:
//! llama.cpp evaluates a batch layer by layer, so one forward pass over n tokens gives, for
//! each MoE layer in increasing order, a run of n x top_k rows (token after token, each
//! token's top-k in router order). A pass ends where the layer number goes back.
//!
//! Passes become sequences: a pass over more than one token is prompt (prefill) work and
//! starts a new sequence unless the previous pass was prefill too (a long prompt split into
//! micro-batches); a pass over one token is a decode step of the current sequence. Sequences
//! are named `sequence-0`, `sequence-1`, ... The trace records the passes (each pass one
//! run of its sequence's next n tokens), which `sim` replays as steps. With a single MoE
//! layer passes cannot be told apart: the whole input is one pass and none is recorded.

use crate::error::TraceError;
use crate::import_arrays::{build_from_requests, RequestRouting};
use crate::import_rows::RowImportOptions;
use crate::model::{Pass, PassRun};
use crate::trace::Trace;
use std::io::BufRead;
use std::path::Path;

/// Consecutive rows of one layer: (layer, first input line, expert ids).
type Run = (u64, u64, Vec<i64>);

/// Import a llama.cpp MoE trace file.
pub fn import_llama_moe_trace(path: &Path, opts: &RowImportOptions) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| TraceError::io(&file, "opening", e))?;
    parse_llama_moe_trace(std::io::BufReader::new(f), &file, opts)
}

/// Import llama.cpp MoE trace rows from any buffered reader; `file` names it in errors.
pub fn parse_llama_moe_trace(
    input: impl BufRead,
    file: &str,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    let err = |line: u64, detail: String| TraceError::Import {
        file: file.to_string(),
        location: if line == 0 {
            "options".into()
        } else {
            format!("line {line}")
        },
        detail,
    };
    let top_k = opts.top_k.ok_or_else(|| {
        err(0, "the rows carry no token index: give --top-k K (experts per token and layer, e.g. 8 for Qwen3-30B-A3B) to rebuild the tokens".into())
    })? as usize;
    let runs = read_runs(input, file)?;
    let passes = split_passes(runs);
    let Some(first) = passes.first() else {
        return Err(err(0, "no rows".into()));
    };
    let layers: Vec<u64> = first.iter().map(|r| r.0).collect();
    let mut sequences: Vec<(u64, Vec<i64>, u64)> = Vec::new(); // (prompt tokens, ids, first line)
                                                               // each pass: n tokens of the sequence current then
    let mut recorded: Vec<Pass> = Vec::with_capacity(passes.len());
    let mut last_was_prefill = false;
    for pass in &passes {
        let line = pass[0].1;
        let got: Vec<u64> = pass.iter().map(|r| r.0).collect();
        if got != layers {
            return Err(err(
                line,
                format!(
                    "this pass evaluates layers {got:?} but the first pass evaluates {layers:?}"
                ),
            ));
        }
        let rows = pass[0].2.len();
        if rows % top_k != 0 {
            return Err(err(
                line,
                format!(
                    "layer {} has {rows} rows here, not a multiple of top-{top_k}: check --top-k",
                    pass[0].0
                ),
            ));
        }
        if let Some(r) = pass.iter().find(|r| r.2.len() != rows) {
            return Err(err(r.1, format!("layer {} has {} rows but layer {} of the same pass has {rows}: every layer of a pass covers the same tokens", r.0, r.2.len(), pass[0].0)));
        }
        let n = rows / top_k;
        let prefill = n > 1;
        if sequences.is_empty() || (prefill && !last_was_prefill) {
            sequences.push((0, Vec::new(), line));
        }
        recorded.push(Pass {
            runs: vec![PassRun {
                sequence: (sequences.len() - 1) as u32,
                tokens: u32::try_from(n).map_err(|_| {
                    err(
                        line,
                        format!("a pass of {n} tokens, more than a trace records"),
                    )
                })?,
            }],
        });
        let seq = sequences.last_mut().expect("pushed above");
        if prefill {
            seq.0 += n as u64;
        }
        for t in 0..n {
            for r in pass {
                seq.1.extend_from_slice(&r.2[t * top_k..(t + 1) * top_k]);
            }
        }
        last_was_prefill = prefill;
    }
    let requests = sequences
        .into_iter()
        .enumerate()
        .map(|(i, (prompt, ids, line))| RequestRouting {
            name: format!("sequence-{i}"),
            location: format!("sequence-{i} (from line {line})"),
            prompt_tokens: prompt,
            shape: [ids.len() / (top_k * layers.len()), layers.len(), top_k],
            ids,
        })
        .collect();
    let last = *layers.last().expect("a pass has a layer");
    if last >= crate::format::MAX_LAYERS as u64 {
        return Err(err(
            first[first.len() - 1].1,
            format!(
                "layer {last} is beyond the {} layers a trace may have",
                crate::format::MAX_LAYERS
            ),
        ));
    }
    let placement: Vec<usize> = layers.iter().map(|&l| l as usize).collect();
    let mut trace = build_from_requests(requests, file, "llama-moe-trace", Some(&placement), opts)?;
    // with one MoE layer the passes cannot be told apart: none is recorded
    if layers.len() > 1 {
        trace.header.passes = Some(recorded);
    }
    Ok(trace)
}

/// Read the rows, grouping consecutive rows of one layer into runs.
fn read_runs(input: impl BufRead, file: &str) -> Result<Vec<Run>, TraceError> {
    let mut runs: Vec<Run> = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line_no = i as u64 + 1;
        let text = line.map_err(|e| TraceError::io(file, "reading", e))?;
        let text = text.trim_start_matches('\u{feff}').trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let mut cols = text.split(',').map(str::trim);
        let (l, e) = (cols.next().unwrap_or(""), cols.next().unwrap_or(""));
        if line_no == 1 && l == "layer" && e == "expert" {
            continue;
        }
        let parse = |s: &str, what: &str| {
            crate::import_fields::parse_uint(s, what, "an integer >= 0").map_err(|d| {
                TraceError::Import {
                    file: file.to_string(),
                    location: format!("line {line_no}"),
                    detail: format!("{d} (expected rows `layer,expert`)"),
                }
            })
        };
        let (layer, expert) = (parse(l, "layer")?, parse(e, "expert")?);
        let expert = i64::try_from(expert).unwrap_or(i64::MAX);
        match runs.last_mut() {
            Some(run) if run.0 == layer => run.2.push(expert),
            _ => runs.push((layer, line_no, vec![expert])),
        }
    }
    Ok(runs)
}

/// Split runs into passes: a pass ends where the layer does not increase.
fn split_passes(runs: Vec<Run>) -> Vec<Vec<Run>> {
    let mut passes: Vec<Vec<Run>> = Vec::new();
    for run in runs {
        match passes.last_mut() {
            Some(p) if p.last().is_some_and(|last| last.0 < run.0) => p.push(run),
            _ => passes.push(vec![run]),
        }
    }
    passes
}
