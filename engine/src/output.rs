//! Atomic output files: every file the simulator writes goes through a temporary file in the
//! target directory that is renamed over the target only when complete, so an interrupted or
//! failed run never leaves a half-written file.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Write `path` by calling `body` on a buffered writer over a temporary file in the same
/// directory, then rename it into place (mode 0644 on unix). Errors name the directory or the
/// file that could not be written; on error the temporary file is removed.
pub fn write_atomic_with(
    path: &Path,
    body: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    // Declared before the file, so dropped after it: removed, then unregistered.
    let _live: traces::cleanup::Registered;
    let mut tmp = traces::cleanup::temp_file_beside(path, ".out-")?;
    _live = traces::cleanup::register(tmp.path());
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        body(&mut w)
            .and_then(|()| w.flush().map_err(Into::into))
            .with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    traces::file_mode::share_file(tmp.as_file())
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    Ok(())
}

/// [`write_atomic_with`] for bytes already in memory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |w| Ok(w.write_all(bytes)?))
}
