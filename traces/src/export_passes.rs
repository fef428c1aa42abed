//! CSV export of a trace that records forward passes: its rows are written as the hook log
//! they would come from, pass after pass, each pass's rows of one MoE layer after another
//! (layer order), `token` the row's position in its pass (0, 1, ... restarting at each
//! pass, as a router hook's `token_idx`), and a last column `pass` numbering the passes
//! from 0. The CSV importer reads such rows back as passes (`traces/FORMAT.md`, "Forward
//! passes in rows"), so importing the export reproduces the sequences, their tokens and the
//! passes.
//!
//! Memory: the rows are reordered, so the selected tokens are held while they are written
//! (the trace's ids and weights as text); traces with passes come from serving logs.

use crate::error::TraceError;
use crate::model::Pass;
use crate::reader::TraceReader;
use crate::trace::{Phase, PhaseSel};
use std::io::Read;

/// One token of the trace as export rows: its phase and, per MoE layer, its ids and weights
/// joined by spaces.
#[derive(Clone)]
struct TokenText {
    phase: Phase,
    layers: Vec<(String, Option<String>)>,
}

/// Every token of `phases` per sequence (payload order; a token of another phase is `None`,
/// so that a pass's runs index them).
fn tokens<R: Read>(
    reader: &mut TraceReader<R>,
    phases: PhaseSel,
    moe_layers: usize,
) -> Result<Vec<Vec<Option<TokenText>>>, TraceError> {
    let mut out: Vec<Vec<Option<TokenText>>> = vec![Vec::new(); reader.header().sequences.len()];
    while let Some(tok) = reader.next_token()? {
        let text = phases.includes(tok.pos.phase).then(|| TokenText {
            phase: tok.pos.phase,
            layers: (0..moe_layers)
                .map(|m| {
                    (
                        super::export::join(tok.selection(m)),
                        tok.selection_weights(m).map(super::export::join),
                    )
                })
                .collect(),
        });
        out[tok.pos.sequence].push(text);
    }
    Ok(out)
}

/// Write the rows of `passes` (see the module documentation) with `write(record)`; returns
/// the rows written.
pub(crate) fn write_rows<R: Read>(
    reader: &mut TraceReader<R>,
    phases: PhaseSel,
    passes: &[Pass],
    mut write: impl FnMut(Vec<String>) -> Result<(), TraceError>,
) -> Result<u64, TraceError> {
    let names: Vec<String> = reader
        .header()
        .sequences
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let layers = reader.keyspace().moe_layers.clone();
    let toks = tokens(reader, phases, layers.len())?;
    let mut taken = vec![0usize; names.len()];
    let mut rows = 0u64;
    let mut pass_no = 0u64;
    for pass in passes {
        // the pass's kept tokens: (sequence, its token)
        let mut held: Vec<(usize, &TokenText)> = Vec::new();
        for run in &pass.runs {
            let s = run.sequence as usize;
            let end = taken[s] + run.tokens as usize;
            held.extend(toks[s][taken[s]..end].iter().flatten().map(|t| (s, t)));
            taken[s] = end;
        }
        if held.is_empty() {
            continue;
        }
        for (m, layer) in layers.iter().enumerate() {
            for (pos, (s, t)) in held.iter().enumerate() {
                let (ids, weights) = &t.layers[m];
                let mut rec = vec![
                    names[*s].clone(),
                    t.phase.to_string(),
                    pos.to_string(),
                    layer.to_string(),
                    ids.clone(),
                ];
                rec.extend(weights.clone());
                rec.push(pass_no.to_string());
                write(rec)?;
                rows += 1;
            }
        }
        pass_no += 1;
    }
    Ok(rows)
}
