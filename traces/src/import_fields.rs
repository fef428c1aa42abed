//! The field rules of the row importers (CSV and JSON Lines), one set for both formats:
//! which input field holds which row field (`--map`), which rows to keep (`--where`), and
//! how a field's text or JSON value becomes a sequence name, an integer, a list of expert ids
//! or of router weights. `traces/FORMAT.md` ("Rules shared by CSV and JSON Lines") states
//! them for users.

use crate::trace::Phase;
use serde_json::Value;

/// The fields of one row, in the order of the CSV export's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowField {
    Sequence,
    Phase,
    Token,
    Layer,
    Experts,
    Weights,
}

impl RowField {
    /// Every row field.
    pub const ALL: [RowField; 6] = [
        RowField::Sequence,
        RowField::Phase,
        RowField::Token,
        RowField::Layer,
        RowField::Experts,
        RowField::Weights,
    ];

    /// The field's name, which is also the input field it is read from unless `--map`
    /// renames it.
    pub fn name(self) -> &'static str {
        match self {
            RowField::Sequence => "sequence",
            RowField::Phase => "phase",
            RowField::Token => "token",
            RowField::Layer => "layer",
            RowField::Experts => "experts",
            RowField::Weights => "weights",
        }
    }

    fn parse(name: &str) -> Option<RowField> {
        RowField::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Which input field each row field is read from (`--map sequence=req_id,experts=topk_ids`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldMap {
    /// Input field name per [`RowField::ALL`] entry; `None` keeps the field's own name.
    renamed: [Option<String>; 6],
}

impl FieldMap {
    /// Parse `FIELD=INPUT[,FIELD=INPUT...]`, FIELD one of the row fields, each at most once.
    pub fn parse(spec: &str) -> Result<FieldMap, String> {
        let mut map = FieldMap::default();
        for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, input) = pair.split_once('=').ok_or_else(|| {
                format!("{pair:?} is not FIELD=INPUT_NAME (e.g. sequence=req_id)")
            })?;
            let (field, input) = (field.trim(), input.trim());
            let f = RowField::parse(field).ok_or_else(|| {
                format!(
                    "{field:?} is not a row field; the fields are {}",
                    RowField::ALL.map(RowField::name).join(", ")
                )
            })?;
            if input.is_empty() {
                return Err(format!("{field}= names no input field"));
            }
            let slot = &mut map.renamed[f as usize];
            if slot.is_some() {
                return Err(format!("{field} is mapped twice"));
            }
            *slot = Some(input.to_string());
        }
        Ok(map)
    }

    /// The input field that holds `field`.
    pub fn input_name(&self, field: RowField) -> &str {
        self.renamed[field as usize]
            .as_deref()
            .unwrap_or(field.name())
    }

    /// Whether `--map` renamed `field`, for messages ("mapped by --map").
    pub fn is_renamed(&self, field: RowField) -> bool {
        self.renamed[field as usize].is_some()
    }

    /// Where a missing field's name came from, for messages.
    pub fn describe(&self, field: RowField) -> String {
        if self.is_renamed(field) {
            format!(
                "`{}` (the {} field, by --map)",
                self.input_name(field),
                field.name()
            )
        } else {
            format!(
                "`{}` (rename it with --map {}=NAME)",
                field.name(),
                field.name()
            )
        }
    }
}

/// A row filter `FIELD=VALUE` (`--where type=route`): a row is kept when its input field
/// FIELD holds exactly VALUE (a JSON string compared as text, any other JSON value by its
/// JSON text; a row without the field is not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowFilter {
    /// The input field (not a row field: filters see the input's own names).
    pub field: String,
    /// The value it must hold.
    pub value: String,
}

impl RowFilter {
    /// Parse `FIELD=VALUE`.
    pub fn parse(spec: &str) -> Result<RowFilter, String> {
        let (field, value) = spec
            .split_once('=')
            .ok_or_else(|| format!("{spec:?} is not FIELD=VALUE (e.g. type=route)"))?;
        if field.trim().is_empty() {
            return Err(format!("{spec:?} names no field"));
        }
        Ok(RowFilter {
            field: field.trim().to_string(),
            value: value.trim().to_string(),
        })
    }
}

