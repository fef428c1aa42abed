//! `sim validate --reprice DIR...`: every stored replay under the DIRs re-priced with the flags
//! it records, as `--measured` would with those flags given by hand.

use super::{emit, priced, ValidateArgs};
use anyhow::{bail, Context, Result};
use clap::Parser;
use sim::validation::analysis::analyse;
use sim::validation::composition::composition;
use sim::validation::coverage::{self, RowContext};
use sim::validation::reprice::{families, RepricedRow, Repricing, RowInterval, Skipped, Within};
use sim::validation::Validation;
use std::path::{Path, PathBuf};

/// `sim validate`'s arguments alone, to parse the flags a stored file records.
#[derive(Parser)]
#[command(name = "validate")]
struct One {
    #[command(flatten)]
    a: ValidateArgs,
}

/// Re-price every stored replay under `args.reprice` and print (or `--json`) the summary.
pub(super) fn run(args: &ValidateArgs) -> Result<()> {
    // a --hw that does not load is the user's error, said once, not once per stored file
    if let Some(hw) = &args.timing.hw {
        profile::load(hw).with_context(|| format!("--hw {hw}"))?;
    }
    let files = stored_replays(&args.reprice)?;
    let mut out = Repricing {
        hw: args.timing.hw.clone(),
        rows: Vec::new(),
        families: Vec::new(),
        skipped: Vec::new(),
        within: Within::default(),
    };
    let mut notes: Vec<String> = Vec::new();
    for (path, v) in &files {
        let file = path.display().to_string();
        match reprice_one(args, path, v) {
            Ok((rows, note)) => {
                out.rows.extend(rows);
                notes.extend(note.filter(|n| !notes.contains(n)));
            }
            Err(e) => out.skipped.push(Skipped {
                file,
                reason: format!("{e:#}"),
            }),
        }
    }
    for n in &notes {
        eprintln!("{n}");
    }
    out.families = families(&out.rows);
    out.within = Within::of(&out.rows);
    let text = if args.coverage {
        let dirs: Vec<String> = args
            .reprice
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        let command = format!("sim validate --reprice {} --coverage", dirs.join(" "));
        coverage::markdown(&coverage::regions(&out.rows), &command)
    } else if args.json {
        serde_json::to_string_pretty(&serde_json::json!({ "reprice": out }))? + "\n"
    } else {
        out.text()
    };
    emit(args.out.as_deref(), &text)
}

/// Every JSON file under `dirs` (recursively, in path order) that holds a `validation` block
/// with rows; other JSON files (calibrations, measurement sets) are passed over. Errors: a DIR
/// that is not a directory, or no stored replay under any.
fn stored_replays(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, Validation)>> {
    let mut out = Vec::new();
    for dir in dirs {
        if !dir.is_dir() {
            bail!("--reprice {}: not a directory; give the folders that hold stored replays (e.g. validate/data)", dir.display());
        }
        for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
            let entry = entry.with_context(|| format!("--reprice {}", dir.display()))?;
            let path = entry.path();
            if !entry.file_type().is_file() || path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            if let Some(v) = read_validation(path) {
                out.push((path.to_path_buf(), v));
            }
        }
    }
    if out.is_empty() {
        let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        bail!(
            "--reprice {}: no stored replay (a JSON file `sim validate --json` wrote) under it",
            names.join(" ")
        );
    }
    Ok(out)
}

/// The validation block of a JSON file, `None` when it has none (or is not JSON).
fn read_validation(path: &Path) -> Option<Validation> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let block = v.get("validation").filter(|b| b.get("rows").is_some())?;
    serde_json::from_value(block.clone()).ok()
}

