//! Reading CSV and JSON Lines rows into [`Row`]s under the rules of
//! [`crate::import_fields`]: the field mapping, the row filters, a leading UTF-8 BOM and
//! unknown fields accepted in both formats, tokens numbered in row order when the input has
//! no token field, a repeated expert id refused with its line, and every line read with a
//! bounded length ([`MAX_LINE`]), so that a garbage tail is refused in constant memory.

use crate::error::TraceError;
use crate::import_fields::{Cell, RowField};
use crate::import_rows::{Row, RowImportOptions};
use crate::trace::Phase;
use std::collections::HashMap;
use std::io::BufRead;

/// The byte-order mark some Windows tools put before UTF-8 text.
const BOM: char = '\u{feff}';

/// The longest line a row may have, bytes: 4 MiB, twice what the widest possible row needs
/// (a selection of all 65,535 ids of a u16 expert count, each at most 6 bytes with its
/// separator, and a router weight each, at most 24 bytes as a float formatter prints one:
/// 65,535 x 30 B = 1.97 MB). A longer line is not a row, e.g. a binary or NUL-filled tail;
/// refusing it there keeps memory bounded whatever follows.
pub const MAX_LINE: u64 = 4 << 20;

/// A line over [`MAX_LINE`]: the error [`LineLimit`] reads as, found again by
/// [`line_too_long`] to name the line.
#[derive(Debug)]
struct LineTooLong {
    line: u64,
}

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} runs past {} MiB without a line break, longer than any row can be (the \
             line limit of the row importers): the input is not rows from there on (a binary \
             or NUL-filled tail?); cut the file before that line",
            self.line,
            MAX_LINE >> 20
        )
    }
}

impl std::error::Error for LineTooLong {}

/// A reader that fails once a line runs past [`MAX_LINE`] bytes, so that neither the CSV
/// reader nor the JSON Lines reader buffers more than that of a line.
pub(crate) struct LineLimit<R> {
    inner: R,
    /// Bytes since the last line break, and 1-based number of the current line.
    since_break: u64,
    line: u64,
}

impl<R: std::io::Read> LineLimit<R> {
    pub(crate) fn new(inner: R) -> Self {
        LineLimit {
            inner,
            since_break: 0,
            line: 1,
        }
    }
}

impl<R: std::io::Read> std::io::Read for LineLimit<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Never hand out more than the current line may still take, so the limit trips
        // before a caller holds more than MAX_LINE bytes of one line.
        let room = (MAX_LINE + 1).saturating_sub(self.since_break);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        for &b in &buf[..n] {
            if b == b'\n' {
                self.since_break = 0;
                self.line += 1;
            } else {
                self.since_break += 1;
            }
        }
        if self.since_break > MAX_LINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                LineTooLong { line: self.line },
            ));
        }
        Ok(n)
    }
}

/// The import error of a line over [`MAX_LINE`], when `e` is one.
fn line_too_long(file: &str, e: &std::io::Error) -> Option<TraceError> {
    let long = e.get_ref()?.downcast_ref::<LineTooLong>()?;
    Some(TraceError::Import {
        file: file.to_string(),
        location: format!("line {}", long.line),
        detail: long.to_string(),
    })
}

/// Rows read so far, with the sequence names in order of first appearance.
pub(crate) struct RowSink<'a> {
    opts: &'a RowImportOptions,
    file: &'a str,
    /// Sequence name -> index, and the names in order.
    index: HashMap<String, usize>,
    pub(crate) names: Vec<String>,
    pub(crate) rows: Vec<Row>,
    /// Rows a `--where` filter skipped.
    pub(crate) filtered: u64,
    /// Whether any kept row has a phase field (forward passes infer phases otherwise).
    pub(crate) phase_given: bool,
    /// Whether rows carry a token field: decided by the first kept row, with its line.
    tokens_given: Option<(bool, u64)>,
    /// Next token per (sequence, phase, layer), when tokens are numbered in row order.
    next_token: HashMap<(usize, Phase, usize), u64>,
    /// Which expert ids are valid, for messages.
    id_range: String,
}

