//! Checks of imported rows that catch silent corruption before the trace is assembled:
//! without a token field, every recorded layer of a (sequence, phase) must have as many rows
//! as every other at each round of layers ([`check_layer_rounds`]); and a layer index far
//! past the layers the rows record must be confirmed by `--num-layers`
//! ([`check_layer_span`]).

use crate::error::TraceError;
use crate::import_rows::Row;
use crate::trace::Phase;
use std::collections::{BTreeMap, HashMap};

/// Per (sequence, phase) while the rows are walked in input order.
struct Rounds {
    /// The layer of its first row: a row of it after a row of another layer starts a round.
    first_layer: usize,
    previous_layer: usize,
    /// Rows so far per recorded layer (indexed as `recorded`), and the line of the last one.
    rows: Vec<u64>,
    last_line: Vec<u64>,
}

/// Without a token field the k-th row of each layer is token k, so a lost or duplicated row
/// silently shifts that layer against the others. Rows of one (sequence, phase) cycle through
/// its layers, one row each per token (or a pass's rows per layer, layer after layer): each
/// time the cycle returns to its first layer, and at the end, every layer the input records
/// must have the same number of rows. Refuse at the first line where they differ, naming
/// the layer that has more or fewer.
pub(crate) fn check_layer_rounds(
    rows: &[Row],
    names: &[String],
    file: &str,
) -> Result<(), TraceError> {
    let recorded: BTreeMap<usize, usize> = rows
        .iter()
        .map(|r| r.layer)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .enumerate()
        .map(|(i, l)| (l, i))
        .collect();
    let mut state: HashMap<(usize, Phase), Rounds> = HashMap::new();
    for r in rows {
        let s = state
            .entry((r.sequence, r.phase))
            .or_insert_with(|| Rounds {
                first_layer: r.layer,
                previous_layer: r.layer,
                rows: vec![0; recorded.len()],
                last_line: vec![0; recorded.len()],
            });
        if r.layer == s.first_layer && s.previous_layer != s.first_layer {
            even(s, &recorded, (r.sequence, r.phase), names, file, r.line)?;
        }
        let i = recorded[&r.layer];
        s.rows[i] += 1;
        s.last_line[i] = r.line;
        s.previous_layer = r.layer;
    }
    let mut ends: Vec<_> = state.into_iter().collect();
    ends.sort_unstable_by_key(|((seq, phase), _)| (*seq, *phase));
    for (key, s) in &ends {
        let end = s.last_line.iter().copied().max().unwrap_or(0);
        even(s, &recorded, *key, names, file, end)?;
    }
    Ok(())
}

/// Every recorded layer has as many rows as the first layer, at `line`.
fn even(
    s: &Rounds,
    recorded: &BTreeMap<usize, usize>,
    (sequence, phase): (usize, Phase),
    names: &[String],
    file: &str,
    line: u64,
) -> Result<(), TraceError> {
    let want = s.rows[recorded[&s.first_layer]];
    let Some((&layer, &i)) = recorded.iter().find(|(_, &i)| s.rows[i] != want) else {
        return Ok(());
    };
    let (have, last) = (s.rows[i], s.last_line[i]);
    let what = if have > want {
        "one of them is duplicated or a row of the first layer is lost"
    } else {
        "one is lost or a row of the first layer is duplicated"
    };
    let last = if last > 0 {
        format!(" (its last one on line {last})")
    } else {
        String::new()
    };
    Err(TraceError::Import {
        file: file.to_string(),
        location: format!("line {line}"),
        detail: format!(
            "sequence {:?} {phase}: by this line layer {layer} has {have} rows{last} but layer \
             {} has {want}: {what}. Without a token field the k-th row of each layer is token k, \
             so every recorded layer needs one row per token; fix the log or give a token field \
             (--map token=NAME)",
            names[sequence], s.first_layer
        ),
    })
}

/// A layer index that leaves most of the model's layers without a row (e.g. a corrupt 60000
/// in a 24-layer log) is refused unless `--num-layers` gives the model's layers; with it, an
/// index at or past that count is refused. `listed` are the `--unrecorded-layers`, which are
/// not empty. Returns the model's layer count.
pub(crate) fn check_layer_span(
    rows: &[Row],
    num_layers: Option<usize>,
    listed: &[usize],
    file: &str,
) -> Result<usize, TraceError> {
    let Some(top) = rows
        .iter()
        .max_by_key(|r| (r.layer, std::cmp::Reverse(r.line)))
    else {
        return Ok(num_layers.unwrap_or(0));
    };
    let at = |detail: String| TraceError::Import {
        file: file.to_string(),
        location: format!("line {}", top.line),
        detail,
    };
    let Some(span) = top.layer.checked_add(1) else {
        return Err(at(format!(
            "layer {} is not a layer index: no model has that many layers",
            top.layer
        )));
    };
    if let Some(n) = num_layers {
        if top.layer >= n {
            return Err(at(format!(
                "layer {} is beyond the {n} layers of --num-layers (layers run from 0 to {})",
                top.layer,
                n - 1
            )));
        }
        return Ok(n);
    }
    let mut named: std::collections::BTreeSet<usize> = rows.iter().map(|r| r.layer).collect();
    named.extend(listed.iter().filter(|&&l| l < span));
    // "Most" layers empty: more than half, which no MoE model's log leaves (Switch
    // Transformers, MoE every other layer, leave exactly half dense).
    if 2 * named.len() < span {
        return Err(at(format!(
            "layer {} makes a model of {span} layers, of which only {} have rows: a corrupt layer \
             index? If the model really has {span} layers, say so with --num-layers {span}",
            top.layer,
            named.len()
        )));
    }
    Ok(span)
}