/// One file's re-priced rows and the GPU note it raised. Errors: the reason it cannot be
/// re-priced.
fn reprice_one(
    args: &ValidateArgs,
    path: &Path,
    v: &Validation,
) -> Result<(Vec<RepricedRow>, Option<String>)> {
    let argv = recorded_flags(args, path, v)?;
    let one = One::try_parse_from(&argv)
        .map_err(|e| anyhow::anyhow!("its recorded flags do not parse ({})", e.kind()))?;
    let p = priced(&one.a)?;
    let verdicts = analyse(&p.validation, &p.predictions, None).rows;
    let compositions = p
        .validation
        .rows
        .iter()
        .zip(&p.predictions)
        .map(|(r, pp)| composition(r, pp))
        .collect::<Result<Vec<_>>>()?;
    let mut rows = RepricedRow::of(
        &path.display().to_string(),
        &v.trace,
        &p.validation,
        &verdicts,
        &compositions,
    );
    let batch = v.retention_settings.as_ref().map_or(1, |s| s.batch);
    for (row, pred) in rows.iter_mut().zip(&p.predictions) {
        let live = pred.live_granules_per_step();
        row.context = Some(RowContext::new(&v.hw, &v.model, batch, &live));
    }
    if args.intervals > 0 {
        let hw = profile::load(one.a.timing.hw.as_deref().unwrap_or_default())?;
        for ((row, pred), r) in rows.iter_mut().zip(&p.predictions).zip(&p.validation.rows) {
            let interval = sim::validation::interval::interval(pred, &hw, args.intervals, 0)?;
            let measured = r.measured.p50_ms;
            row.interval = Some(RowInterval {
                interval,
                measured_p50_ms: measured,
                inside: interval.holds_p50(measured),
            });
        }
    }
    Ok((rows, p.gpu_note))
}

/// The `sim validate --measured` flags that reproduce `v` (recorded in `path`): its trace,
/// expert size, granule, steps, policies and retention, and the profile (`--hw`, else the one
/// it was recorded with when shipped). Errors: the trace is missing, the rows disagree on
/// their steps, or the profile is not shipped and no --hw was given.
fn recorded_flags(args: &ValidateArgs, path: &Path, v: &Validation) -> Result<Vec<String>> {
    let Some(trace) = find_trace(&v.trace, path) else {
        bail!("its trace {} is not there (a relative path is looked for under the current directory and every folder above the file)", v.trace);
    };
    let hw = match &args.timing.hw {
        Some(hw) => hw.clone(),
        None if profile::shipped_names().contains(&v.hw.as_str()) => v.hw.clone(),
        None => bail!(
            "it was priced with profile {}, which is not shipped: pass --hw",
            v.hw
        ),
    };
    let steps = v.rows.first().map_or(0, |r| r.steps);
    if v.rows.iter().any(|r| r.steps != steps) {
        bail!("its rows measured different numbers of steps; re-price it with --measured and the flags it was recorded with");
    }
    let mib = |b: u64| (b as f64 / sim::MIB).to_string();
    let mut argv: Vec<String> = [
        "validate",
        "--trace",
        &trace,
        "--expert-mib",
        &mib(v.expert_bytes),
    ]
    .map(String::from)
    .to_vec();
    if let Some(g) = v.vmm_granule_bytes {
        argv.extend(["--granule-mib".into(), mib(g)]);
    }
    let policies: Vec<&str> = v.rows.iter().map(|r| r.policy.as_str()).collect();
    argv.extend([
        "--steps".into(),
        steps.to_string(),
        "--policy".into(),
        policies.join(","),
    ]);
    argv.extend(retention_flags(v)?);
    argv.extend([
        "--hw".into(),
        hw,
        "--measured".into(),
        path.display().to_string(),
    ]);
    Ok(argv)
}

/// The stored trace path `trace` as it resolves now: as given (absolute, or relative to the
/// current directory), else relative to a folder above `file` (a replay is recorded from the
/// repository root and stored below it). `None` when no such file exists.
fn find_trace(trace: &str, file: &Path) -> Option<String> {
    let given = Path::new(trace);
    if given.is_file() {
        return Some(trace.to_string());
    }
    if given.is_absolute() {
        return None;
    }
    let dir = std::fs::canonicalize(file).ok()?;
    dir.ancestors()
        .skip(1)
        .map(|a| a.join(given))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

/// The retention flags of `v` (none for streaming).
fn retention_flags(v: &Validation) -> Result<Vec<String>> {
    if v.retention == "streaming" {
        return Ok(Vec::new());
    }
    let Some((_, flags)) = super::legacy_retention(&v.retention) else {
        bail!("its retention {} is not one this build writes", v.retention);
    };
    let mut out: Vec<String> = flags.split_whitespace().map(String::from).collect();
    if let Some(st) = &v.retention_settings {
        out.extend([
            "--split".into(),
            st.split.clone(),
            "--semantics".into(),
            st.semantics.clone(),
        ]);
        out.extend([
            "--batch".into(),
            st.batch.to_string(),
            "--schedule".into(),
            st.schedule.clone(),
        ]);
        if let Some(q) = st.queue {
            out.extend(["--queue".into(), q.to_string()]);
        }
    }
    Ok(out)
}