/// One input field's value: a CSV cell (trimmed text) or a JSON value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cell<'a> {
    Text(&'a str),
    Json(&'a Value),
}

impl Cell<'_> {
    /// True when the cell holds nothing: an empty CSV cell or JSON `null`.
    pub(crate) fn is_empty(self) -> bool {
        match self {
            Cell::Text(s) => s.is_empty(),
            Cell::Json(v) => v.is_null(),
        }
    }

    /// Whether the cell holds exactly `value` (see [`RowFilter`]).
    pub(crate) fn equals(self, value: &str) -> bool {
        match self {
            Cell::Text(s) => s == value,
            Cell::Json(Value::String(s)) => s == value,
            Cell::Json(v) => {
                let text = v.to_string();
                text == value
            }
        }
    }

    /// A sequence name: CSV text, or a JSON string or non-negative integer (its decimal
    /// text). See [`check_sequence_name`].
    pub(crate) fn sequence_name(self) -> Result<String, String> {
        let name = match self {
            Cell::Text(s) => s.to_string(),
            Cell::Json(Value::String(s)) => s.clone(),
            Cell::Json(Value::Number(n)) if n.is_u64() => n.to_string(),
            Cell::Json(v) => {
                return Err(format!(
                    "sequence {v} is neither a string nor an integer >= 0"
                ))
            }
        };
        check_sequence_name(&name)?;
        Ok(name)
    }

    /// A phase: `prefill` or `decode`; an empty cell (or JSON null) is `decode`.
    pub(crate) fn phase(self) -> Result<Phase, String> {
        let text = match self {
            Cell::Text(s) => s,
            Cell::Json(Value::Null) => "",
            Cell::Json(Value::String(s)) => s.as_str(),
            Cell::Json(v) => return Err(format!("phase {v} is not a string")),
        };
        match text.trim() {
            "" | "decode" => Ok(Phase::Decode),
            "prefill" => Ok(Phase::Prefill),
            other => Err(format!(
                "phase {other:?} is neither \"prefill\" nor \"decode\""
            )),
        }
    }

    /// A non-negative integer of the field `what` (see [`parse_uint`]).
    pub(crate) fn uint(self, what: &str) -> Result<u64, String> {
        match self {
            Cell::Text(s) => parse_uint(s, what, "an integer >= 0 below 2^64"),
            Cell::Json(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| format!("{what} {n} is not an integer >= 0 below 2^64")),
            Cell::Json(v) => Err(format!("{what} {v} is not an integer")),
        }
    }

    /// Expert ids in router order: CSV entries separated by spaces or `;`, or a JSON array
    /// of integers. `range` says which ids are valid, for the out-of-range message.
    pub(crate) fn ids(self, range: &str) -> Result<Vec<u16>, String> {
        let to_id = |s: &str| {
            let v = parse_uint(s, "experts entry", range)?;
            u16::try_from(v).map_err(|_| format!("experts entry {s:?} is out of range: {range}"))
        };
        match self {
            Cell::Text(s) => list_entries(s)
                .map(to_id)
                .collect::<Result<_, _>>()
                .map_err(|e| match s.contains(',') {
                    true => format!(
                        "{e}: the ids of one row are separated by spaces or `;`, not commas"
                    ),
                    false => e,
                }),
            Cell::Json(Value::Array(a)) => a
                .iter()
                .map(|v| match v {
                    Value::Number(n) if n.is_u64() || n.is_i64() => to_id(&n.to_string()),
                    other => Err(format!("experts entry {other} is not an integer")),
                })
                .collect(),
            Cell::Json(v) => Err(format!("experts {v} is not an array of ids")),
        }
    }

    /// Router weights: CSV entries separated by spaces or `;`, or a JSON array of numbers.
    pub(crate) fn weights(self) -> Result<Vec<f32>, String> {
        let bad = |x: &dyn std::fmt::Display| format!("weights entry {x} is not a valid number");
        match self {
            Cell::Text(s) => list_entries(s)
                .map(|x| x.parse::<f32>().map_err(|_| bad(&format!("{x:?}"))))
                .collect(),
            Cell::Json(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_f64().map(|f| f as f32).ok_or_else(|| bad(v)))
                .collect(),
            Cell::Json(v) => Err(format!("weights {v} is not an array of numbers")),
        }
    }
}

