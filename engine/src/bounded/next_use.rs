//! Belady's next uses without holding the stream or a file of it. The access stream is cut
//! into segments of [`SEGMENT`] accesses:
//!
//! 1. a forward pass records each segment's row: every unit's first access in the segment
//!    ([`FirstUses`]);
//! 2. a backward pass over the rows turns each into the segment's exits: every unit's first
//!    access after the segment's end;
//! 3. the replay reads the stream again on a thread of its own, a segment ahead of the
//!    simulator ([`NextUses`]), and a backward walk over each segment's units that starts
//!    from its exits gives its next uses.
//!
//! A row is 8 bytes per unit: 118,784 bytes a segment for DeepSeek-V3's 14,848 experts, 5.7 %
//! of the 2 MiB a log of the segment's unit ids would take, and nothing per access. Rows stay
//! in memory up to [`IN_MEMORY_BYTES`]; more go to an anonymous temporary file from
//! `tempfile::tempfile` in the system's temporary directory, which has no name from the start
//! (O_TMPFILE on Linux, or created and unlinked at once), so the system frees it when the
//! process ends, however it ends, and nothing is left behind. A stream of at most
//! [`IN_MEMORY_ACCESSES`] keeps its units from the forward pass instead, turns them into its
//! next uses in place, and reads nothing again.

use super::positioned::{read_exact_at, write_all_at};
use anyhow::{anyhow, bail, Context, Result};
use policies::retention::NEVER;
use std::fs::File;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Accesses per segment: 512 Ki, so a segment's next uses are 4 MiB of u64 and its units 2 MiB
/// of u32, and a row costs a few percent of a log of them. Segments of 1 Mi ran at the same
/// speed within noise (a 1 M-token run, 2 pairs) with 8 MiB more in flight per Belady run,
/// which a timed sweep pays once per worker (BENCHMARKS.md "Bounded-memory replay").
pub const SEGMENT: usize = 1 << 19;

/// Most bytes of rows held in memory (4 MiB: 35 segments of DeepSeek-V3, about 40 k tokens);
/// a stream that could need more keeps them in a temporary file from the start, so a long
/// trace's memory does not depend on its length (the bounded replay's 256 MiB peak,
/// docs/RELIABILITY.md, which a timed sweep's two Belady runs at once share).
pub const IN_MEMORY_BYTES: u64 = 4 << 20;

/// Most accesses whose units the forward pass keeps, so that their next uses are computed in
/// memory, in place, and the stream is not read a third time: 16 Mi accesses, 64 MiB of u32
/// (36 k DeepSeek-V3 tokens). A third reading costs a 10 M-access Belady run 1.16x its CPU
/// time (BENCHMARKS.md "Bounded-memory replay"), which a stream this short need not pay.
pub const IN_MEMORY_ACCESSES: u64 = 16 << 20;

/// Next uses per message from the thread to the replay: 128 Ki (1 MiB of u64), so that a chunk
/// taken is handed back for reuse before the rest of its segment is.
const CHUNK: usize = 1 << 17;

/// Chunks waiting between the thread and the replay: a whole segment's, so the thread can
/// read and walk the next segment while the replay takes them (with fewer, the replay waits
/// for each segment to be read: 1.22x the wall time of a 1 M-token run with one chunk).
/// With the segment being walked, the one being read and the chunks on their way back, about
/// 12 MiB.
const QUEUED: usize = SEGMENT / CHUNK;

/// Bytes of record buffers of the thread's reading of the trace (4 MiB, against the replay's
/// 32 MiB of [`super::source::BUFFER_BYTES`]): a read of 4,500 DeepSeek-V3 records still
/// costs little against their next uses, and a timed sweep runs two Belady runs at once.
pub const REREAD_BUFFER_BYTES: usize = 4 << 20;

/// Why the replay and the pass that recorded the stream disagree.
const CHANGED: &str = "the replay's accesses differ from those of the pass that recorded them; the trace file changed while it was read, run again";

/// A stream of groups of unit ids that can be read again from its start, by the thread that
/// computes the next uses.
pub trait Replayable: Send + Sync + 'static {
    /// Pass every group's units, in stream order, to `group`; its error stops the pass and
    /// is the result.
    fn each_group(&self, group: &mut dyn FnMut(&[u32]) -> Result<()>) -> Result<()>;
}

