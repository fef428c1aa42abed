//! Token records of a trace file in the cache regime's request order, read block by block
//! at their file offsets: round-robin across sequences (token 0 of every sequence in sequence
//! order, then token 1, ...; a sequence's tokens are its selected phases in trace order,
//! prefill before decode; an exhausted sequence drops out), the order of
//! [`crate::cache::stream::round_robin_requests`].
//!
//! Memory: one buffer per sequence still in the rotation, [`BUFFER_BYTES`] shared between
//! them; when that leaves a sequence fewer than two records, every record is read on its own
//! into one shared record (a read per token, bounded memory at any sequence count).

use super::positioned::read_exact_at;
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::path::Path;
use traces::{KeySpace, Phase, PhaseSel, TraceReader};

/// Bytes of record buffers shared by the sequences in the rotation (32 MiB: a block of
/// 32 k DeepSeek-V3 records of 928 bytes for one sequence; the cost of a read then vanishes
/// against the work on the tokens it brings).
pub const BUFFER_BYTES: usize = 32 << 20;

/// One sequence's remaining tokens: a run of records at consecutive file offsets per phase.
struct Cursor {
    /// (file offset of the next record, records left) per selected phase, in trace order.
    runs: Vec<(u64, u64)>,
    /// Decoded ids of the buffered records, and the next record to yield.
    ids: Vec<u16>,
    next: usize,
}

/// Round-robin token records of a trace file (see the module documentation).
pub struct RoundRobin {
    file: File,
    name: String,
    ipt: usize,
    record_bytes: usize,
    cursors: Vec<Cursor>,
    /// Sequences still in the rotation, in sequence order, and the next one's index in it.
    active: Vec<usize>,
    at: usize,
    /// Records per buffer refill (below 2: each record is read alone into `one`).
    cap: usize,
    raw: Vec<u8>,
    one: Vec<u16>,
    /// Expert count of each id position of a record (an id at or above it is corrupt).
    limit: Vec<u16>,
    /// Per sequence: records yielded so far, and its selected prefill tokens (yielded first).
    taken: Vec<u64>,
    prefill: Vec<u64>,
    /// The sequence of the last record yielded.
    last: usize,
}

/// Where a record [`RoundRobin`] yielded sits in the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordPos {
    pub sequence: u32,
    pub phase: Phase,
    /// The token's index in its sequence's phase.
    pub token: u64,
}

impl RoundRobin {
    /// Open the trace at `path` for the tokens of `phases`. The header is read and checked
    /// as [`TraceReader::open`] does; the records are not validated here (a pass of the
    /// streaming reader over the same file does that), only their ids' ranges as they are read.
    pub fn open(path: &Path, phases: PhaseSel) -> Result<RoundRobin> {
        Self::open_with(path, phases, BUFFER_BYTES)
    }

    /// [`RoundRobin::open`] with `buffer_bytes` of record buffers in all.
    pub fn open_with(path: &Path, phases: PhaseSel, buffer_bytes: usize) -> Result<RoundRobin> {
        let reader = TraceReader::open(path)?;
        let header = reader.header();
        let layout = reader.layout();
        let (ipt, record_bytes) = (layout.ids_per_token, layout.record_bytes);
        let mut offset = reader.payload_offset();
        let mut cursors = Vec::with_capacity(header.sequences.len());
        for s in &header.sequences {
            let mut runs = Vec::new();
            for (phase, n) in [
                (Phase::Prefill, s.prefill_tokens),
                (Phase::Decode, s.decode_tokens),
            ] {
                if phases.includes(phase) && n > 0 {
                    runs.push((offset, n));
                }
                offset += n * record_bytes as u64;
            }
            runs.reverse(); // popped from the back
            cursors.push(Cursor {
                runs,
                ids: Vec::new(),
                next: 0,
            });
        }
        let active: Vec<usize> = (0..cursors.len())
            .filter(|&s| !cursors[s].runs.is_empty())
            .collect();
        let cap = buffer_bytes / record_bytes.max(1) / active.len().max(1);
        // start at the end of a round: the first call opens round 0
        let at = active.len();
        let ks = KeySpace::new(&header.model);
        let limit = (0..ks.num_moe_layers())
            .flat_map(|m| vec![ks.experts[m]; ks.top_k[m] as usize])
            .collect();
        let name = reader.file_name().to_string();
        let prefill = header
            .sequences
            .iter()
            .map(|s| u64::from(phases.includes(Phase::Prefill)) * s.prefill_tokens)
            .collect();
        let taken = vec![0; header.sequences.len()];
        drop(reader);
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        Ok(RoundRobin {
            file,
            name,
            ipt,
            record_bytes,
            cursors,
            active,
            at,
            cap,
            raw: Vec::new(),
            one: vec![0; ipt],
            limit,
            taken,
            prefill,
            last: 0,
        })
    }

