//! File reads of expert-sized blocks from a directory (an SSD), at queue depths 1 and 4:
//! O_DIRECT where the OS and file system allow it, else buffered reads of a file dropped from
//! the page cache first. The temporary file is removed afterwards (also on error).

use super::Sizes;
use crate::stats::Summary;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// Queue depths measured: one read at a time, and 4 concurrent reads (4 threads).
pub const QUEUE_DEPTHS: [usize; 2] = [1, 4];

/// Alignment of O_DIRECT buffers, offsets and lengths (the largest logical block size of
/// common SSDs, 4 KiB).
const DIRECT_ALIGN: usize = 4096;

/// Reads at one queue depth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SsdPoint {
    /// Concurrent reads in flight.
    pub queue_depth: usize,
    /// Bytes of one read (an expert rounded up to 4 KiB).
    pub block_bytes: usize,
    /// Reads per pass (each block of the file once, in a seeded random order).
    pub reads: usize,
    /// Bytes per µs (= MB/s) of each pass.
    pub bytes_per_us: Summary,
}

/// The SSD arm's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SsdMeasurement {
    /// Directory the temporary file was in.
    pub dir: String,
    /// `O_DIRECT`, or `buffered` with the reason O_DIRECT was refused.
    pub io_mode: String,
    /// Bytes of the temporary file.
    pub file_bytes: usize,
    /// One entry per queue depth.
    pub points: Vec<SsdPoint>,
}

/// Open `path` for O_DIRECT reads, or buffered with the reason.
#[cfg(target_os = "linux")]
fn open_for_reads(path: &Path) -> std::io::Result<(File, String)> {
    use std::os::unix::fs::OpenOptionsExt;
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => Ok((f, "O_DIRECT".into())),
        Err(e) => Ok((
            File::open(path)?,
            format!("buffered (O_DIRECT refused: {e}); file dropped from the page cache first"),
        )),
    }
}

/// Open `path` for buffered reads: O_DIRECT is only used on Linux.
#[cfg(not(target_os = "linux"))]
fn open_for_reads(path: &Path) -> std::io::Result<(File, String)> {
    Ok((
        OpenOptions::new().read(true).open(path)?,
        "buffered (O_DIRECT is used on Linux only; the OS page cache may serve repeats)".into(),
    ))
}

/// Ask the OS to drop the file's pages from the page cache (a hint; harmless under O_DIRECT).
#[cfg(target_os = "linux")]
fn drop_cache(f: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a file descriptor this function borrows.
    unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// No page-cache hint outside Linux.
#[cfg(not(target_os = "linux"))]
fn drop_cache(_f: &File) {}

/// Read `buf.len()` bytes at `offset` without moving a shared cursor.
#[cfg(unix)]
fn read_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    f.read_exact_at(buf, offset)
}

/// Read `buf.len()` bytes at `offset` without moving a shared cursor.
#[cfg(windows)]
fn read_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match f.seek_read(&mut buf[done..], offset + done as u64)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => done += n,
        }
    }
    Ok(())
}

/// Read `blocks` (block indices) of `block` bytes each with one buffer aligned for O_DIRECT.
fn read_blocks(f: &File, blocks: &[usize], block: usize) -> std::io::Result<()> {
    let mut raw = vec![0u8; block + DIRECT_ALIGN];
    let off = raw.as_ptr().align_offset(DIRECT_ALIGN);
    let buf = &mut raw[off..off + block];
    for &b in blocks {
        read_at(f, buf, (b * block) as u64)?;
    }
    Ok(())
}

/// One pass over every block at `depth` concurrent readers; bytes per µs.
fn pass(f: &File, order: &[usize], block: usize, depth: usize) -> std::io::Result<f64> {
    drop_cache(f);
    let t0 = Instant::now();
    let share = order.len().div_ceil(depth);
    std::thread::scope(|s| {
        let handles: Vec<_> = order
            .chunks(share)
            .map(|part| s.spawn(move || read_blocks(f, part, block)))
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("reader thread does not panic"))
    })?;
    Ok((order.len() * block) as f64 / (t0.elapsed().as_secs_f64() * 1e6))
}

/// Write a temporary file of random blocks in `dir`, time reads of it, remove it.
pub fn measure(
    dir: &Path,
    sizes: &Sizes,
    seed: u64,
    progress: &mut dyn FnMut(String),
) -> std::io::Result<SsdMeasurement> {
    let block = sizes.ssd_block_bytes.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
    let n = (sizes.ssd_file_bytes / block).max(QUEUE_DEPTHS[1]);
    let mut tmp = tempfile::Builder::new()
        .prefix(".sim-host-ssd")
        .tempfile_in(dir)?;
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut chunk = vec![0u8; block];
    for _ in 0..n {
        rng.fill_bytes(&mut chunk);
        tmp.write_all(&chunk)?;
    }
    tmp.as_file().sync_all()?;
    let (f, io_mode) = open_for_reads(tmp.path())?;
    let mut order: Vec<usize> = (0..n).collect();
    let mut points = Vec::new();
    for depth in QUEUE_DEPTHS {
        let mut rates = Vec::new();
        for _ in 0..sizes.ssd_passes {
            order.shuffle(&mut rng);
            rates.push(pass(&f, &order, block, depth)?);
        }
        let bytes_per_us = Summary::of(&rates).expect("finite rates");
        progress(format!(
            "host file reads of {block} B at queue depth {depth} ({io_mode}): {:.0} MB/s",
            bytes_per_us.median
        ));
        points.push(SsdPoint {
            queue_depth: depth,
            block_bytes: block,
            reads: n,
            bytes_per_us,
        });
    }
    drop(f);
    tmp.close()?;
    Ok(SsdMeasurement {
        dir: dir.display().to_string(),
        io_mode,
        file_bytes: n * block,
        points,
    })
}
