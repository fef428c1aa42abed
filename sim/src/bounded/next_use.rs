//! Belady's next uses without holding the stream: a forward pass logs every access's unit, a
//! backward pass over the log's blocks overwrites each access's unit with its next use, in
//! place (the way libCacheSim's `oracleGeneral` carries next-access times beside its
//! requests), and the replay reads the next uses alongside the forward pass, block by block.
//!
//! A next use is stored as its distance from its access, in a u32 ([`Code`]): 0 for never,
//! and the rare distance of 2^32 - 1 or more as an escape whose position waits, in order, in
//! a list held in memory (each such gap spans 2^32 - 1 accesses of the stream, so there are at
//! most units x accesses / (2^32 - 1) of them: about 16 k for 10 M DeepSeek-V3 tokens, and
//! none in practice). Positions themselves are u64, so a stream may pass 2^32 accesses.
//!
//! A stream of at most [`IN_MEMORY_ACCESSES`] accesses keeps its log and next uses in memory.
//! A longer one spills them to an anonymous temporary file from `tempfile::tempfile` in the
//! system's temporary directory: it has no name from the start (O_TMPFILE on Linux, or
//! created and unlinked at once), so the system frees it when the process ends, however it
//! ends (a signal, a kill), and nothing is left behind for `traces::cleanup` to remove. It
//! takes 4 bytes per access: the log's units, then, in the same place, their next uses.

use super::positioned::{read_exact_at, write_all_at};
use anyhow::{bail, Context, Result};
use policies::retention::NEVER;
use std::fs::File;
use std::io::{BufWriter, Write};

/// Accesses per block of the backward pass and of the replay's reads (1 M accesses: 4 MiB of
/// u32, the trace reader's block size).
const BLOCK: usize = 1 << 20;

/// Most accesses whose log and next uses stay in memory: 16 Mi accesses, 64 MiB of units and
/// 64 MiB of next uses, half of the 256 MiB peak-memory bound the bounded replay is held to
/// (docs/RELIABILITY.md). Writing and reading the files costs about a quarter of a Belady run
/// of 10 M accesses in system time (`perf` on a DeepSeek-V3 trace, BENCHMARKS.md "Bounded-memory
/// replay"), which a stream this short need not pay.
pub const IN_MEMORY_ACCESSES: u64 = 16 << 20;

/// How a next use is stored: [`Code::never`], a distance `1..far_from`, or [`Code::FAR`]
/// (the position is the next one of the escape list).
struct Code {
    /// Distances from this one up are escaped: `u32::MAX` but in tests.
    far_from: u32,
}

impl Code {
    /// The stored value of "never used again".
    const NEVER: u32 = 0;
    /// The stored value of an escaped distance.
    const FAR: u32 = u32::MAX;

    /// The stored value of the next use `next` of the access at `pos`, pushing escaped
    /// positions to `far`.
    #[inline]
    fn encode(&self, pos: u64, next: u64, far: &mut Vec<u64>) -> u32 {
        if next == NEVER {
            return Code::NEVER;
        }
        let d = next - pos;
        if d < self.far_from as u64 {
            d as u32
        } else {
            far.push(next);
            Code::FAR
        }
    }
}

/// The units of a stream's accesses in order, being written to a temporary file.
pub struct AccessLog {
    /// The log while it has at most [`IN_MEMORY_ACCESSES`] accesses.
    memory: Vec<u32>,
    /// The temporary file, once the log outgrew memory (the memory part written first).
    out: Option<BufWriter<File>>,
    /// Most accesses kept in memory.
    limit: u64,
    len: u64,
    code: Code,
}

impl AccessLog {
    /// An empty log. A stream whose `accesses` (its length bound, from the header) exceed
    /// [`IN_MEMORY_ACCESSES`] is refused up front when it would not fit twice in the free space
    /// of the system's temporary directory.
    pub fn new(accesses: u64) -> Result<AccessLog> {
        AccessLog::with_memory_limit(accesses, IN_MEMORY_ACCESSES)
    }

    /// [`AccessLog::new`] keeping at most `limit` accesses in memory.
    fn with_memory_limit(accesses: u64, limit: u64) -> Result<AccessLog> {
        if accesses > limit {
            check_room(accesses)?;
        }
        Ok(AccessLog {
            memory: Vec::with_capacity(accesses.min(limit).min(BLOCK as u64) as usize),
            out: None,
            limit,
            len: 0,
            code: Code { far_from: u32::MAX },
        })
    }