    /// The place of the record the last [`RoundRobin::next_record`] yielded.
    pub fn last_pos(&self) -> RecordPos {
        let (s, n) = (self.last, self.taken[self.last] - 1);
        let (phase, token) = match n.checked_sub(self.prefill[s]) {
            None => (Phase::Prefill, n),
            Some(d) => (Phase::Decode, d),
        };
        RecordPos {
            sequence: s as u32,
            phase,
            token,
        }
    }

    /// The next record's ids (every MoE layer in order), or `None` after the last token.
    pub fn next_record(&mut self) -> Result<Option<&[u16]>> {
        let buffered = self.cap >= 2;
        let ipt = self.ipt;
        if self.at == self.active.len() {
            // a round is over: the sequences it exhausted leave the rotation
            let cursors = &mut self.cursors;
            self.active.retain(|&s| {
                let c = &mut cursors[s];
                let left = !c.runs.is_empty() || (buffered && c.next * ipt < c.ids.len());
                if !left {
                    c.ids = Vec::new();
                }
                left
            });
            self.at = 0;
            if self.active.is_empty() {
                return Ok(None);
            }
        }
        let s = self.active[self.at];
        self.at += 1;
        self.last = s;
        self.taken[s] += 1;
        let c = &self.cursors[s];
        if !buffered || c.next * ipt == c.ids.len() {
            self.fill(s, if buffered { self.cap } else { 1 })?;
        }
        let ids = if buffered {
            let c = &mut self.cursors[s];
            c.next += 1;
            &c.ids[(c.next - 1) * ipt..c.next * ipt]
        } else {
            &self.one[..]
        };
        if ids.iter().zip(&self.limit).any(|(&id, &n)| id >= n) {
            bail!(
                "{}: an expert id out of range in a record the streaming pass had accepted; the file changed while it was read, run again",
                self.name
            );
        }
        Ok(Some(ids))
    }

    /// Read up to `n` records of sequence `s` (into its buffer, or `one` for `n == 1` unbuffered).
    fn fill(&mut self, s: usize, n: usize) -> Result<()> {
        let c = &mut self.cursors[s];
        let (offset, left) = c
            .runs
            .last_mut()
            .expect("an active sequence has tokens left");
        let take = (*left).min(n as u64) as usize;
        self.raw.resize(take * self.record_bytes, 0);
        read_exact_at(&self.file, &mut self.raw, *offset)
            .with_context(|| format!("reading {}", self.name))?;
        *offset += self.raw.len() as u64;
        *left -= take as u64;
        if *left == 0 {
            c.runs.pop();
        }
        let dst = if self.cap >= 2 {
            c.ids.resize(take * self.ipt, 0);
            c.next = 0;
            &mut c.ids[..]
        } else {
            &mut self.one[..]
        };
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
    use crate::cache::stream::round_robin_requests;
    use traces::{ModelSpec, Provenance, SequenceData, SequenceInfo, TokenBlock, Trace};

    /// A trace of 2 MoE layers, top-1 of 200 experts, whose token t of sequence s selects
    /// expert (7 s + t) mod 200 in both layers, so every record names its place.
    fn trace(lens: &[(u64, u64)]) -> Trace {
        let block = |s: usize, from: u64, n: u64| TokenBlock {
            ids: (from..from + n)
                .flat_map(|t| [((7 * s as u64 + t) % 200) as u16; 2])
                .collect(),
            weights: None,
        };
        Trace {
            header: traces::Header {
                model: ModelSpec::uniform("t", 2, 200, 1),
                provenance: Provenance::default(),
                sequences: lens
                    .iter()
                    .enumerate()
                    .map(|(i, &(p, d))| SequenceInfo {
                        name: format!("s{i}"),
                        prefill_tokens: p,
                        decode_tokens: d,
                    })
                    .collect(),
                has_weights: false,
            },
            sequences: lens
                .iter()
                .enumerate()
                .map(|(s, &(p, d))| SequenceData {
                    prefill: block(s, 0, p),
                    decode: block(s, p, d),
                })
                .collect(),
        }
    }

    #[test]
    fn records_come_round_robin_whatever_the_buffers() {
        let t = trace(&[(3, 9), (0, 2), (4, 0), (1, 13), (0, 0)]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        traces::write_file(&path, &t).unwrap();
        let ks = t.keyspace();
        for phases in [PhaseSel::Decode, PhaseSel::Prefill, PhaseSel::All] {
            let expected: Vec<Vec<u16>> = round_robin_requests(&t, phases)
                .iter()
                .map(|r| {
                    t.token(&ks, r.sequence as usize, r.phase, r.token as usize)
                        .to_vec()
                })
                .collect();
            // 4-byte records: 4 bytes read each alone, 40 bytes gives 2-record buffers
            for buffer in [4, 40, 1 << 20] {
                let mut src = RoundRobin::open_with(&path, phases, buffer).unwrap();
                let mut got = Vec::new();
                while let Some(r) = src.next_record().unwrap() {
                    got.push(r.to_vec());
                }
                assert_eq!(got, expected, "{phases:?}, {buffer} bytes");
            }
        }
    }
}
