//! `results.csv`: one row per run, one column per scalar of the run's JSON.
//!
//! The flattening rule: a column's header is the dotted path of the JSON key inside the run
//! entry of `results.json` (`run`, `grid.mechanism`, `streaming.resident_mib_per_layer_step`,
//! `timing.tokens_per_s`, ...). Nested objects are descended; numbers are written exactly as in
//! the JSON (so a CSV cell parses to the same f64), strings verbatim, booleans as
//! `true`/`false`, arrays as their compact JSON text, and a null or a key a run lacks as an
//! empty cell. Columns are the union over all runs, in order of first appearance. The keys
//! under [`JSON_ONLY`] stay in `results.json` only.

use crate::results::Results;
use serde_json::Value;

/// Subtrees of a run entry left out of the CSV: the per-step latencies (up to 20,000 values,
/// beyond the 32,767 characters a spreadsheet cell holds).
pub const JSON_ONLY: &[&str] = &["timing_detail.step_latency"];

/// Whether the column `path` lies under one of the [`JSON_ONLY`] subtrees.
fn json_only(path: &str) -> bool {
    JSON_ONLY.iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

/// Every non-object value under `v` with its dotted path, depth first, in key order.
pub fn leaves(v: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    leaves_into("", v, &mut out);
    out
}

fn leaves_into<'a>(prefix: &str, v: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves_into(&path, child, out);
            }
        }
        _ => out.push((prefix.to_string(), v)),
    }
}

/// Text of one CSV cell for a JSON leaf, by the rule in the module doc.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(_) | Value::Object(_) => v.to_string(),
    }
}

/// The flattened header and rows of `results`.
pub fn table(results: &Results) -> (Vec<String>, Vec<Vec<String>>) {
    let mut header: Vec<String> = Vec::new();
    let mut index = std::collections::HashMap::new();
    let mut flat_runs = Vec::with_capacity(results.runs.len());
    for r in &results.runs {
        let v = serde_json::to_value(r).expect("run entry serializes");
        let mut flat = leaves(&v);
        flat.retain(|(k, _)| !json_only(k));
        for (k, _) in &flat {
            if !index.contains_key(k) {
                index.insert(k.clone(), header.len());
                header.push(k.clone());
            }
        }
        flat_runs.push(
            flat.into_iter()
                .map(|(k, v)| (index[&k], cell(v)))
                .collect::<Vec<_>>(),
        );
    }
    let rows = flat_runs
        .into_iter()
        .map(|cells| {
            let mut row = vec![String::new(); header.len()];
            for (i, c) in cells {
                row[i] = c;
            }
            row
        })
        .collect();
    (header, rows)
}

/// `results.csv` text.
pub fn to_csv(results: &Results) -> anyhow::Result<String> {
    let (header, rows) = table(results);
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header)?;
    for row in rows {
        w.write_record(&row)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}