    /// Log the units of one group, in access order.
    pub fn push(&mut self, units: &[u32]) -> Result<()> {
        self.len += units.len() as u64;
        if self.out.is_none() && self.len > self.limit {
            self.spill()?;
        }
        match &mut self.out {
            None => self.memory.extend_from_slice(units),
            Some(out) => {
                for &u in units {
                    out.write_all(&u.to_le_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// Move the log to a temporary file.
    fn spill(&mut self) -> Result<()> {
        let dir = std::env::temp_dir();
        let file = tempfile::tempfile_in(&dir)
            .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
        let mut out = BufWriter::with_capacity(BLOCK * 4, file);
        for &u in &self.memory {
            out.write_all(&u.to_le_bytes())?;
        }
        self.memory = Vec::new();
        self.out = Some(out);
        Ok(())
    }

    /// The next use of every logged access ([`crate::cache::AccessStream::next_use`]'s
    /// numbering, as u64 positions), by one backward pass over the log's blocks; `num_units`
    /// bounds the ids.
    pub fn next_uses(self, num_units: usize) -> Result<NextUses> {
        let Some(out) = self.out else {
            return Ok(NextUses::in_memory(self.memory, num_units, &self.code));
        };
        let len = self.len;
        // one file: each block's next uses overwrite its units, read just before
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .context("writing the temporary access log")?;
        let mut last = vec![NEVER; num_units];
        let mut far = Vec::new();
        let (mut units, mut raw) = (Vec::with_capacity(BLOCK), vec![0u8; BLOCK * 4]);
        let mut end = len;
        while end > 0 {
            let start = end.saturating_sub(BLOCK as u64);
            let n = (end - start) as usize;
            read_exact_at(&file, &mut raw[..n * 4], start * 4)
                .context("reading the temporary access log")?;
            units.clear();
            units.extend(raw[..n * 4].chunks_exact(4).map(le_u32));
            for (i, &u) in units.iter().enumerate().rev() {
                let pos = start + i as u64;
                let c = self.code.encode(pos, last[u as usize], &mut far);
                raw[i * 4..i * 4 + 4].copy_from_slice(&c.to_le_bytes());
                last[u as usize] = pos;
            }
            write_all_at(&file, &raw[..n * 4], start * 4)
                .context("writing the temporary next-use file")?;
            end = start;
        }
        far.reverse();
        Ok(NextUses {
            file: Some(file),
            len,
            buf: Vec::new(),
            at: 0,
            read: 0,
            raw,
            pos: 0,
            far,
            far_at: 0,
            out: Vec::new(),
        })
    }
}

/// Refuse a log of up to `accesses` whose file would not fit twice in the free space of the
/// system's temporary directory (a margin: the file takes 4 bytes per access).
fn check_room(accesses: u64) -> Result<()> {
    let dir = std::env::temp_dir();
    let need = accesses as u128 * 8;
    if traces::resources::exceeds(need, traces::resources::free_space(&dir)) {
        bail!(
            "Belady's next uses need up to {} of temporary files in {}, more than is free; free space there, or point TMPDIR at a larger file system",
            traces::resources::bytes_words(need),
            dir.display()
        );
    }
    Ok(())
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// The next uses of a stream, read forward block by block as the replay asks for them.
pub struct NextUses {
    /// The next-use file; `None` when every next use is in `buf`.
    file: Option<File>,
    /// Accesses in the file, and accesses read from it so far.
    len: u64,
    read: u64,
    /// Read but not yet taken: `buf[at..]`, stored as [`Code`] says.
    buf: Vec<u32>,
    at: usize,
    raw: Vec<u8>,
    /// Position of the access of `buf[at]`.
    pos: u64,
    /// The escaped next uses in stream order, and the first not yet taken.
    far: Vec<u64>,
    far_at: usize,
    /// The positions [`NextUses::take`] returns.
    out: Vec<u64>,
}

impl NextUses {
    /// The next uses of an in-memory log, by the same backward walk as the files' pass.
    fn in_memory(mut units: Vec<u32>, num_units: usize, code: &Code) -> NextUses {
        let mut last = vec![NEVER; num_units];
        let mut far = Vec::new();
        for (pos, u) in units.iter_mut().enumerate().rev() {
            let unit = *u as usize;
            *u = code.encode(pos as u64, last[unit], &mut far);
            last[unit] = pos as u64;
        }
        far.reverse();
        NextUses {
            file: None,
            len: units.len() as u64,
            read: units.len() as u64,
            buf: units,
            at: 0,
            raw: Vec::new(),
            pos: 0,
            far,
            far_at: 0,
            out: Vec::new(),
        }
    }

    /// Start again from the stream's first access (for another replay of the same stream).
    pub fn rewind(&mut self) {
        if self.file.is_some() {
            self.buf.clear();
            self.read = 0;
        }
        self.at = 0;
        self.pos = 0;
        self.far_at = 0;
    }

    /// The next uses of the next `n` accesses, as stream positions ([`NEVER`] for never).
    pub fn take(&mut self, n: usize) -> Result<&[u64]> {
        if self.buf.len() - self.at < n {
            let have = (self.buf.len() - self.at) as u64;
            let file = self
                .file
                .as_ref()
                .filter(|_| have + self.len - self.read >= n as u64);
            let Some(file) = file else {
                bail!("the replay made more accesses than the pass that logged them; the trace file changed while it was read, run again");
            };
            self.buf.drain(..self.at);
            self.at = 0;
            let want = (n - self.buf.len()).max(BLOCK) as u64;
            let k = want.min(self.len - self.read) as usize;
            self.raw.resize(k * 4, 0);
            read_exact_at(file, &mut self.raw, self.read * 4)
                .context("reading the temporary next-use file")?;
            self.read += k as u64;
            self.buf.extend(self.raw.chunks_exact(4).map(le_u32));
        }
        self.out.clear();
        for (i, &c) in self.buf[self.at..self.at + n].iter().enumerate() {
            self.out.push(match c {
                Code::NEVER => NEVER,
                Code::FAR => {
                    self.far_at += 1;
                    self.far[self.far_at - 1]
                }
                d => self.pos + i as u64 + d as u64,
            });
        }
        self.at += n;
        self.pos += n as u64;
        Ok(&self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Next uses by a forward pass (each access sets its unit's previous access's next use),
    /// independent of the backward walks under test.
    fn forward_next_uses(units: &[u32], num_units: usize) -> Vec<u64> {
        let mut next = vec![NEVER; units.len()];
        let mut prev: Vec<Option<usize>> = vec![None; num_units];
        for (i, &u) in units.iter().enumerate() {
            if let Some(p) = prev[u as usize] {
                next[p] = i as u64;
            }
            prev[u as usize] = Some(i);
        }
        next
    }

    /// Log `units` in groups of 1 to 9, keeping `limit` accesses in memory and escaping
    /// distances from `far_from` up, and take the next uses back in groups of another size,
    /// twice (the second time after a rewind).
    fn logged(units: &[u32], num_units: usize, limit: u64, far_from: u32) -> Vec<u64> {
        let mut log = AccessLog::with_memory_limit(units.len() as u64, limit).unwrap();
        log.code.far_from = far_from;
        let mut rest = units;
        let mut i = 0;
        while !rest.is_empty() {
            let n = (1 + i % 9).min(rest.len());
            log.push(&rest[..n]).unwrap();
            rest = &rest[n..];
            i += 1;
        }
        let mut next = log.next_uses(num_units).unwrap();
        let first = take_all(&mut next, units.len());
        next.rewind();
        assert_eq!(take_all(&mut next, units.len()), first, "after a rewind");
        first
    }

    /// Every next use of `next`, taken in groups of 1 to 7; one more access must be refused.
    fn take_all(next: &mut NextUses, len: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(len);
        let mut i = 0;
        while out.len() < len {
            let n = (1 + i % 7).min(len - out.len());
            out.extend_from_slice(next.take(n).unwrap());
            i += 1;
        }
        assert!(next.take(1).is_err(), "more accesses than were logged");
        out
    }

    /// Both stores, across the 1 Mi-access blocks of the backward pass and of the reads, and a
    /// log that spills part way, give the forward pass's next uses; so do they with distances
    /// escaped from 3,000 up (about a third of them, with 3,000 units drawn uniformly) and from
    /// 2 up (all but the adjacent ones), the path a distance of 2^32 - 1 or more takes.
    #[test]
    fn next_uses_match_a_forward_pass_in_memory_and_in_files() {
        let num_units = 3000;
        let mut rng = rand_pcg::Pcg64::seed_from_u64(11);
        let units: Vec<u32> = (0..2 * BLOCK + 12_345)
            .map(|_| rng.gen_range(0..num_units as u32))
            .collect();
        let want = forward_next_uses(&units, num_units);
        for far_from in [u32::MAX, 3000, 2] {
            assert_eq!(
                logged(&units, num_units, IN_MEMORY_ACCESSES, far_from),
                want
            );
            assert_eq!(logged(&units, num_units, 0, far_from), want);
            assert_eq!(logged(&units, num_units, BLOCK as u64 + 3, far_from), want);
        }
    }
}
