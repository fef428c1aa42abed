//! Token records of a trace file in the cache regime's request order, read block by block
//! at their file offsets: round-robin across sequences (step 0 of every sequence in sequence
//! order, then step 1, ...; a sequence's steps take its selected phases in trace order,
//! prefill before decode; an exhausted sequence drops out), the order of
//! [`crate::cache::stream::round_robin_chunks`]. A step is one token, or with a
//! [`Stepping`] a chunk of consecutive tokens of one phase ([`Stepping::chunk`], drawn lazily
//! from one PCG stream per sequence as [`Stepping::sequence_chunks`] draws them): a verify
//! step's K + 1 tokens (the next step starts after its accepted drafts, so rejected drafts
//! are read again) or a prompt chunk.
//!
//! Memory: one buffer per sequence still in the rotation, [`BUFFER_BYTES`] shared between
//! them; when that leaves a sequence fewer than two of the longest chunks, every chunk is read
//! on its own into one shared buffer (a read per step, bounded memory at any sequence count).

use super::positioned::read_exact_at;
use crate::verify::Stepping;
use anyhow::{bail, Context, Result};
use rand_pcg::Pcg64;
use std::fs::File;
use std::path::Path;
use traces::{KeySpace, Phase, PhaseSel, TraceReader};

/// Bytes of record buffers shared by the sequences in the rotation (32 MiB: a block of
/// 32 k DeepSeek-V3 records of 928 bytes for one sequence; the cost of a read then vanishes
/// against the work on the tokens it brings).
pub const BUFFER_BYTES: usize = 32 << 20;

/// One sequence's remaining steps.
struct Cursor {
    /// (phase, file offset of its first record, its tokens) of the selected phases not yet
    /// begun, popped from the back.
    runs: Vec<(Phase, u64, u64)>,
    /// The phase being read: that phase, its first record's offset, its tokens, and the
    /// first token of the next step.
    phase: Phase,
    start: u64,
    n: u64,
    token: u64,
    /// Decoded ids of the buffered records, the first of them token `from` of the phase.
    ids: Vec<u16>,
    from: u64,
    /// The sequence's acceptance draws.
    rng: Pcg64,
}

impl Cursor {
    /// Whether the sequence has no step left.
    fn done(&self) -> bool {
        self.token == self.n && self.runs.is_empty()
    }
}

/// Round-robin steps of a trace file (see the module documentation).
pub struct RoundRobin {
    file: File,
    name: String,
    ipt: usize,
    record_bytes: usize,
    stepping: Stepping,
    cursors: Vec<Cursor>,
    /// Sequences still in the rotation, in sequence order, and the next one's index in it.
    active: Vec<usize>,
    at: usize,
    /// Records per buffer refill (below two chunks: each chunk is read alone into `one`).
    cap: usize,
    buffered: bool,
    raw: Vec<u8>,
    one: Vec<u16>,
    /// Expert count of each id position of a record (an id at or above it is corrupt).
    limit: Vec<u16>,
    /// The place of the last step yielded.
    last: RecordPos,
}

/// Where a step [`RoundRobin`] yielded sits in the trace: its sequence, phase and first
/// token, the tokens it reads and the tokens it produces (1 and 1 for one token per step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordPos {
    pub sequence: u32,
    pub phase: Phase,
    /// The first token's index in its sequence's phase.
    pub token: u64,
    /// Tokens the step reads (its records), from `token` on.
    pub len: u32,
    /// Tokens the step produces (the accepted drafts + 1, or the prompt chunk).
    pub produced: u32,
}

impl RoundRobin {
    /// Open the trace at `path` for the tokens of `phases`, one token per step. The header is
    /// read and checked as [`TraceReader::open`] does; the records are not validated here (a
    /// pass of the streaming reader over the same file does that), only their ids' ranges as
    /// they are read.
    pub fn open(path: &Path, phases: PhaseSel) -> Result<RoundRobin> {
        Self::open_with(path, phases, Stepping::default(), BUFFER_BYTES)
    }

    /// [`RoundRobin::open`] with the steps of `stepping`.
    pub fn open_stepped(path: &Path, phases: PhaseSel, stepping: Stepping) -> Result<RoundRobin> {
        Self::open_with(path, phases, stepping, BUFFER_BYTES)
    }

