//! Host calibration without a GPU: the CPU's expert kernels, the memory read bandwidth and
//! file reads from an SSD, measured on any machine (the CUDA driver is never loaded), and the
//! host profile built from them.

pub mod expert_arms;
pub mod expert_kernel;
pub mod lane_replay;
pub mod memory;
pub mod ssd;
pub mod to_profile;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Instant;

/// What `sim calibrate --only host` measures.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Small sizes and few repetitions (for tests; the figures are not representative).
    pub quick: bool,
    /// Seed of the random weights, activations and read orders.
    pub seed: u64,
    /// Directory for the file-read arm; `None` skips it.
    pub ssd_path: Option<PathBuf>,
}

/// Sizes and repetition counts of one run (full or quick).
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Expert geometries `(hidden, ffn, group)`, smallest first.
    pub geometries: Vec<(usize, usize, usize)>,
    /// Bytes of each expert bank (many times the last-level cache in the full run).
    pub bank_bytes: usize,
    /// Interleaved rounds over every expert point.
    pub rounds: usize,
    /// Most timed calls per point and round.
    pub samples_per_round: usize,
    /// A point's round stops after this many seconds once it has a sample.
    pub seconds_per_round: f64,
    /// Bytes of the streaming-read buffer.
    pub memory_bytes: usize,
    /// Timed passes of the streaming read.
    pub memory_passes: usize,
    /// Bytes of one file read (an expert).
    pub ssd_block_bytes: usize,
    /// Bytes of the temporary file.
    pub ssd_file_bytes: usize,
    /// Timed passes over the file per queue depth.
    pub ssd_passes: usize,
    /// Threads of the machine (`std::thread::available_parallelism`).
    pub all_threads: usize,
}

impl Sizes {
    /// The full run: Qwen3-30B-A3B's hidden size 2048 with expert FFN 384, 768 (its own) and
    /// 1536, group 128 (int4 1.3 to 5.0 MB, bf16 4.7 to 18.9 MB per expert); expert banks of
    /// 4 times and a read buffer of 8 times the last-level cache ([`last_level_cache_bytes`]),
    /// at least 128 and 256 MiB (4 and 8 times the 32 MiB L3 of the development machine's
    /// EPYC, also used where the cache size is unknown), so weights and reads come from DRAM
    /// (the H200 machine's Xeon reports a 300 MiB L3); a file of 256 MiB (O_DIRECT or
    /// dropped from the page cache: no CPU cache holds it).
    pub fn full() -> Self {
        let llc = last_level_cache_bytes().unwrap_or(0);
        Sizes {
            geometries: vec![(2048, 384, 128), (2048, 768, 128), (2048, 1536, 128)],
            bank_bytes: (4 * llc).max(128 << 20),
            rounds: 15,
            samples_per_round: 9,
            seconds_per_round: 0.12,
            memory_bytes: (8 * llc).max(256 << 20),
            memory_passes: 7,
            ssd_block_bytes: kernels::ExpertGeometry::new(2048, 768, 128)
                .expect("valid")
                .expert_bytes(),
            ssd_file_bytes: 256 << 20,
            ssd_passes: 3,
            all_threads: all_threads(),
        }
    }

    /// The quick run (tests): tiny experts, MiB-sized buffers, 3 repetitions.
    pub fn quick() -> Self {
        Sizes {
            geometries: vec![(128, 32, 32), (128, 64, 32), (128, 128, 32)],
            bank_bytes: 1 << 20,
            rounds: 2,
            samples_per_round: 2,
            seconds_per_round: 0.0,
            memory_bytes: 4 << 20,
            memory_passes: 3,
            ssd_block_bytes: 64 << 10,
            ssd_file_bytes: 1 << 20,
            ssd_passes: 2,
            all_threads: all_threads(),
        }
    }

    /// 1 and all threads (just 1 on a single-thread machine).
    pub fn thread_counts(&self) -> Vec<usize> {
        if self.all_threads > 1 {
            vec![1, self.all_threads]
        } else {
            vec![1]
        }
    }
}