/// One row of `units` u64 per segment, in memory or in a temporary file.
struct Rows {
    units: usize,
    memory: Vec<u64>,
    file: Option<File>,
    /// The byte image of a row being written to the file.
    raw: Vec<u8>,
}

impl Rows {
    /// Room for up to `segments` rows, in memory when they take at most `limit` bytes; a file
    /// is refused up front when twice its size is not free in the temporary directory.
    fn new(units: usize, segments: u64, limit: u64) -> Result<Rows> {
        let bytes = segments as u128 * units as u128 * 8;
        let file = if bytes > limit as u128 {
            check_room(bytes)?;
            let dir = std::env::temp_dir();
            let file = tempfile::tempfile_in(&dir).with_context(|| {
                // the variable std::env::temp_dir reads first
                let var = if cfg!(windows) { "TMP" } else { "TMPDIR" };
                let whence = match std::env::var_os(var) {
                    Some(_) => format!("{var} names it"),
                    None => "the system's temporary directory".to_string(),
                };
                format!(
                    "creating Belady's temporary next-use file in {} ({whence}: set {var} to a writable directory)",
                    dir.display()
                )
            })?;
            Some(file)
        } else {
            None
        };
        Ok(Rows {
            units,
            memory: Vec::new(),
            file,
            raw: Vec::new(),
        })
    }

    /// Store `row` as row `j`: rows are written in order first, and then overwritten.
    fn write(&mut self, j: u64, row: &[u64]) -> Result<()> {
        let at = j as usize * self.units;
        let Some(file) = &self.file else {
            if at == self.memory.len() {
                self.memory.extend_from_slice(row);
            } else {
                self.memory[at..at + self.units].copy_from_slice(row);
            }
            return Ok(());
        };
        self.raw.clear();
        self.raw.extend(row.iter().flat_map(|v| v.to_le_bytes()));
        write_all_at(file, &self.raw, at as u64 * 8).context("writing the temporary next-use file")
    }

    /// Row `j` into `row`, through the byte buffer `raw`.
    fn read(&self, j: u64, row: &mut [u64], raw: &mut Vec<u8>) -> Result<()> {
        let at = j as usize * self.units;
        let Some(file) = &self.file else {
            row.copy_from_slice(&self.memory[at..at + self.units]);
            return Ok(());
        };
        raw.resize(self.units * 8, 0);
        read_exact_at(file, raw, at as u64 * 8).context("reading the temporary next-use file")?;
        for (r, b) in row.iter_mut().zip(raw.chunks_exact(8)) {
            *r = u64::from_le_bytes(b.try_into().expect("chunks of 8 bytes"));
        }
        Ok(())
    }
}

/// Refuse rows of `bytes` that would not fit twice in the free space of the system's
/// temporary directory.
fn check_room(bytes: u128) -> Result<()> {
    let dir = std::env::temp_dir();
    let need = bytes * 2;
    if traces::resources::exceeds(need, traces::resources::free_space(&dir)) {
        bail!(
            "Belady's next uses need up to {} of temporary files in {}, more than is free; free space there, or point TMPDIR at a larger file system",
            traces::resources::bytes_words(need),
            dir.display()
        );
    }
    Ok(())
}

/// The sizes of [`FirstUses`]: [`SEGMENT`], [`IN_MEMORY_BYTES`] and [`IN_MEMORY_ACCESSES`]
/// but in tests.
struct Sizes {
    /// Accesses per segment.
    segment: usize,
    /// Most bytes of rows in memory.
    limit: u64,
    /// Most accesses whose units are kept (below 2^32).
    keep: u64,
}

/// The forward pass: the stream's units when its bound keeps them, else each segment's first
/// access of every unit, as the stream's groups are pushed in order.
pub struct FirstUses {
    num_units: usize,
    /// Accesses pushed.
    len: u64,
    record: Record,
}

/// What [`FirstUses`] records: one or the other, decided up front from the stream's bound
/// (filling 64 MiB of units before finding the stream longer would set a run's peak memory,
/// and rows a kept stream never reads could need a temporary file).
enum Record {
    /// The stream's units, at most `keep` of them.
    Units {
        units: Vec<u32>,
        keep: u64,
    },
    Rows(SegmentRows),
}

/// Each segment's first access of every unit: the current segment's `row` ([`NEVER`] for none
/// yet) and the rows of those before it.
struct SegmentRows {
    segment: usize,
    row: Vec<u64>,
    rows: Rows,
}

