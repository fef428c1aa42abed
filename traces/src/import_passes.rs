//! Forward passes in CSV and JSON Lines rows: a hook log whose position field restarts at
//! each engine forward pass, and `--drop-warmup` by pass.
//!
//! A logger hooked into an engine's router sees, per MoE layer, the selections of every row
//! of one forward pass (the prompt-chunk rows and decode rows of all the requests the pass
//! holds) and writes one row per (row of the pass, layer) with the row's index in the pass as
//! its position. Such a log names one (sequence, phase, token, layer) several times, which a
//! log of per-sequence tokens never does; that is how it is recognised ([`restarts`]). Its
//! rows are then cut into passes ([`split`]): a pass ends where a (layer, position) it
//! already holds comes again. Inside a pass every position from 0 on holds every recorded
//! layer exactly once and one sequence (and phase, when given) on all its layers.
//!
//! Without a phase field, a sequence's rows are prompt (prefill) rows up to and including its
//! last pass that holds more than one of its rows (a prompt chunk), and decode rows after.
//!
//! `--drop-warmup` drops warm-up passes whatever sequence they name: the passes before the
//! first real one (a pass with two rows that select different experts in some layer: vLLM's
//! profiling pass of identical dummy rows and its CUDA-graph capture passes come before it)
//! and any later pass of two or more rows that all select one expert set in every layer.

use crate::import_rows::Row;
use crate::model::{Pass, PassRun};
use crate::trace::Phase;
use std::collections::{BTreeMap, HashSet};

/// An error at an input line.
pub(crate) type LineError = (u64, String);

/// Rows cut into passes, warm-up dropped, tokens renumbered per sequence.
pub(crate) struct Passes {
    /// The kept rows, their `token` and `phase` set by pass order.
    pub(crate) rows: Vec<Row>,
    /// Names of the sequences that keep rows, in order of first appearance.
    pub(crate) names: Vec<String>,
    pub(crate) passes: Vec<Pass>,
    /// What `--drop-warmup` dropped, in words, when it was asked.
    pub(crate) warmup: Option<String>,
}

/// Whether the rows name some (sequence, phase, token, layer) more than once: a position
/// field that restarts at each forward pass.
pub(crate) fn restarts(rows: &[Row]) -> bool {
    let mut seen = HashSet::with_capacity(rows.len());
    !rows
        .iter()
        .all(|r| seen.insert((r.sequence, r.phase, r.token, r.layer)))
}

/// One row of a pass: its sequence and phase, and its input rows (one per layer).
struct Slot {
    sequence: usize,
    phase: Phase,
    rows: Vec<usize>,
}

/// One pass: its rows by position, and the line it starts on.
struct RawPass {
    line: u64,
    slots: Vec<Slot>,
}

/// Cut `rows` (input order) into passes and renumber their tokens; see the module
/// documentation. `phase_given`: whether the input has a phase field.
pub(crate) fn split(
    rows: Vec<Row>,
    names: Vec<String>,
    drop_warmup: bool,
    phase_given: bool,
) -> Result<Passes, LineError> {
    let layers: Vec<usize> = {
        let mut l: Vec<usize> = rows.iter().map(|r| r.layer).collect();
        l.sort_unstable();
        l.dedup();
        l
    };
    let mut raw = Vec::new();
    for cut in cut_passes(&rows) {
        raw.push(pass_slots(&rows, cut, &layers, phase_given)?);
    }
    let (mut kept, warmup) = if drop_warmup {
        let (kept, note) = drop_warmup_passes(&rows, raw, layers.len())?;
        (kept, Some(note))
    } else {
        (raw, None)
    };
    if !phase_given {
        infer_phases(&mut kept, names.len());
    }
    check_phase_order(&rows, &kept, &names)?;
    Ok(renumber(rows, names, kept, warmup))
}