/// Bytes of the largest CPU cache of CPU 0 as Linux reports it
/// (`/sys/devices/system/cpu/cpu0/cache/index*/size`, e.g. `32768K`); `None` elsewhere or
/// when unreadable.
pub fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let size = std::fs::read_to_string(e.ok()?.path().join("size")).ok()?;
        parse_cache_size(size.trim())
    })
    .max()
}

/// `32768K`, `300M`, `1G` or a plain byte count, as sysfs writes cache sizes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(1 << shift)
}

/// Threads the OS lets this process run at once (the calibration's "all threads").
pub fn all_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A rayon pool of `threads` threads.
pub fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool of a few threads builds")
}

/// Everything one host calibration measured (written beside the profile).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostCalibration {
    /// CPU model as the OS reports it.
    pub cpu: String,
    /// Operating system.
    pub os: String,
    /// Threads of "all threads".
    pub all_threads: usize,
    /// Date, `YYYY-MM-DD` UTC.
    pub date: String,
    /// True for a `--quick` run.
    pub quick: bool,
    /// Seed of the random data.
    pub seed: u64,
    /// Bytes of each expert bank the kernel arm cycles through.
    pub expert_bank_bytes: usize,
    /// Expert kernel points.
    pub experts: Vec<expert_arms::ExpertPoint>,
    /// Fits of call time against expert bytes.
    pub expert_fits: Vec<expert_arms::ExpertFit>,
    /// Streaming reads.
    pub memory: Vec<memory::MemoryPoint>,
    /// File reads; absent without `--ssd-path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssd: Option<ssd::SsdMeasurement>,
    /// Wall time of the whole calibration, s (pooled sets: the median of theirs).
    pub wall_s: f64,
    /// How many host calibrations this set pools ([`crate::pool::pool_host`]); absent for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooled_from: Option<u32>,
}

/// CPU brand string (sysinfo), `unknown CPU` when the OS gives none.
fn cpu_name() -> String {
    use sysinfo::{CpuRefreshKind, RefreshKind, System};
    System::new_with_specifics(RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing()))
        .ok()
        .and_then(|sys| sys.cpus().first().map(|c| c.brand().trim().to_string()))
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Run every host arm; `progress` gets one line per measured point. Errors only from the
/// file-read arm (I/O in `ssd_path`).
pub fn calibrate_host(
    opts: &HostOptions,
    progress: &mut dyn FnMut(String),
) -> std::io::Result<HostCalibration> {
    let start = Instant::now();
    let sizes = if opts.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    let mut experts = expert_arms::measure(opts, &sizes, expert_kernel::Format::Int4, progress);
    experts.extend(expert_arms::measure(
        opts,
        &sizes,
        expert_kernel::Format::Bf16,
        progress,
    ));
    let memory = memory::measure(&sizes, progress);
    let ssd = match &opts.ssd_path {
        Some(dir) => Some(ssd::measure(dir, &sizes, opts.seed, progress)?),
        None => None,
    };
    Ok(HostCalibration {
        cpu: cpu_name(),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        all_threads: sizes.all_threads,
        date: crate::device::today_utc(),
        quick: opts.quick,
        seed: opts.seed,
        expert_bank_bytes: sizes.bank_bytes,
        expert_fits: expert_arms::fits(&experts),
        experts,
        memory,
        ssd,
        wall_s: start.elapsed().as_secs_f64(),
        pooled_from: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("300M"), Some(300 << 20));
        assert_eq!(parse_cache_size("1G"), Some(1 << 30));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        assert_eq!(parse_cache_size("12X"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    #[test]
    fn the_full_run_reads_from_beyond_the_last_level_cache() {
        let s = Sizes::full();
        let llc = last_level_cache_bytes().unwrap_or(0);
        assert!(s.bank_bytes >= 4 * llc && s.bank_bytes >= 128 << 20);
        assert!(s.memory_bytes >= 8 * llc && s.memory_bytes >= 256 << 20);
    }
}