impl<'a> RowSink<'a> {
    pub(crate) fn new(opts: &'a RowImportOptions, file: &'a str) -> Self {
        let id_range = match opts.num_experts {
            Some(n) => format!(
                "expert ids run from 0 to {} (--num-experts)",
                n.saturating_sub(1)
            ),
            // 65535 itself would need 65,536 experts, one more than a u16 count holds.
            None => "expert ids run from 0 to 65534".to_string(),
        };
        RowSink {
            opts,
            file,
            index: HashMap::new(),
            names: Vec::new(),
            rows: Vec::new(),
            filtered: 0,
            phase_given: false,
            tokens_given: None,
            next_token: HashMap::new(),
            id_range,
        }
    }

    /// Whether tokens were numbered in row order (the input has no token field).
    pub(crate) fn tokens_numbered(&self) -> bool {
        matches!(self.tokens_given, Some((false, _)))
    }

    fn err(&self, line: u64, detail: String) -> TraceError {
        TraceError::Import {
            file: self.file.to_string(),
            location: format!("line {line}"),
            detail,
        }
    }

    fn sequence_index(&mut self, name: String) -> usize {
        if let Some(&i) = self.index.get(&name) {
            return i;
        }
        self.names.push(name.clone());
        self.index.insert(name, self.names.len() - 1);
        self.names.len() - 1
    }

    /// Add the row at input line `line`, whose input fields `get` looks up by name; a row
    /// that a `--where` filter rejects is skipped.
    pub(crate) fn push<'c>(
        &mut self,
        line: u64,
        get: impl Fn(&str) -> Option<Cell<'c>>,
    ) -> Result<(), TraceError> {
        let opts = self.opts;
        if !opts
            .filters
            .iter()
            .all(|f| get(&f.field).is_some_and(|c| c.equals(&f.value)))
        {
            self.filtered += 1;
            return Ok(());
        }
        // An empty optional field (CSV "", JSON null) is absent; a required one must be valid.
        let field = |f: RowField| get(opts.map.input_name(f)).filter(|c| !c.is_empty());
        let required = |f: RowField| {
            get(opts.map.input_name(f))
                .ok_or_else(|| self.err(line, format!("no field {}", opts.map.describe(f))))
        };
        let e = |d: String| self.err(line, d);
        let name = required(RowField::Sequence)?.sequence_name().map_err(e)?;
        let phase_cell = field(RowField::Phase);
        let has_phase = phase_cell.is_some();
        let phase = phase_cell
            .map_or(Ok(Phase::Decode), Cell::phase)
            .map_err(e)?;
        let layer = required(RowField::Layer)?.uint("layer").map_err(e)?;
        let layer = usize::try_from(layer).unwrap_or(usize::MAX);
        let experts = required(RowField::Experts)?
            .ids(&self.id_range)
            .map_err(e)?;
        if let Some(id) = repeated(&experts) {
            return Err(e(format!(
                "expert id {id} is repeated inside one top-k selection ({experts:?})"
            )));
        }
        let weights = field(RowField::Weights)
            .map(Cell::weights)
            .transpose()
            .map_err(e)?;
        let token_cell = field(RowField::Token);
        let sequence = self.sequence_index(name);
        let token = self.token(line, token_cell, (sequence, phase, layer))?;
        self.phase_given |= has_phase;
        self.rows.push(Row {
            line,
            sequence,
            phase,
            token,
            layer,
            experts,
            weights,
        });
        Ok(())
    }

    /// The row's token: its token field, or, when the input has none, the next number in
    /// row order within (sequence, phase, layer).
    fn token(
        &mut self,
        line: u64,
        cell: Option<Cell<'_>>,
        at: (usize, Phase, usize),
    ) -> Result<u64, TraceError> {
        let (given, first) = *self.tokens_given.get_or_insert((cell.is_some(), line));
        match (given, cell) {
            (true, Some(c)) => c.uint("token").map_err(|d| self.err(line, d)),
            (false, None) => {
                let next = self.next_token.entry(at).or_insert(0);
                *next += 1;
                Ok(*next - 1)
            }
            (true, None) | (false, Some(_)) => Err(self.err(
                line,
                format!(
                    "line {first} {} a token field {} but this row {}: give {} on every row or \
                     on none (then tokens are numbered in row order)",
                    if given { "has" } else { "has no" },
                    self.opts.map.describe(RowField::Token),
                    if given { "has none" } else { "has one" },
                    self.opts.map.input_name(RowField::Token),
                ),
            )),
        }
    }
}