impl FirstUses {
    /// An empty pass over the ids `0..num_units` of a stream of at most `accesses` accesses
    /// (its length bound, from the header, which also decides whether the units are kept).
    pub fn new(num_units: usize, accesses: u64) -> Result<FirstUses> {
        let sizes = Sizes {
            segment: SEGMENT,
            limit: IN_MEMORY_BYTES,
            keep: IN_MEMORY_ACCESSES,
        };
        FirstUses::with(num_units, accesses, sizes)
    }

    /// [`FirstUses::new`] with other [`Sizes`].
    fn with(num_units: usize, accesses: u64, sizes: Sizes) -> Result<FirstUses> {
        assert!(
            sizes.keep < u32::MAX as u64,
            "a kept distance fits in a u32"
        );
        let record = if accesses <= sizes.keep {
            Record::Units {
                units: Vec::with_capacity(accesses as usize),
                keep: sizes.keep,
            }
        } else {
            let segments = accesses.div_ceil(sizes.segment as u64);
            Record::Rows(SegmentRows {
                segment: sizes.segment,
                row: vec![NEVER; num_units],
                rows: Rows::new(num_units, segments, sizes.limit)?,
            })
        };
        Ok(FirstUses {
            num_units,
            len: 0,
            record,
        })
    }

    /// Record the units of the next group, in access order. Errors: more units than the
    /// bound kept room for (the file changed), or a write of the temporary file failed.
    pub fn push(&mut self, group: &[u32]) -> Result<()> {
        match &mut self.record {
            Record::Units { units, keep } => {
                if self.len + group.len() as u64 > *keep {
                    bail!("the stream has more accesses than its header bounds; the trace file changed while it was read, run again");
                }
                units.extend_from_slice(group);
            }
            Record::Rows(r) => r.push(self.len, group)?,
        }
        self.len += group.len() as u64;
        Ok(())
    }

    /// The next uses of every recorded access ([`crate::cache::AccessStream::next_use`]'s
    /// numbering): from the kept units, or by the backward pass over the rows, with `stream`
    /// reading the same stream again for the replay.
    pub fn finish(self, stream: Arc<dyn Replayable>) -> Result<NextUses> {
        let len = self.len;
        let source = match self.record {
            Record::Units { units, .. } => {
                Source::Memory(in_place(units, self.num_units), Vec::new())
            }
            Record::Rows(mut r) => {
                if !len.is_multiple_of(r.segment as u64) {
                    r.end_segment(len)?;
                }
                r.exits(len.div_ceil(r.segment as u64))?;
                Source::Fed(Fed {
                    stream,
                    rows: Arc::new(r.rows),
                    segment: r.segment,
                    len,
                    feed: None,
                    cur: Vec::new(),
                    at: 0,
                    out: Vec::new(),
                })
            }
        };
        Ok(NextUses {
            source,
            len,
            taken: 0,
        })
    }
}

impl SegmentRows {
    /// Record `group`, whose first access is at stream position `pos`.
    fn push(&mut self, mut pos: u64, mut group: &[u32]) -> Result<()> {
        while !group.is_empty() {
            let room = self.segment - (pos % self.segment as u64) as usize;
            let (now, later) = group.split_at(room.min(group.len()));
            for (i, &u) in now.iter().enumerate() {
                let first = &mut self.row[u as usize];
                if *first == NEVER {
                    *first = pos + i as u64;
                }
            }
            pos += now.len() as u64;
            if pos.is_multiple_of(self.segment as u64) {
                self.end_segment(pos)?;
            }
            group = later;
        }
        Ok(())
    }

    /// Write the current row: the segment's, which ends with the stream's first `len` accesses.
    fn end_segment(&mut self, len: u64) -> Result<()> {
        self.rows
            .write((len - 1) / self.segment as u64, &self.row)?;
        self.row.fill(NEVER);
        Ok(())
    }

    /// Turn the first `segments` rows, backwards, into each segment's exits.
    fn exits(&mut self, segments: u64) -> Result<()> {
        let units = self.row.len();
        let (mut exits, mut first, mut raw) = (vec![NEVER; units], vec![NEVER; units], Vec::new());
        for j in (0..segments).rev() {
            self.rows.read(j, &mut first, &mut raw)?;
            self.rows.write(j, &exits)?;
            for (e, &f) in exits.iter_mut().zip(&first) {
                if f != NEVER {
                    *e = f;
                }
            }
        }
        Ok(())
    }
}