/// Index ranges of `rows`, one per pass: a pass ends before a row whose (layer, position)
/// it already holds.
fn cut_passes(rows: &[Row]) -> Vec<std::ops::Range<usize>> {
    let mut cuts = Vec::new();
    let mut seen = HashSet::new();
    let mut start = 0;
    for (i, r) in rows.iter().enumerate() {
        if !seen.insert((r.layer, r.token)) {
            cuts.push(start..i);
            seen.clear();
            seen.insert((r.layer, r.token));
            start = i;
        }
    }
    cuts.push(start..rows.len());
    cuts
}

/// The slots of the pass of `rows[range]`: positions 0.. each with every layer once and one
/// sequence (and phase, when given).
fn pass_slots(
    rows: &[Row],
    range: std::ops::Range<usize>,
    layers: &[usize],
    phase_given: bool,
) -> Result<RawPass, LineError> {
    let line = rows[range.start].line;
    let mut by_pos: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for i in range {
        by_pos.entry(rows[i].token).or_default().push(i);
    }
    let mut slots = Vec::with_capacity(by_pos.len());
    for (expected, (pos, members)) in by_pos.into_iter().enumerate() {
        let first = &rows[members[0]];
        if pos != expected as u64 {
            return Err((
                first.line,
                format!(
                    "the forward pass starting on line {line} has position {pos} but no position {expected} (the position field restarts at each pass, so each pass must hold positions 0, 1, ... with every layer)"
                ),
            ));
        }
        if members.len() != layers.len() {
            let have: HashSet<usize> = members.iter().map(|&i| rows[i].layer).collect();
            let missing = layers.iter().find(|l| !have.contains(l)).copied();
            return Err((
                first.line,
                format!(
                    "the forward pass starting on line {line}: position {pos} lacks layer {} (every position of a pass holds every recorded layer)",
                    missing.unwrap_or_default()
                ),
            ));
        }
        if let Some(&o) = members.iter().find(|&&i| {
            rows[i].sequence != first.sequence || (phase_given && rows[i].phase != first.phase)
        }) {
            return Err((
                rows[o].line,
                format!(
                    "the forward pass starting on line {line}: position {pos} names another sequence or phase here than on line {} (a position is one row of the pass, the same on every layer)",
                    first.line
                ),
            ));
        }
        slots.push(Slot {
            sequence: first.sequence,
            phase: first.phase,
            rows: members,
        });
    }
    Ok(RawPass { line, slots })
}

/// The expert sets of a slot, layer by layer (its rows sorted by layer).
fn selections<'a>(rows: &'a [Row], slot: &Slot) -> Vec<(usize, &'a [u16])> {
    let mut v: Vec<(usize, &[u16])> = slot
        .rows
        .iter()
        .map(|&i| (rows[i].layer, rows[i].experts.as_slice()))
        .collect();
    v.sort_unstable_by_key(|&(l, _)| l);
    v
}

/// Whether a pass holds two or more rows that all select one expert set in every layer.
fn uniform(rows: &[Row], pass: &RawPass) -> bool {
    let first = selections(rows, &pass.slots[0]);
    pass.slots.len() >= 2 && pass.slots[1..].iter().all(|s| selections(rows, s) == first)
}

/// Drop the passes before the first real one and the uniform passes after it; the kept
/// passes and what was dropped, in words.
fn drop_warmup_passes(
    rows: &[Row],
    passes: Vec<RawPass>,
    layers: usize,
) -> Result<(Vec<RawPass>, String), LineError> {
    let first_real = passes
        .iter()
        .position(|p| p.slots.len() >= 2 && !uniform(rows, p))
        .ok_or_else(|| {
            (
                passes[0].line,
                format!(
                    "--drop-warmup: none of the {} forward passes has two rows that select different experts, so every pass looks like warm-up and nothing would be left; leave out --drop-warmup",
                    passes.len()
                ),
            )
        })?;
    let (mut before, mut uniform_later, mut dropped_rows) = (0usize, 0usize, 0usize);
    let mut kept = Vec::with_capacity(passes.len());
    for (i, p) in passes.into_iter().enumerate() {
        if i < first_real {
            before += 1;
        } else if uniform(rows, &p) {
            uniform_later += 1;
        } else {
            kept.push(p);
            continue;
        }
        dropped_rows += p.slots.len();
    }
    let note = format!(
        "--drop-warmup dropped {dropped_rows} rows of each of the {layers} recorded layers in {} forward passes: {before} before the first real pass (the profiling and CUDA-graph capture passes), {uniform_later} later passes whose rows all select one expert set",
        before + uniform_later
    );
    Ok((kept, note))
}

