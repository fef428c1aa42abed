//! Permissions of finished output files and directories.
//!
//! The workspace's writers write into a temporary file (or directory) next to the target and
//! rename it into place, so that an interrupted run never leaves half an output. `tempfile`
//! creates those owner-only (files 0600, directories 0700); the outputs are ordinary data, so
//! before the rename they get the modes an ordinary `File::create` / `create_dir` gives under
//! the usual umask 022: 0644 for files, 0755 for directories. On non-unix platforms there are
//! no such modes and both functions do nothing.
//!
//! Every crate that depends on `traces` uses these (traces, reports, sim); `profile` depends on
//! no workspace crate and keeps its own copy of [`share_file`].

use std::fs::File;
use std::io;
use std::path::Path;

/// Give the finished file `file` mode 0644 (rw-r--r--). Errors: the OS refused `fchmod`.
pub fn share_file(file: &File) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

/// Give the finished directory `dir` mode 0755 (rwxr-xr-x). Errors: the OS refused `chmod`.
pub fn share_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn temp_files_and_dirs_become_0644_and_0755() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(
            tmp.as_file().metadata().unwrap().permissions().mode() & 0o777,
            0o600
        );
        share_file(tmp.as_file()).unwrap();
        assert_eq!(
            tmp.as_file().metadata().unwrap().permissions().mode() & 0o777,
            0o644
        );

        let dir = tempfile::tempdir().unwrap();
        share_dir(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
    }
}