/// The next uses of the stream `units` over the ids `0..num_units`, each in the place of its
/// access's unit as its distance from it (0 for never: no access is its own next use).
fn in_place(mut units: Vec<u32>, num_units: usize) -> Vec<u32> {
    let mut last = vec![NEVER; num_units];
    for (pos, u) in units.iter_mut().enumerate().rev() {
        let unit = *u as usize;
        *u = match last[unit] {
            NEVER => 0,
            next => (next - pos as u64) as u32,
        };
        last[unit] = pos as u64;
    }
    units
}

/// The next uses `next` of the accesses of `units` (the first at stream position `start`),
/// walking back from `last`, every unit's first access after them, which it leaves as every
/// unit's first access among or after them.
fn walk(units: &[u32], start: u64, last: &mut [u64], next: &mut Vec<u64>) {
    next.resize(units.len(), NEVER);
    for (i, &u) in units.iter().enumerate().rev() {
        let last = &mut last[u as usize];
        next[i] = *last;
        *last = start + i as u64;
    }
}

/// The next uses of a stream, handed out in order as the replay asks for them.
pub struct NextUses {
    source: Source,
    /// Accesses recorded, and taken since the start.
    len: u64,
    taken: u64,
}

enum Source {
    /// Every next use of a short stream as [`in_place`] stores it, and the positions of a
    /// request.
    Memory(Vec<u32>, Vec<u64>),
    /// A stream of several: computed a segment ahead by a thread reading the stream again.
    Fed(Fed),
}

impl NextUses {
    /// Start again from the stream's first access (for another replay of the same stream).
    pub fn rewind(&mut self) {
        self.taken = 0;
        if let Source::Fed(f) = &mut self.source {
            f.feed = None;
            f.cur.clear();
            f.at = 0;
        }
    }

    /// The next uses of the next `n` accesses, as stream positions ([`NEVER`] for never).
    /// Errors: more accesses than were recorded, the stream read again differs, or a read of
    /// the temporary file failed.
    pub fn take(&mut self, n: usize) -> Result<&[u64]> {
        let from = self.taken as usize;
        if self.taken + n as u64 > self.len {
            bail!(CHANGED);
        }
        self.taken += n as u64;
        match &mut self.source {
            Source::Memory(dist, out) => {
                out.clear();
                let near = dist[from..from + n].iter().zip(from as u64..);
                out.extend(near.map(|(&d, pos)| if d == 0 { NEVER } else { pos + d as u64 }));
                Ok(out)
            }
            Source::Fed(f) => f.take(n),
        }
    }
}

/// The next uses of a stream of several segments, and the thread computing them.
struct Fed {
    stream: Arc<dyn Replayable>,
    /// Each segment's exits.
    rows: Arc<Rows>,
    segment: usize,
    len: u64,
    /// The thread, started by the first chunk asked for after a start or a rewind.
    feed: Option<Feed>,
    /// The chunk of next uses being taken, its first one not yet taken, and a request
    /// spanning chunks.
    cur: Vec<u64>,
    at: usize,
    out: Vec<u64>,
}

impl Fed {
    fn take(&mut self, n: usize) -> Result<&[u64]> {
        if self.cur.len() - self.at >= n {
            self.at += n;
            return Ok(&self.cur[self.at - n..self.at]);
        }
        self.out.clear();
        while self.out.len() < n {
            if self.at == self.cur.len() {
                self.next_chunk()?;
            }
            let k = (n - self.out.len()).min(self.cur.len() - self.at);
            self.out.extend_from_slice(&self.cur[self.at..self.at + k]);
            self.at += k;
        }
        Ok(&self.out)
    }