/// Without a phase field: a sequence's rows are prefill up to and including its last pass
/// holding more than one of its rows, decode after.
fn infer_phases(passes: &mut [RawPass], sequences: usize) {
    let mut last_chunk: Vec<Option<usize>> = vec![None; sequences];
    let mut count = vec![0usize; sequences];
    for (i, p) in passes.iter().enumerate() {
        for s in &p.slots {
            count[s.sequence] += 1;
            if count[s.sequence] == 2 {
                last_chunk[s.sequence] = Some(i);
            }
        }
        for s in &p.slots {
            count[s.sequence] = 0;
        }
    }
    for (i, p) in passes.iter_mut().enumerate() {
        for s in &mut p.slots {
            s.phase = if last_chunk[s.sequence].is_some_and(|l| i <= l) {
                Phase::Prefill
            } else {
                Phase::Decode
            };
        }
    }
}

/// With a phase field: no sequence has a prefill row after one of its decode rows (a
/// trace stores a sequence's prompt before its generated tokens).
fn check_phase_order(
    rows: &[Row],
    passes: &[RawPass],
    names: &[String],
) -> Result<(), LineError> {
    let mut decoded = vec![false; names.len()];
    for p in passes {
        for s in &p.slots {
            match s.phase {
                Phase::Decode => decoded[s.sequence] = true,
                Phase::Prefill if decoded[s.sequence] => {
                    return Err((
                        rows[s.rows[0]].line,
                        format!(
                            "sequence {:?} has a prefill row in a forward pass after one of its decode rows; a trace stores a sequence's prompt before its generated tokens",
                            names[s.sequence]
                        ),
                    ))
                }
                Phase::Prefill => {}
            }
        }
    }
    Ok(())
}

/// The kept rows with tokens numbered per (sequence, phase) in pass order, the sequences
/// that keep rows, and the passes as runs of consecutive rows of one sequence.
fn renumber(
    rows: Vec<Row>,
    names: Vec<String>,
    passes: Vec<RawPass>,
    warmup: Option<String>,
) -> Passes {
    let mut new_index = vec![usize::MAX; names.len()];
    let mut new_names = Vec::new();
    let mut next = vec![[0u64; 2]; names.len()];
    let mut slots_of_row = vec![None; rows.len()];
    let mut out_passes = Vec::with_capacity(passes.len());
    for p in &passes {
        let mut runs: Vec<PassRun> = Vec::new();
        for s in &p.slots {
            if new_index[s.sequence] == usize::MAX {
                new_index[s.sequence] = new_names.len();
                new_names.push(names[s.sequence].clone());
            }
            let seq = new_index[s.sequence];
            let counter = &mut next[s.sequence][(s.phase == Phase::Decode) as usize];
            for &i in &s.rows {
                slots_of_row[i] = Some((seq, s.phase, *counter));
            }
            *counter += 1;
            match runs.last_mut() {
                Some(run) if run.sequence as usize == seq => run.tokens += 1,
                _ => runs.push(PassRun {
                    sequence: seq as u32,
                    tokens: 1,
                }),
            }
        }
        out_passes.push(Pass { runs });
    }
    let rows = rows
        .into_iter()
        .zip(slots_of_row)
        .filter_map(|(mut r, at)| {
            let (seq, phase, token) = at?;
            (r.sequence, r.phase, r.token) = (seq, phase, token);
            Some(r)
        })
        .collect();
    Passes {
        rows,
        names: new_names,
        passes: out_passes,
        warmup,
    }
}
