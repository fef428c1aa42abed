//! Belady's next uses without holding the stream: a forward pass logs every access's unit to
//! an anonymous temporary file, a backward pass over that file's blocks writes each access's
//! next use into a second one at the same offsets (the way libCacheSim's `oracleGeneral`
//! carries next-access times beside its requests), and the replay reads the next uses
//! alongside the forward pass, block by block.
//!
//! The files come from `tempfile::tempfile` in the system's temporary directory: they have no
//! name from the start (O_TMPFILE on Linux, or created and unlinked at once), so the system
//! frees them when the process ends, however it ends (a signal, a kill), and nothing is left
//! behind for `traces::cleanup` to remove. They take 4 bytes per access each.

use super::positioned::{read_exact_at, write_all_at};
use anyhow::{bail, Context, Result};
use policies::retention::NEVER;
use std::fs::File;
use std::io::{BufWriter, Write};

/// Accesses per block of the backward pass and of the replay's reads (1 M accesses: 4 MiB of
/// u32, the trace reader's block size).
const BLOCK: usize = 1 << 20;

/// The units of a stream's accesses in order, being written to a temporary file.
pub struct AccessLog {
    out: BufWriter<File>,
    len: u64,
}

impl AccessLog {
    /// An empty log in the system's temporary directory, refused up front when `accesses`
    /// (the stream's length bound, from the header) would not fit twice in the free space.
    pub fn new(accesses: u64) -> Result<AccessLog> {
        let dir = std::env::temp_dir();
        let need = accesses as u128 * 8;
        if traces::resources::exceeds(need, traces::resources::free_space(&dir)) {
            bail!(
                "Belady's next uses need up to {} of temporary files in {}, more than is free; free space there, or point TMPDIR at a larger file system",
                traces::resources::bytes_words(need),
                dir.display()
            );
        }
        let file = tempfile::tempfile_in(&dir)
            .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
        Ok(AccessLog {
            out: BufWriter::with_capacity(BLOCK * 4, file),
            len: 0,
        })
    }

    /// Log the units of one group, in access order.
    pub fn push(&mut self, units: &[u32]) -> Result<()> {
        for &u in units {
            self.out.write_all(&u.to_le_bytes())?;
        }
        self.len += units.len() as u64;
        Ok(())
    }

    /// The next use of every logged access ([`crate::cache::AccessStream::next_use`]'s
    /// numbering), by one backward pass over the log's blocks; `num_units` bounds the ids.
    pub fn next_uses(self, num_units: usize) -> Result<NextUses> {
        let len = self.len;
        let log = self
            .out
            .into_inner()
            .map_err(|e| e.into_error())
            .context("writing the temporary access log")?;
        let next = tempfile::tempfile_in(std::env::temp_dir())
            .context("creating a temporary file for next uses")?;
        next.set_len(len * 4)?;
        let mut last = vec![NEVER; num_units];
        let (mut units, mut raw) = (Vec::with_capacity(BLOCK), vec![0u8; BLOCK * 4]);
        let mut end = len;
        while end > 0 {
            let start = end.saturating_sub(BLOCK as u64);
            let n = (end - start) as usize;
            read_exact_at(&log, &mut raw[..n * 4], start * 4)
                .context("reading the temporary access log")?;
            units.clear();
            units.extend(raw[..n * 4].chunks_exact(4).map(le_u32));
            for (i, &u) in units.iter().enumerate().rev() {
                let pos = start as u32 + i as u32;
                raw[i * 4..i * 4 + 4].copy_from_slice(&last[u as usize].to_le_bytes());
                last[u as usize] = pos;
            }
            write_all_at(&next, &raw[..n * 4], start * 4)
                .context("writing the temporary next-use file")?;
            end = start;
        }
        Ok(NextUses {
            file: next,
            len,
            buf: Vec::new(),
            at: 0,
            read: 0,
            raw,
        })
    }
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// The next uses of a stream, read forward block by block as the replay asks for them.
pub struct NextUses {
    file: File,
    /// Accesses in the file, and accesses read from it so far.
    len: u64,
    read: u64,
    /// Read but not yet taken: `buf[at..]`.
    buf: Vec<u32>,
    at: usize,
    raw: Vec<u8>,
}

impl NextUses {
    /// The next uses of the next `n` accesses.
    pub fn take(&mut self, n: usize) -> Result<&[u32]> {
        if self.buf.len() - self.at < n {
            self.buf.drain(..self.at);
            self.at = 0;
            let want = (n - self.buf.len()).max(BLOCK) as u64;
            let k = want.min(self.len - self.read) as usize;
            if self.buf.len() + k < n {
                bail!("the replay made more accesses than the pass that logged them; the trace file changed while it was read, run again");
            }
            self.raw.resize(k * 4, 0);
            read_exact_at(&self.file, &mut self.raw, self.read * 4)
                .context("reading the temporary next-use file")?;
            self.read += k as u64;
            self.buf.extend(self.raw.chunks_exact(4).map(le_u32));
        }
        self.at += n;
        Ok(&self.buf[self.at - n..self.at])
    }
}