    /// Replace the chunk taken by the next one from the thread (started if need be).
    fn next_chunk(&mut self) -> Result<()> {
        if self.feed.is_none() {
            self.feed = Some(Feed::spawn(self)?);
        }
        let feed = self.feed.as_mut().expect("started above");
        let next = feed.full.as_ref().expect("open until dropped").recv();
        match next {
            Ok(next) => {
                let done = std::mem::replace(&mut self.cur, next);
                let _ = feed.free.try_send(done);
                self.at = 0;
                Ok(())
            }
            // the thread stopped before the accesses ran out: its error says why
            Err(_) => {
                let handle = feed.handle.take().expect("joined once");
                self.feed = None;
                match handle.join() {
                    Ok(Err(e)) => Err(e),
                    Ok(Ok(())) => Err(anyhow!(CHANGED)),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
        }
    }
}

/// The thread computing next uses, and its two channels: chunks of next uses from it, spent
/// ones back for reuse.
struct Feed {
    full: Option<Receiver<Vec<u64>>>,
    free: SyncSender<Vec<u64>>,
    handle: Option<JoinHandle<Result<()>>>,
}

impl Feed {
    fn spawn(f: &Fed) -> Result<Feed> {
        let (full_tx, full_rx) = sync_channel(QUEUED);
        let (free_tx, free_rx) = sync_channel(QUEUED + 2);
        let mut feeder = Feeder {
            rows: Arc::clone(&f.rows),
            segment: f.segment,
            len: f.len,
            units: Vec::with_capacity(f.segment),
            next: Vec::with_capacity(f.segment),
            last: vec![NEVER; f.rows.units],
            raw: Vec::new(),
            start: 0,
            full: full_tx,
            free: free_rx,
        };
        let stream = Arc::clone(&f.stream);
        let handle = std::thread::Builder::new()
            .name("next-uses".into())
            .spawn(move || {
                stream.each_group(&mut |g| feeder.push(g))?;
                feeder.finish()
            })
            .context("starting the thread that computes Belady's next uses")?;
        Ok(Feed {
            full: Some(full_rx),
            free: free_tx,
            handle: Some(handle),
        })
    }
}

impl Drop for Feed {
    /// Hang up, so the thread's next hand-over fails and it returns, and wait for it.
    fn drop(&mut self) {
        self.full = None;
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The thread's side of [`Fed`]: the stream cut into segments again, each one's next uses
/// walked back from its exits and sent.
struct Feeder {
    rows: Arc<Rows>,
    segment: usize,
    len: u64,
    /// The segment being filled, and its next uses once it is full.
    units: Vec<u32>,
    next: Vec<u64>,
    last: Vec<u64>,
    raw: Vec<u8>,
    /// The position of the first access of the segment being filled.
    start: u64,
    full: SyncSender<Vec<u64>>,
    free: Receiver<Vec<u64>>,
}

impl Feeder {
    fn push(&mut self, mut group: &[u32]) -> Result<()> {
        while !group.is_empty() {
            let k = (self.segment - self.units.len()).min(group.len());
            self.units.extend_from_slice(&group[..k]);
            if self.units.len() == self.segment {
                self.send()?;
            }
            group = &group[k..];
        }
        Ok(())
    }

    fn send(&mut self) -> Result<()> {
        if self.start + self.units.len() as u64 > self.len {
            bail!(CHANGED);
        }
        let j = self.start / self.segment as u64;
        self.rows.read(j, &mut self.last, &mut self.raw)?;
        walk(&self.units, self.start, &mut self.last, &mut self.next);
        for part in self.next.chunks(CHUNK) {
            let mut chunk = self.free.try_recv().unwrap_or_default();
            chunk.clear();
            chunk.extend_from_slice(part);
            self.full
                .send(chunk)
                .map_err(|_| anyhow!("the replay stopped"))?;
        }
        self.start += self.units.len() as u64;
        self.units.clear();
        Ok(())
    }

    /// Send the last segment; the stream must be as long as the one recorded.
    fn finish(mut self) -> Result<()> {
        if !self.units.is_empty() {
            self.send()?;
        }
        if self.start != self.len {
            bail!(CHANGED);
        }
        Ok(())
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

    /// A stream held in memory, in groups of 1 to 9 units.
    struct Groups(Vec<Vec<u32>>);

    impl Groups {
        fn of(units: &[u32]) -> Groups {
            let (mut groups, mut rest, mut i) = (Vec::new(), units, 0);
            while !rest.is_empty() {
                let n = (1 + i % 9).min(rest.len());
                groups.push(rest[..n].to_vec());
                rest = &rest[n..];
                i += 1;
            }
            Groups(groups)
        }
    }

    impl Replayable for Groups {
        fn each_group(&self, group: &mut dyn FnMut(&[u32]) -> Result<()>) -> Result<()> {
            self.0.iter().try_for_each(|g| group(g))
        }
    }

    /// The next uses of `recorded`, replayed as `replayed`, with the `sizes`.
    fn next_uses(recorded: &[u32], replayed: &[u32], num_units: usize, sizes: Sizes) -> NextUses {
        let mut first = FirstUses::with(num_units, recorded.len() as u64, sizes).unwrap();
        for g in &Groups::of(recorded).0 {
            first.push(g).unwrap();
        }
        first.finish(Arc::new(Groups::of(replayed))).unwrap()
    }

    /// Every next use of `next`, taken in requests of 1 to 7; one more access is refused.
    fn take_all(next: &mut NextUses, len: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(len);
        let mut i = 0;
        while out.len() < len {
            let n = (1 + i % 7).min(len - out.len());
            out.extend_from_slice(next.take(n).unwrap());
            i += 1;
        }
        assert!(next.take(1).is_err(), "more accesses than were recorded");
        out
    }

    /// One segment, segments of 512 Ki with a partial last one, and segments of 1 and 7
    /// accesses (requests spanning several), each read again with rows in memory and in a
    /// file, or from the kept units, give the forward pass's next uses, again after a rewind,
    /// and after a rewind part way.
    #[test]
    fn next_uses_match_a_forward_pass_in_memory_and_in_files() {
        let num_units = 3000;
        let mut rng = rand_pcg::Pcg64::seed_from_u64(11);
        let units: Vec<u32> = (0..2 * SEGMENT + 12_345)
            .map(|_| rng.gen_range(0..num_units as u32))
            .collect();
        for (segment, len) in [
            (4 * SEGMENT, units.len()),
            (SEGMENT, units.len()),
            (7, 5000),
            (1, 300),
        ] {
            let units = &units[..len];
            let want = forward_next_uses(units, num_units);
            for (limit, keep) in [(u64::MAX, 0), (0, 0), (u64::MAX, len as u64)] {
                let sizes = Sizes {
                    segment,
                    limit,
                    keep,
                };
                let mut next = next_uses(units, units, num_units, sizes);
                let case = format!("segment {segment}, limit {limit}, keep {keep}");
                assert_eq!(take_all(&mut next, len), want, "{case}");
                next.rewind();
                assert_eq!(take_all(&mut next, len), want, "after a rewind");
                next.rewind();
                next.take(len / 2).unwrap();
                next.rewind();
                assert_eq!(take_all(&mut next, len), want, "after a rewind part way");
            }
        }
    }

    /// The thread reads the trace file again through the passes' owned copy: in segments of
    /// 50 accesses (a few groups each), with rows in memory and in a file, its next uses are
    /// those of the passes' groups by a forward pass.
    #[test]
    fn next_uses_of_a_trace_file_match_a_forward_pass() {
        let f =
            crate::bounded::fixture::Fixture::new(traces::ModelSpec::uniform("t", 3, 16, 2), 3, 50);
        let passes = f.passes(2);
        let mut units = Vec::new();
        passes
            .groups(|g| {
                units.extend_from_slice(g);
                Ok(())
            })
            .unwrap();
        let want = forward_next_uses(&units, f.map.num_units());
        assert!(
            units.len() > 15 * 50,
            "{} accesses: many segments",
            units.len()
        );
        for limit in [u64::MAX, 0] {
            let sizes = Sizes {
                segment: 50,
                limit,
                keep: 0,
            };
            let mut first = FirstUses::with(f.map.num_units(), units.len() as u64, sizes).unwrap();
            passes.blocks(64, |b| first.push(&b.units)).unwrap();
            let mut next = first.finish(Arc::new(passes.owned())).unwrap();
            assert_eq!(take_all(&mut next, units.len()), want, "limit {limit}");
        }
    }

    /// A stream read again shorter than the one recorded, or a replay of more accesses, is
    /// an error of the replay, not a wrong next use.
    #[test]
    fn a_changed_stream_is_refused() {
        let units: Vec<u32> = (0..100).map(|i| i % 13).collect();
        for replayed in [&units[..99], &[units.as_slice(), &[1]].concat()[..]] {
            let sizes = Sizes {
                segment: 10,
                limit: u64::MAX,
                keep: 0,
            };
            let mut next = next_uses(&units, replayed, 13, sizes);
            let err = (0..101).try_for_each(|_| next.take(1).map(|_| ()));
            assert_eq!(
                err.unwrap_err().to_string(),
                CHANGED,
                "{} accesses",
                replayed.len()
            );
        }
    }
}