/// The entries of a CSV list cell, separated by spaces or `;`.
fn list_entries(s: &str) -> impl Iterator<Item = &str> {
    s.split([' ', ';']).filter(|x| !x.is_empty())
}

/// Parse a non-negative decimal integer written as digits only: no sign (`+1` and `-1` are
/// refused), no point, no exponent, as JSON writes integers. A digit string too large for
/// u64, or a negative number, is out of `range`; anything else is not a valid number.
pub(crate) fn parse_uint(s: &str, what: &str, range: &str) -> Result<u64, String> {
    let digits_only = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if digits_only(s) {
        return s
            .parse::<u64>()
            .map_err(|_| format!("{what} {s:?} is out of range: {range}"));
    }
    if s.strip_prefix('-').is_some_and(digits_only) {
        return Err(format!("{what} {s:?} is out of range: {range}"));
    }
    Err(format!(
        "{what} {s:?} is not a valid number (digits only, no sign)"
    ))
}

/// A sequence name must be non-empty and free of control characters (NUL, newlines, tabs,
/// escapes...): names are printed in tables and reports and may become file names.
pub fn check_sequence_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the sequence name is empty".into());
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(format!(
            "the sequence name {name:?} holds the control character {:?}",
            c
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_parse_and_rename() {
        let m = FieldMap::parse("sequence=req_id, token=token_idx,experts=topk_ids").unwrap();
        assert_eq!(m.input_name(RowField::Sequence), "req_id");
        assert_eq!(m.input_name(RowField::Experts), "topk_ids");
        assert_eq!(m.input_name(RowField::Layer), "layer");
        assert!(FieldMap::parse("seq=a")
            .unwrap_err()
            .contains("not a row field"));
        assert!(FieldMap::parse("token")
            .unwrap_err()
            .contains("FIELD=INPUT"));
        assert!(FieldMap::parse("token=a,token=b")
            .unwrap_err()
            .contains("twice"));
        assert!(FieldMap::parse("token=")
            .unwrap_err()
            .contains("no input field"));
    }

    #[test]
    fn filters_compare_text_and_json() {
        let f = RowFilter::parse("type=route").unwrap();
        assert_eq!((f.field.as_str(), f.value.as_str()), ("type", "route"));
        assert!(Cell::Json(&json!("route")).equals("route"));
        assert!(Cell::Json(&json!(3)).equals("3"));
        assert!(!Cell::Json(&json!("3 ")).equals("3"));
        assert!(Cell::Text("route").equals("route"));
        assert!(RowFilter::parse("type").is_err());
    }

    #[test]
    fn integers_are_digits_only() {
        assert_eq!(parse_uint("0012", "token", "r"), Ok(12));
        for bad in ["+1", "1.0", "1e2", "", " 1", "0x1"] {
            let e = parse_uint(bad, "token", "r").unwrap_err();
            assert!(e.contains("not a valid number"), "{bad}: {e}");
        }
        assert!(parse_uint("-1", "token", "r")
            .unwrap_err()
            .contains("out of range"));
        assert!(parse_uint("18446744073709551616", "token", "r")
            .unwrap_err()
            .contains("out of range"));
        assert!(Cell::Text("1 +2").ids("r").unwrap_err().contains("\"+2\""));
        assert_eq!(Cell::Json(&json!([3, 1])).ids("r"), Ok(vec![3, 1]));
        assert!(Cell::Json(&json!([1.5])).ids("r").is_err());
        assert!(Cell::Json(&json!([-1]))
            .ids("r")
            .unwrap_err()
            .contains("out of range"));
    }

    #[test]
    fn sequence_names_are_nonempty_without_control_characters() {
        assert_eq!(Cell::Json(&json!(7)).sequence_name(), Ok("7".into()));
        assert!(Cell::Text("")
            .sequence_name()
            .unwrap_err()
            .contains("empty"));
        assert!(Cell::Json(&json!("a\u{0}b")).sequence_name().is_err());
        assert!(Cell::Text("a\tb").sequence_name().is_err());
        assert!(Cell::Json(&json!(-1)).sequence_name().is_err());
        assert_eq!(Cell::Text("prosa-ü").sequence_name(), Ok("prosa-ü".into()));
    }
}
