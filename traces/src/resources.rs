//! What the machine can hold, asked before allocating or writing anything whose size follows
//! a declared geometry or token count rather than data already read: the memory available
//! now (`sysinfo`, which reads `MemAvailable` and the cgroup limit on Linux) and the space free
//! in a directory (`fs4`, `statvfs` / `GetDiskFreeSpaceExW`).
//!
//! A figure the system cannot give is unknown (`None`) and the check then passes: refusing
//! work because a query failed would be worse than the allocation failure it guards against.

use std::path::Path;

/// The memory this process could allocate now, bytes: the system's available memory, or the
/// cgroup's free memory when that is lower; `None` when the system does not say.
pub fn available_memory() -> Option<u64> {
    use sysinfo::{MemoryRefreshKind, RefreshKind, System};
    let sys = System::new_with_specifics(
        RefreshKind::nothing().with_memory(MemoryRefreshKind::nothing().with_ram()),
    )
    .ok()?;
    let avail = sys.available_memory();
    if avail == 0 {
        return None;
    }
    Some(match sys.cgroup_limits() {
        Some(c) if c.free_memory > 0 => avail.min(c.free_memory),
        _ => avail,
    })
}

/// Bytes an unprivileged writer may still write into the file system holding `dir`; `None`
/// when `dir` does not exist or the system does not say.
pub fn free_space(dir: &Path) -> Option<u64> {
    fs4::available_space(dir).ok()
}

/// `need` bytes does not fit in `available` (an unknown figure always fits).
pub fn exceeds(need: u128, available: Option<u64>) -> bool {
    available.is_some_and(|a| need > a as u128)
}

/// A byte count as people read it: exact, with thousands separators, and in the nearest
/// binary unit (`98,304 bytes (96.0 KiB)`).
pub fn bytes_words(n: u128) -> String {
    let digits = n.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    const UNITS: [&str; 7] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB"];
    let mut x = n as f64;
    let mut unit = None;
    for u in UNITS {
        if x < 1024.0 {
            break;
        }
        x /= 1024.0;
        unit = Some(u);
    }
    match unit {
        Some(u) if x < 1024.0 => format!("{grouped} bytes ({x:.1} {u})"),
        Some(u) => format!("{grouped} bytes ({x:.3e} {u})"),
        None => format!("{grouped} bytes"),
    }
}

/// Too much of the machine asked for.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// Tables sized by a declared geometry would not fit in the memory available.
    #[error("{what} would need {}, more than the {} of memory available now{}", bytes_words(*.need), bytes_words(*.available as u128), if .fix.is_empty() { String::new() } else { format!("; {}", .fix) })]
    Memory {
        /// What would be allocated.
        what: String,
        /// Bytes it would need.
        need: u128,
        /// Bytes available.
        available: u64,
        /// How to ask for less.
        fix: String,
    },
}

/// Refuse `need` bytes of `what` when the memory available now cannot hold them.
pub fn check_memory(what: &str, need: u128, fix: &str) -> Result<(), ResourceError> {
    check_memory_against(what, need, fix, available_memory())
}

/// [`check_memory`] against a given figure (`None`: unknown, so it passes).
pub fn check_memory_against(
    what: &str,
    need: u128,
    fix: &str,
    available: Option<u64>,
) -> Result<(), ResourceError> {
    match available {
        Some(a) if exceeds(need, available) => Err(ResourceError::Memory {
            what: what.to_string(),
            need,
            available: a,
            fix: fix.to_string(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_exactly_and_in_binary_units() {
        assert_eq!(bytes_words(0), "0 bytes");
        assert_eq!(bytes_words(1023), "1,023 bytes");
        assert_eq!(bytes_words(98_304), "98,304 bytes (96.0 KiB)");
        // 3 x 2^30 + 2^29 = 3.5 GiB
        assert_eq!(bytes_words(3_758_096_384), "3,758,096,384 bytes (3.5 GiB)");
        assert!(bytes_words(u128::MAX).ends_with("ZiB)"));
    }

    #[test]
    fn the_check_refuses_only_what_exceeds_a_known_figure() {
        assert!(check_memory_against("t", 10, "f", Some(10)).is_ok());
        assert!(check_memory_against("t", 10, "f", None).is_ok());
        let e = check_memory_against("the tables", 11, "ask for less", Some(10)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the tables would need 11 bytes, more than the 10 bytes of memory available now; ask for less"
        );
    }

    #[test]
    fn this_machine_reports_its_memory_and_disk() {
        let m = available_memory().expect("the test machine reports its memory");
        assert!(m > 1 << 20, "{m}");
        let d = free_space(Path::new(".")).expect("and its free space");
        assert!(d > 0);
        assert_eq!(free_space(Path::new("/no/such/dir/anywhere")), None);
    }
}
