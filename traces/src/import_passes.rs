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
        "--drop-warmup dropped {} of each of the {layers} recorded layers in {}: {before} before the first real pass (the profiling and CUDA-graph capture passes), {} whose rows all select one expert set",
        counted(dropped_rows, "row", "rows"),
        counted(before + uniform_later, "forward pass", "forward passes"),
        counted(uniform_later, "later pass", "later passes"),
    );
    Ok((kept, note))
}

/// `n` and the noun in its number: `1 forward pass`, `4 forward passes`.
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
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
fn check_phase_order(rows: &[Row], passes: &[RawPass], names: &[String]) -> Result<(), LineError> {
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

#[cfg(test)]
mod tests {
    use crate::import_fields::FieldMap;
    use crate::import_rows::{parse_jsonl, RowImportOptions};
    use crate::{Pass, PassRun, Trace};

    /// A hook log shaped like vLLM's: request ids in `req_id`, the row's index in its forward
    /// pass in `token_idx`, layer-major inside a pass (layers 0 and 1, top-2 of 16). Each pass
    /// is a list of (request, distinct) rows: distinct rows get their own selection, the
    /// others all select one set.
    fn log(passes: &[Vec<(&str, bool)>]) -> String {
        let mut out = String::new();
        let mut c = 0usize;
        for pass in passes {
            let first = c;
            for layer in 0..2usize {
                c = first;
                for (pos, &(req, distinct)) in pass.iter().enumerate() {
                    let a = if distinct {
                        (c * 5 + layer * 3) % 16
                    } else {
                        layer
                    };
                    let b = if distinct {
                        (a + 1 + c % 3) % 16
                    } else {
                        8 + layer
                    };
                    out += &format!(
                        "{{\"req_id\":\"{req}\",\"token_idx\":{pos},\"layer\":{layer},\"topk_ids\":[{a},{b}]}}\n"
                    );
                    c += 1;
                }
            }
        }
        out
    }

    fn warmup_then_real() -> Vec<Vec<(&'static str, bool)>> {
        let dummy = |n| vec![("r1", false); n];
        vec![
            dummy(6), // profiling pass
            dummy(4), // graph capture passes
            dummy(2),
            dummy(1),
            vec![("r1", true); 3], // r1's first prompt chunk
            vec![
                ("r1", true),
                ("r1", true),
                ("r2", true),
                ("r2", true),
                ("r2", true),
            ],
            vec![("r1", true), ("r2", true), ("r3", true), ("r3", true)],
            vec![("r1", true), ("r2", true), ("r3", true)],
            vec![("r2", true), ("r3", true)],
            vec![("r3", true)],
        ]
    }

    fn import(text: &str, drop_warmup: bool) -> Result<Trace, crate::TraceError> {
        let opts = RowImportOptions {
            map: FieldMap::parse("sequence=req_id,token=token_idx,experts=topk_ids").unwrap(),
            drop_warmup,
            ..Default::default()
        };
        parse_jsonl(text.as_bytes(), "hook.jsonl", &opts)
    }

    fn runs(v: &[(u32, u32)]) -> Pass {
        Pass {
            runs: v
                .iter()
                .map(|&(sequence, tokens)| PassRun { sequence, tokens })
                .collect(),
        }
    }

    #[test]
    fn warm_up_passes_are_dropped_by_pass_and_the_rest_kept_as_served() {
        let t = import(&log(&warmup_then_real()), true).unwrap();
        // by hand: 6 + 4 + 2 + 1 = 13 warm-up rows in 4 passes; r1 prompt 3 + 2, decode 2;
        // r2 prompt 3, decode 3; r3 prompt 2, decode 3
        let counts: Vec<(&str, u64, u64)> = t
            .header
            .sequences
            .iter()
            .map(|s| (s.name.as_str(), s.prefill_tokens, s.decode_tokens))
            .collect();
        assert_eq!(counts, [("r1", 5, 2), ("r2", 3, 3), ("r3", 2, 3)]);
        let expected = vec![
            runs(&[(0, 3)]),
            runs(&[(0, 2), (1, 3)]),
            runs(&[(0, 1), (1, 1), (2, 2)]),
            runs(&[(0, 1), (1, 1), (2, 1)]),
            runs(&[(1, 1), (2, 1)]),
            runs(&[(2, 1)]),
        ];
        assert_eq!(t.header.passes.as_ref(), Some(&expected));
        let note = crate::import_rows::warmup_note(&t.header.provenance).unwrap();
        assert!(
            note.contains("dropped 13 rows of each of the 2 recorded layers in 4 forward passes: 4 before the first real pass")
                && note.contains("0 later passes"),
            "{note}"
        );
        // r2's first prompt row is the 3rd row of the pass that starts at row counter 16
        // (13 warm-up + 3 of r1's first chunk): layer 0 selects [(18 x 5) % 16, +1 + 0]
        let ks = t.keyspace();
        assert_eq!(t.selection(&ks, 1, crate::Phase::Prefill, 0, 0), &[10, 11]);
    }

    #[test]
    fn a_trace_with_passes_is_written_as_version_3_and_reads_back() {
        let t = import(&log(&warmup_then_real()), true).unwrap();
        assert_eq!(crate::format::version_for(&t.header), 3);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.bin");
        crate::write_file(&path, &t).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 3);
        assert_eq!(crate::read_file(&path).unwrap(), t);
    }

    #[test]
    fn without_drop_warmup_every_pass_is_kept() {
        let t = import(&log(&warmup_then_real()), false).unwrap();
        let passes = t.header.passes.unwrap();
        assert_eq!(passes.len(), 10);
        assert_eq!(passes[0], runs(&[(0, 6)]));
        assert!(crate::import_rows::warmup_note(&t.header.provenance).is_none());
        // r1 holds all 13 warm-up rows too: its prompt runs to its last multi-row pass
        assert_eq!(t.header.sequences[0].prefill_tokens, 13 + 5);
    }

    #[test]
    fn a_later_uniform_pass_is_dropped_and_a_log_of_warm_up_only_is_refused() {
        let mut p = warmup_then_real();
        p.insert(7, vec![("r9", false); 3]);
        let t = import(&log(&p), true).unwrap();
        // r9 appears only in the dropped pass: it is no sequence of the trace
        assert_eq!(t.header.sequences.len(), 3);
        let note = crate::import_rows::warmup_note(&t.header.provenance).unwrap();
        assert!(
            note.contains("16 rows")
                && note.contains("in 5 forward passes")
                && note.contains(", 1 later pass whose rows"),
            "{note}"
        );
        let only = import(&log(&warmup_then_real()[..4]), true).unwrap_err();
        assert!(
            only.to_string().contains("none of the 4 forward passes"),
            "{only}"
        );
        // one warm-up pass before the real ones: counted in the singular
        let t = import(&log(&warmup_then_real()[3..]), true).unwrap();
        let note = crate::import_rows::warmup_note(&t.header.provenance).unwrap();
        assert!(
            note.contains(
                "dropped 1 row of each of the 2 recorded layers in 1 forward pass: 1 before"
            ),
            "{note}"
        );
    }

    #[test]
    fn a_pass_missing_a_position_or_a_layer_is_refused_with_its_line() {
        let row = |req: &str, pos: u32, layer: u32| {
            format!("{{\"req_id\":\"{req}\",\"token_idx\":{pos},\"layer\":{layer},\"topk_ids\":[1,2]}}\n")
        };
        // pass 2 (from line 5) holds positions 0 and 2
        let gap = [
            row("a", 0, 0),
            row("a", 1, 0),
            row("a", 0, 1),
            row("a", 1, 1),
            row("a", 0, 0),
            row("a", 2, 0),
            row("a", 0, 1),
            row("a", 2, 1),
        ]
        .concat();
        let e = import(&gap, false).unwrap_err().to_string();
        assert!(
            e.contains("line 6") && e.contains("position 2 but no position 1"),
            "{e}"
        );
        // position 1 names b on layer 0 and a on layer 1
        let mixed = [
            row("a", 0, 0),
            row("b", 1, 0),
            row("a", 0, 1),
            row("a", 1, 1),
        ]
        .concat()
            + &row("a", 0, 0)
            + &row("a", 0, 1);
        let e = import(&mixed, false).unwrap_err().to_string();
        assert!(
            e.contains("line 4") && e.contains("another sequence"),
            "{e}"
        );
    }
}
