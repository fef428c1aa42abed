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
    /// 128 MiB, a read buffer and file of 256 MiB: 4 and 8 times the 32 MiB L3 of the
    /// development machine's EPYC.
    pub fn full() -> Self {
        Sizes {
            geometries: vec![(2048, 384, 128), (2048, 768, 128), (2048, 1536, 128)],
            bank_bytes: 128 << 20,
            rounds: 15,
            samples_per_round: 9,
            seconds_per_round: 0.12,
            memory_bytes: 256 << 20,
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
