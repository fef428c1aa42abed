//! The adapter to the simulator's run entry points: `run`, `sweep`, `plan` and `compare`
//! take a spec (the options of the `sim` command of that name, as a dict) and a trace, and
//! return the JSON the command writes with `--json`. Until the engine crate's typed front
//! door (`RunSpec`, `engine::run`) exists, the spec goes through the CLI's own parser and
//! command functions ([`crate::cli`]), which write their JSON to a temporary file; this module
//! is the one place to change when it does.

use crate::cli::{flags, invoke};
use crate::trace::TraceFile;
use anyhow::{Context, Result};
use serde_json::Value;
use std::path::Path;

/// What a command's JSON output is read from.
enum Output {
    /// `--out FILE --json`: the file.
    File,
    /// `--out DIR`: `DIR/results.json` (`sim compare`).
    ReportDir,
}

/// Run `sim <command>` with the options of `spec` on `traces` (none: the command's default,
/// the bundled prose trace) and return its JSON output, each temporary trace file's path
/// replaced by its trace's label.
pub fn command_json(command: &str, spec: &Value, traces: &[TraceFile]) -> Result<Value> {
    let (output, reserved): (Output, &[(&str, &str)]) = match command {
        "compare" => (Output::ReportDir, &RESERVED_COMPARE),
        _ => (Output::File, &RESERVED),
    };
    let mut args = vec![command.to_string()];
    args.extend(flags(spec, &format!("sim {command}"), reserved)?);
    for t in traces {
        args.push("--trace".into());
        args.push(t.path.display().to_string());
    }
    let dir = tempfile::Builder::new()
        .prefix("moe-paging-sim-")
        .tempdir()?;
    let out = dir.path().join("out");
    args.push("--out".into());
    args.push(out.display().to_string());
    let file = match output {
        Output::File => {
            args.push("--json".into());
            out.clone()
        }
        Output::ReportDir => out.join("results.json"),
    };
    invoke(&args)?;
    let mut value = read_json(&file)?;
    for t in traces {
        if let Some(label) = &t.label {
            relabel(&mut value, &t.path.display().to_string(), label);
        }
    }
    Ok(value)
}

/// Keys the run functions set themselves, with what to do instead.
const RESERVED: [(&str, &str); 4] = [
    ("json", "results are always the --json output"),
    ("out", "results are returned; write them with json.dump"),
    ("trace", "pass the trace as the `trace` argument"),
    ("format", "results are always the --json output"),
];

/// [`RESERVED`] for `sim compare`, whose `--format` picks report files, not the output.
const RESERVED_COMPARE: [(&str, &str); 3] = [
    ("json", "results are always results.json"),
    (
        "out",
        "results are returned; write a report with the `sim compare` CLI",
    ),
    ("trace", "pass the traces as the `traces` argument"),
];

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the command's output {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// Replace every string `from` in `v` by `to` (a temporary trace path by the trace's label).
fn relabel(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(s) if s == from => *s = to.to_string(),
        Value::Array(a) => a.iter_mut().for_each(|x| relabel(x, from, to)),
        Value::Object(o) => o.values_mut().for_each(|x| relabel(x, from, to)),
        _ => {}
    }
}