    /// [`RoundRobin::open_stepped`] with `buffer_bytes` of record buffers in all.
    pub fn open_with(
        path: &Path,
        phases: PhaseSel,
        stepping: Stepping,
        buffer_bytes: usize,
    ) -> Result<RoundRobin> {
        let reader = TraceReader::open(path)?;
        let header = reader.header();
        let layout = reader.layout();
        let (ipt, record_bytes) = (layout.ids_per_token, layout.record_bytes);
        let mut offset = reader.payload_offset();
        let mut cursors = Vec::with_capacity(header.sequences.len());
        for (s, seq) in header.sequences.iter().enumerate() {
            let mut runs = Vec::new();
            for (phase, n) in [
                (Phase::Prefill, seq.prefill_tokens),
                (Phase::Decode, seq.decode_tokens),
            ] {
                if phases.includes(phase) && n > 0 {
                    runs.push((phase, offset, n));
                }
                offset += n * record_bytes as u64;
            }
            runs.reverse(); // popped from the back
            cursors.push(Cursor {
                runs,
                phase: Phase::Decode,
                start: 0,
                n: 0,
                token: 0,
                ids: Vec::new(),
                from: 0,
                rng: stepping.sequence_rng(s),
            });
        }
        let active: Vec<usize> = (0..cursors.len())
            .filter(|&s| !cursors[s].runs.is_empty())
            .collect();
        let cap = buffer_bytes / record_bytes.max(1) / active.len().max(1);
        let buffered = cap as u64 >= 2 * u64::from(stepping.max_chunk());
        // start at the end of a round: the first call opens round 0
        let at = active.len();
        let ks = KeySpace::new(&header.model);
        let limit = (0..ks.num_moe_layers())
            .flat_map(|m| vec![ks.experts[m]; ks.top_k[m] as usize])
            .collect();
        let name = reader.file_name().to_string();
        drop(reader);
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        Ok(RoundRobin {
            file,
            name,
            ipt,
            record_bytes,
            stepping,
            cursors,
            active,
            at,
            cap,
            buffered,
            raw: Vec::new(),
            one: Vec::new(),
            limit,
            last: RecordPos {
                sequence: 0,
                phase: Phase::Decode,
                token: 0,
                len: 0,
                produced: 0,
            },
        })
    }

    /// The place of the step the last [`RoundRobin::next_record`] yielded.
    pub fn last_pos(&self) -> RecordPos {
        self.last
    }

    /// The next step's records (its tokens in order, every MoE layer of each in order), or
    /// `None` after the last step.
    pub fn next_record(&mut self) -> Result<Option<&[u16]>> {
        if self.at == self.active.len() {
            // a round is over: the sequences it exhausted leave the rotation
            let cursors = &mut self.cursors;
            self.active.retain(|&s| {
                let c = &mut cursors[s];
                if c.done() {
                    c.ids = Vec::new();
                }
                !c.done()
            });
            self.at = 0;
            if self.active.is_empty() {
                return Ok(None);
            }
        }
        let s = self.active[self.at];
        self.at += 1;
        let c = &mut self.cursors[s];
        if c.token == c.n {
            let (phase, start, n) = c.runs.pop().expect("an active sequence has steps left");
            (c.phase, c.start, c.n, c.token) = (phase, start, n, 0);
            (c.from, c.ids) = (0, Vec::new());
        }
        let left = (c.n - c.token).min(u64::from(u32::MAX)) as u32;
        let (len, produced) = self.stepping.chunk(&mut c.rng, c.phase, left);
        self.last = RecordPos {
            sequence: s as u32,
            phase: c.phase,
            token: c.token,
            len,
            produced,
        };
        c.token += u64::from(produced);
        let (token, len) = (self.last.token, len as usize);
        let ipt = self.ipt;
        let ids = if self.buffered {
            let c = &self.cursors[s];
            if token + len as u64 > c.from + (c.ids.len() / ipt) as u64 {
                self.fill(s, token)?;
            }
            let c = &self.cursors[s];
            let at = (token - c.from) as usize * ipt;
            &c.ids[at..at + len * ipt]
        } else {
            self.read_alone(s, token, len)?;
            &self.one[..]
        };
        if ids
            .iter()
            .zip(self.limit.iter().cycle())
            .any(|(&id, &n)| id >= n)
        {
            bail!(
                "{}: an expert id out of range in a record the streaming pass had accepted; the file changed while it was read, run again",
                self.name
            );
        }
        Ok(Some(ids))
    }

    /// Refill sequence `s`'s buffer with up to `cap` records of its phase from token `token`.
    fn fill(&mut self, s: usize, token: u64) -> Result<()> {
        let c = &mut self.cursors[s];
        let take = (c.n - token).min(self.cap as u64) as usize;
        let offset = c.start + token * self.record_bytes as u64;
        c.ids.resize(take * self.ipt, 0);
        c.from = token;
        let mut ids = std::mem::take(&mut c.ids);
        let read = self.read(offset, &mut ids);
        self.cursors[s].ids = ids;
        read
    }