/// The first expert id that appears twice in `ids`, if any (top-k lists are short).
fn repeated(ids: &[u16]) -> Option<u16> {
    ids.iter()
        .enumerate()
        .find(|(i, id)| ids[..*i].contains(id))
        .map(|(_, &id)| id)
}

/// Read CSV text (a header row naming the columns, then one row per selection).
pub(crate) fn read_csv(
    input: impl std::io::Read,
    sink: &mut RowSink<'_>,
) -> Result<(), TraceError> {
    let file = sink.file;
    let mut rdr = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(LineLimit::new(input));
    let csv_err = |e: csv::Error| {
        if let csv::ErrorKind::Io(io) = e.kind() {
            if let Some(long) = line_too_long(file, io) {
                return long;
            }
        }
        let line = e.position().map(|p| p.line()).unwrap_or(1);
        TraceError::Import {
            file: file.to_string(),
            location: format!("line {line}"),
            detail: format!("{e} (expected columns sequence,phase,token,layer,experts[,weights])"),
        }
    };
    let headers = rdr.headers().map_err(csv_err)?.clone();
    let mut column: HashMap<&str, usize> = HashMap::new();
    for (i, h) in headers.iter().enumerate() {
        // csv strips a BOM before the first header itself; strip it anyway for other readers.
        column.entry(h.trim_start_matches(BOM)).or_insert(i);
    }
    for rec in rdr.records() {
        let rec = rec.map_err(csv_err)?;
        let line = rec.position().map(|p| p.line()).unwrap_or(0);
        sink.push(line, |name| {
            column.get(name).and_then(|&i| rec.get(i)).map(Cell::Text)
        })?;
    }
    Ok(())
}

/// Read JSON Lines: one object per line, blank lines skipped.
pub(crate) fn read_jsonl(input: impl BufRead, sink: &mut RowSink<'_>) -> Result<(), TraceError> {
    let file = sink.file;
    let mut input = std::io::BufReader::new(LineLimit::new(input));
    // each line's bytes, and its first byte's offset in the file
    let (mut buf, mut offset) = (Vec::new(), 0u64);
    for line_no in 1u64.. {
        buf.clear();
        let n = input.read_until(b'\n', &mut buf).map_err(|e| {
            line_too_long(file, &e).unwrap_or_else(|| TraceError::io(file, "reading", e))
        })?;
        if n == 0 {
            break;
        }
        let start = offset;
        offset += n as u64;
        let text = std::str::from_utf8(&buf).map_err(|e| {
            let place = crate::utf8_text::where_invalid(&buf, start, line_no, &e);
            sink.err(
                line_no,
                format!("not UTF-8 text: {place}; a JSON Lines file is UTF-8 text, one JSON object per line (is it a binary file?)"),
            )
        })?;
        let text = text.strip_suffix('\n').unwrap_or(text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        let text = if line_no == 1 {
            text.trim_start_matches(BOM)
        } else {
            text
        };
        if text.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            sink.err(
                line_no,
                format!(
                    "{e} (expected {{\"sequence\", \"phase\"?, \"token\", \"layer\", \"experts\": [ids], \"weights\"?: [floats]}})"
                ),
            )
        })?;
        let Some(object) = value.as_object() else {
            return Err(sink.err(
                line_no,
                format!("expected a JSON object, found {}", json_kind(&value)),
            ));
        };
        sink.push(line_no, |name| object.get(name).map(Cell::Json))?;
    }
    Ok(())
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
