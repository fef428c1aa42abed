//! Hidden temporary outputs removed when the process is interrupted.
//!
//! Every writer of the workspace writes into a hidden temporary file (or directory) next to
//! its target and renames it into place when complete; dropping it on an error removes it.
//! A process ended by a signal runs no destructors, so each writer also registers its
//! temporary path here for as long as it exists, and [`remove_on_signals`] installs a handler
//! (the `ctrlc` crate, with its `termination` feature: SIGINT, SIGTERM and SIGHUP on unix,
//! Ctrl-C and Ctrl-Break on Windows) that removes every registered path and exits with status
//! 130, the shell's status for a process interrupted by SIGINT.
//!
//! The handler runs on a thread of its own, so it may remove a file that the main thread is
//! still writing: the main thread's writes then go to an unlinked file, and the process exits
//! before it could rename it. A path that was already renamed into place is no longer there
//! to remove (removal errors are ignored), so a complete output is never deleted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Exit status after an interruption: 128 + SIGINT (2), the shell's convention.
pub const INTERRUPTED_STATUS: i32 = 130;

static LIVE: Mutex<BTreeMap<u64, PathBuf>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn live() -> MutexGuard<'static, BTreeMap<u64, PathBuf>> {
    // A panic while the lock was held cannot leave the map half-updated (each operation is
    // one insert or remove), so a poisoned lock is still usable.
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A registered temporary path; dropping it unregisters the path (it does not remove it: the
/// owner of the temporary file does, or has renamed it). Keep it alive exactly as long as the
/// temporary path exists: declare it after the temporary file in a struct, so that the file is
/// removed before the path is unregistered.
#[derive(Debug)]
#[must_use = "the path is unregistered when this guard is dropped"]
pub struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        live().remove(&self.0);
    }
}

/// Register `path` (a temporary file or directory) for removal on an interruption.
pub fn register(path: &Path) -> Registered {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    live().insert(id, path.to_path_buf());
    Registered(id)
}

/// The paths registered now (for tests and diagnostics).
pub fn registered() -> Vec<PathBuf> {
    live().values().cloned().collect()
}

/// Remove every registered path (files, and directories with their contents); returns how
/// many were removed. Paths that are already gone are skipped.
pub fn remove_registered() -> usize {
    remove_paths(take(|_| true))
}

/// Unregister the paths for which `which` holds and return them.
fn take(which: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut map = live();
    let ids: Vec<u64> = map
        .iter()
        .filter(|(_, p)| which(p))
        .map(|(&id, _)| id)
        .collect();
    ids.iter().filter_map(|id| map.remove(id)).collect()
}

/// Remove `paths` (files, and directories with their contents); returns how many were there.
fn remove_paths(paths: Vec<PathBuf>) -> usize {
    paths
        .iter()
        .filter(|p| {
            let removed = match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
                Ok(_) => std::fs::remove_file(p),
                Err(e) => Err(e),
            };
            removed.is_ok()
        })
        .count()
}

/// Install the handler that, on SIGINT, SIGTERM or SIGHUP (Ctrl-C or Ctrl-Break on Windows),
/// removes every registered temporary path, says so on stderr and exits with
/// [`INTERRUPTED_STATUS`]. Call it once, at the start of a binary's `main`. Errors: a handler
/// was already installed, or the system refused one.
pub fn remove_on_signals() -> Result<(), ctrlc::Error> {
    ctrlc::set_handler(|| {
        let n = remove_registered();
        if n > 0 {
            eprintln!("interrupted: removed {n} unfinished temporary output(s)");
        } else {
            eprintln!("interrupted");
        }
        std::process::exit(INTERRUPTED_STATUS);
    })
}

/// The directory an output file at `output` is written in: its parent, or `.` for a bare
/// file name.
pub fn dir_of(output: &Path) -> &Path {
    match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A hidden temporary file `{prefix}XXXXXX.tmp` beside `output` (in [`dir_of`] it), to be
/// renamed to it; errors use the output's name. Errors:
/// [`crate::TraceError::OutputIsDirectory`] when `output` is a directory or ends in a
/// separator, [`crate::TraceError::NoDirectory`] when its directory does not exist (not the
/// temporary name, which the user never gave), else the system's.
pub fn temp_file_beside(
    output: &Path,
    prefix: &str,
) -> Result<tempfile::NamedTempFile, crate::TraceError> {
    let file = output.display().to_string();
    let trailing = output
        .as_os_str()
        .to_string_lossy()
        .ends_with(std::path::MAIN_SEPARATOR);
    if trailing || output.is_dir() {
        let file = file.trim_end_matches(std::path::MAIN_SEPARATOR).to_string();
        return Err(crate::TraceError::OutputIsDirectory { file });
    }
    let dir = dir_of(output);
    if !dir.is_dir() {
        return Err(crate::TraceError::NoDirectory {
            file,
            dir: dir.display().to_string(),
        });
    }
    tempfile::Builder::new()
        .prefix(prefix)
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| crate::TraceError::io(&file, "creating a temporary file in its directory", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_paths_are_removed_and_dropped_guards_forget_theirs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".a.tmp");
        let sub = dir.path().join(".b.tmp");
        std::fs::write(&file, b"partial").unwrap();
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("x"), b"partial").unwrap();
        let kept = dir.path().join(".c.tmp");
        std::fs::write(&kept, b"renamed away before the signal").unwrap();
        let _a = register(&file);
        let _b = register(&sub);
        let gone = register(&dir.path().join(".never-created"));
        {
            let _c = register(&kept);
        }
        assert!(registered().contains(&file));
        assert!(!registered().contains(&kept));
        // Other tests of this crate may have registered their own paths: take only ours.
        let ours = take(|p| p.starts_with(dir.path()));
        assert_eq!(ours.len(), 3);
        assert_eq!(remove_paths(ours), 2, "the path never created is skipped");
        drop(gone);
        assert!(!file.exists() && !sub.exists());
        assert!(kept.exists(), "an unregistered path is left alone");
        assert!(!registered().contains(&file));
    }
}