    /// Read the `len` records of sequence `s`'s phase from token `token` into `one`.
    fn read_alone(&mut self, s: usize, token: u64, len: usize) -> Result<()> {
        let c = &self.cursors[s];
        let offset = c.start + token * self.record_bytes as u64;
        let mut one = std::mem::take(&mut self.one);
        one.resize(len * self.ipt, 0);
        let read = self.read(offset, &mut one);
        self.one = one;
        read
    }

    /// Read and decode `dst.len() / ipt` records from file offset `offset` into `dst`.
    fn read(&mut self, offset: u64, dst: &mut [u16]) -> Result<()> {
        self.raw.resize(dst.len() / self.ipt * self.record_bytes, 0);
        read_exact_at(&self.file, &mut self.raw, offset)
            .with_context(|| format!("reading {}", self.name))?;
        let id_bytes = self.ipt * 2;
        for (rec, ids) in self
            .raw
            .chunks_exact(self.record_bytes)
            .zip(dst.chunks_exact_mut(self.ipt))
        {
            for (d, b) in ids.iter_mut().zip(rec[..id_bytes].chunks_exact(2)) {
                *d = u16::from_le_bytes([b[0], b[1]]);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::stream::round_robin_chunks;
    use crate::verify::Acceptance;
    use traces::{ModelSpec, Provenance, SequenceData, TokenBlock, Trace};

    /// A trace of 2 MoE layers, top-1 of 200 experts, whose token t of sequence s selects
    /// expert (7 s + t) mod 200 in both layers, so every record names its place.
    fn trace(lens: &[(u64, u64)]) -> Trace {
        let block = |s: usize, from: u64, n: u64| TokenBlock {
            ids: (from..from + n)
                .flat_map(|t| [((7 * s as u64 + t) % 200) as u16; 2])
                .collect(),
            weights: None,
        };
        let sequences = lens
            .iter()
            .enumerate()
            .map(|(s, &(p, d))| SequenceData {
                prefill: block(s, 0, p),
                decode: block(s, p, d),
            })
            .collect();
        let model = ModelSpec::uniform("t", 2, 200, 1);
        Trace::from_blocks(model, Provenance::default(), sequences).unwrap()
    }

    /// Every step of `src`: its place and its records.
    fn drain(mut src: RoundRobin) -> Vec<(RecordPos, Vec<u16>)> {
        let mut got = Vec::new();
        while let Some(r) = src.next_record().unwrap() {
            let r = r.to_vec();
            got.push((src.last_pos(), r));
        }
        got
    }

    #[test]
    fn steps_come_round_robin_whatever_the_buffers() {
        let t = trace(&[(3, 9), (0, 2), (4, 0), (1, 13), (0, 0)]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        traces::write_file(&path, &t).unwrap();
        let ks = t.keyspace();
        let st = |verify, acceptance, prefill_chunk| Stepping {
            verify,
            acceptance,
            prefill_chunk,
            seed: 11,
        };
        let steppings = [
            Stepping::default(),
            st(2, Acceptance::Probability(0.6), None),
            st(3, Acceptance::Fixed(1), Some(2)),
            st(0, Acceptance::Fixed(0), Some(3)),
        ];
        for phases in [PhaseSel::Decode, PhaseSel::Prefill, PhaseSel::All] {
            for stepping in steppings {
                // the in-memory chunks, each with its tokens' records
                let expected: Vec<(RecordPos, Vec<u16>)> =
                    round_robin_chunks(&t, phases, &stepping)
                        .iter()
                        .map(|r| {
                            let pos = RecordPos {
                                sequence: r.sequence,
                                phase: r.phase,
                                token: r.token.into(),
                                len: r.len,
                                produced: r.produced,
                            };
                            let ids = r
                                .tokens()
                                .flat_map(|k| t.token(&ks, r.sequence as usize, r.phase, k))
                                .copied()
                                .collect();
                            (pos, ids)
                        })
                        .collect();
                // 4-byte records: 4 bytes read each chunk alone, 40 bytes gives 2-record
                // buffers (alone again for chunks of 2 or more), 200 bytes 12-record ones
                for buffer in [4, 40, 200, 1 << 20] {
                    let src = RoundRobin::open_with(&path, phases, stepping, buffer).unwrap();
                    let got = drain(src);
                    assert_eq!(got, expected, "{phases:?}, {stepping:?}, {buffer} bytes");
                }
            }
        }
    }
}
