//! Writing a report directory atomically: everything is written into a fresh temporary
//! directory next to the target, then renamed into place, so a reader never sees a
//! half-written report, and a failure leaves the previous one untouched.

use crate::results::Results;
use anyhow::{bail, Context};
use std::path::Path;

/// The grid's results, the input of `sim report` (file of a report directory, relative to it).
pub const RESULTS_JSON: &str = "results.json";
/// One row per run, one column per scalar of its JSON (see [`crate::flatten`]).
pub const RESULTS_CSV: &str = "results.csv";
/// The report in Markdown, figures linked from [`PLOTS_DIR`].
pub const REPORT_MD: &str = "report.md";
/// The report as one self-contained HTML page, figures inline.
pub const REPORT_HTML: &str = "report.html";
/// Directory of the report's SVG figures.
pub const PLOTS_DIR: &str = "plots";

/// Write `results.json`, `results.csv`, `report.md`, `report.html` and `plots/*.svg` for
/// `results` into `dir`, atomically.
///
/// `dir` may be missing (it is created), empty, or a previous report directory (one holding a
/// `results.json`), which is replaced. Any other existing directory or file is refused, so a
/// mistyped `--out` never deletes someone's data.
pub fn write_report(results: &Results, dir: &Path) -> anyhow::Result<()> {
    let json = results.to_json();
    // Render from the text as it will be read back, so `sim report DIR` and merged shards
    // reproduce exactly these bytes.
    let reread = Results::from_json(&json, RESULTS_JSON)?;
    let csv = crate::flatten::to_csv(&reread)?;
    let doc = crate::content::build(&reread)?;
    let md = doc.to_markdown();
    let html = doc.to_html(crate::content::TITLE);
    write_dir_atomically(dir, |tmp| {
        std::fs::write(tmp.join(RESULTS_JSON), &json)?;
        std::fs::write(tmp.join(RESULTS_CSV), &csv)?;
        std::fs::write(tmp.join(REPORT_MD), &md)?;
        std::fs::write(tmp.join(REPORT_HTML), &html)?;
        let plots = tmp.join(PLOTS_DIR);
        std::fs::create_dir(&plots)?;
        for (file, svg) in doc.figures() {
            std::fs::write(plots.join(file), svg)?;
        }
        Ok(())
    })
}

/// Fill a temporary directory next to `dir` with `fill`, then move it to `dir`, replacing a
/// previous report directory there (see [`write_report`] for what may be replaced).
pub fn write_dir_atomically(
    dir: &Path,
    fill: impl FnOnce(&Path) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = dir
        .file_name()
        .with_context(|| format!("--out {}: not a directory name", dir.display()))?;
    if dir.exists() {
        if !dir.is_dir() {
            bail!(
                "--out {}: exists and is not a directory; choose another path",
                dir.display()
            );
        }
        let empty = std::fs::read_dir(dir)?.next().is_none();
        if !empty && !dir.join(RESULTS_JSON).is_file() {
            bail!(
                "--out {}: exists, is not empty and holds no {RESULTS_JSON}, so it is not a report directory; choose a new or empty directory",
                dir.display()
            );
        }
    }
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let prefix = format!(".{}.tmp", name.to_string_lossy());
    // Declared before the directory, so dropped after it: removed, then unregistered. It also
    // covers the staged directory after `keep()`, until it is renamed into place.
    let _live: traces::cleanup::Registered;
    let tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir_in(&parent)
        .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
    _live = traces::cleanup::register(tmp.path());
    fill(tmp.path())
        .with_context(|| format!("writing the report into {}", tmp.path().display()))?;
    // The temporary directory is owner-only (0700); a report is meant to be shared.
    traces::file_mode::share_dir(tmp.path())
        .with_context(|| format!("setting permissions of {}", tmp.path().display()))?;
    let staged = tmp.keep();
    if dir.exists() {
        // Move the old report aside, put the new one in place, then delete the old one.
        let old = tempfile::Builder::new()
            .prefix(&format!(".{}.old", name.to_string_lossy()))
            .tempdir_in(&parent)?
            .keep();
        std::fs::remove_dir(&old)?;
        std::fs::rename(dir, &old)
            .with_context(|| format!("moving the old {} aside", dir.display()))?;
        if let Err(e) = std::fs::rename(&staged, dir) {
            let _ = std::fs::rename(&old, dir);
            let _ = std::fs::remove_dir_all(&staged);
            return Err(e).with_context(|| format!("moving the new report to {}", dir.display()));
        }
        std::fs::remove_dir_all(&old)
            .with_context(|| format!("removing the old report at {}", old.display()))?;
    } else if let Err(e) = std::fs::rename(&staged, dir) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(e).with_context(|| format!("moving the report to {}", dir.display()));
    }
    Ok(())
}
