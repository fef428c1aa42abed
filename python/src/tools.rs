//! The trace tools: `sim trace import`, `gen`, `export` and `stats`, each with its CLI
//! options as a dict, returning a `Trace` or the `--json` output.

use crate::cli::{flags, invoke};
use crate::trace::TraceFile;
use anyhow::{bail, Result};
use serde_json::Value;
use std::path::Path;

/// `sim trace import --format FORMAT FILE` with `options`: the imported trace (one-trace
/// formats: the file's; per-prompt formats: `all`, every prompt).
pub fn import(format: &str, file: &Path, options: &Value) -> Result<(traces::Trace, String)> {
    let dir = tempfile::Builder::new()
        .prefix("moe-paging-sim-")
        .tempdir()?;
    let mut args = vec![
        "trace".into(),
        "import".into(),
        "--format".into(),
        format.into(),
    ];
    args.push(file.display().to_string());
    args.extend(flags(
        options,
        "sim trace import",
        &[
            ("out", "the trace is returned; save it with Trace.save"),
            ("format", "pass it as the `format` argument"),
        ],
    )?);
    args.extend(["--out".into(), dir.path().display().to_string()]);
    invoke(&args)?;
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let written = [
        dir.path().join(format!("{stem}.bin")),
        dir.path().join("all.bin"),
    ];
    let Some(path) = written.iter().find(|p| p.is_file()) else {
        bail!("the import wrote no trace file");
    };
    Ok((traces::read_file(path)?, file.display().to_string()))
}

/// `sim trace gen` with `options` (its `--out` and `--json` aside): the generated trace,
/// whose header records the generator parameters and seed.
pub fn gen(options: &Value) -> Result<traces::Trace> {
    let dir = tempfile::Builder::new()
        .prefix("moe-paging-sim-")
        .tempdir()?;
    let trace = dir.path().join("gen.bin");
    let mut args = vec!["trace".into(), "gen".into()];
    args.extend(flags(
        options,
        "sim trace gen",
        &[
            ("out", "the trace is returned; save it with Trace.save"),
            ("json", "the generator parameters are in the trace's header"),
        ],
    )?);
    args.extend(["--out".into(), trace.display().to_string()]);
    invoke(&args)?;
    Ok(traces::read_file(&trace)?)
}

/// `sim trace export --format FORMAT TRACE --out OUT` with `options`; its `--json` summary.
pub fn export(trace: &TraceFile, format: &str, out: &Path, options: &Value) -> Result<()> {
    let mut args = vec![
        "trace".into(),
        "export".into(),
        "--format".into(),
        format.into(),
    ];
    args.push(trace.path.display().to_string());
    args.extend(flags(
        options,
        "sim trace export",
        &[
            ("out", "pass it as the `out` argument"),
            ("format", "pass it as the `format` argument"),
        ],
    )?);
    args.extend(["--out".into(), out.display().to_string()]);
    invoke(&args)
}

/// `sim trace stats --json` of `trace` over `phase` (decode, prefill or all).
pub fn stats(trace: &TraceFile, phase: &str) -> Result<Value> {
    let phases = match phase {
        "decode" => traces::PhaseSel::Decode,
        "prefill" => traces::PhaseSel::Prefill,
        "all" => traces::PhaseSel::All,
        other => bail!("phase {other:?} is not one of decode, prefill, all"),
    };
    let st = sim::cmd::trace_stats::stats_of_file(&trace.path, phases, &|_| {})?;
    Ok(serde_json::to_value(&st)?)
}
