//! The forward passes of a trace file as batches, recorded ones (`--batching recorded`) or
//! a continuous-batching scheduler's (`--batching continuous`,
//! [`crate::cache::continuous::ContinuousPasses`]), read at their records' file offsets: each pass one batch holding exactly its rows of the selected
//! phases, in the pass's order, as [`crate::cache::schedule::recorded_batches`] forms them in
//! memory. A run of a pass takes the next tokens of its sequence (prefill before decode);
//! each phase of it is one request, read with one positioned read.
//!
//! Memory: the header's pass list (read with the header, which is capped at 64 MiB) or the
//! scheduler's state, one offset and one count per sequence, and the records of one pass.

use super::positioned::read_exact_at;
use super::source::RecordPos;
use crate::cache::continuous::ContinuousPasses;
use crate::cache::StepSource;
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::path::Path;
use traces::{KeySpace, Pass, Phase, PhaseSel, TraceReader};

/// Where the passes come from: the header's list, or the scheduler.
enum PassList {
    Stored(std::vec::IntoIter<Pass>),
    Scheduled(ContinuousPasses),
}

impl PassList {
    fn next(&mut self) -> Option<Pass> {
        match self {
            PassList::Stored(p) => p.next(),
            PassList::Scheduled(p) => p.next(),
        }
    }
}

/// The passes of a trace file, one batch at a time.
pub struct RecordedPasses {
    file: File,
    name: String,
    ipt: usize,
    record_bytes: usize,
    phases: PhaseSel,
    passes: PassList,
    /// Per sequence: file offset of its first record, and its prompt tokens.
    start: Vec<(u64, u64)>,
    /// Tokens of each sequence the passes so far took.
    taken: Vec<u64>,
    raw: Vec<u8>,
    /// Expert count of each id position of a record (an id at or above it is corrupt).
    limit: Vec<u16>,
}

impl RecordedPasses {
    /// Open the trace at `path` for the rows of `phases`, its passes those of `source`
    /// (recorded or continuous); errors when recorded passes are asked of a trace without.
    pub fn open(path: &Path, phases: PhaseSel, source: StepSource) -> Result<RecordedPasses> {
        let reader = TraceReader::open(path)?;
        let header = reader.header();
        let passes = match (source, &header.passes) {
            (StepSource::Continuous(c), _) => {
                PassList::Scheduled(ContinuousPasses::new(&header.sequences, c))
            }
            (_, Some(p)) => PassList::Stored(p.clone().into_iter()),
            (_, None) => bail!(crate::cache::schedule::recorded_batches_missing()),
        };
        let layout = *reader.layout();
        let mut offset = reader.payload_offset();
        let start = header
            .sequences
            .iter()
            .map(|s| {
                let at = offset;
                offset += (s.prefill_tokens + s.decode_tokens) * layout.record_bytes as u64;
                (at, s.prefill_tokens)
            })
            .collect();
        let ks = KeySpace::new(&header.model);
        let limit = (0..ks.num_moe_layers())
            .flat_map(|m| vec![ks.experts[m]; ks.top_k[m] as usize])
            .collect();
        let name = reader.file_name().to_string();
        let sequences = header.sequences.len();
        drop(reader);
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        Ok(RecordedPasses {
            file,
            name,
            ipt: layout.ids_per_token,
            record_bytes: layout.record_bytes,
            phases,
            passes,
            start,
            taken: vec![0; sequences],
            raw: Vec::new(),
            limit,
        })
    }

    /// The next pass holding rows of the selected phases: its records into `records` and
    /// each request's place into `pos`; false after the last pass.
    pub fn next(&mut self, records: &mut Vec<u16>, pos: &mut Vec<RecordPos>) -> Result<bool> {
        records.clear();
        pos.clear();
        while pos.is_empty() {
            let Some(pass) = self.passes.next() else {
                break;
            };
            for run in &pass.runs {
                self.take_run(run.sequence, u64::from(run.tokens), records, pos)?;
            }
        }
        Ok(!pos.is_empty())
    }

    /// Take the next `tokens` tokens of sequence `s`: its rows of the selected phases, one
    /// request per phase.
    fn take_run(
        &mut self,
        s: u32,
        tokens: u64,
        records: &mut Vec<u16>,
        pos: &mut Vec<RecordPos>,
    ) -> Result<()> {
        let (at, prefill) = self.start[s as usize];
        let from = self.taken[s as usize];
        let to = from + tokens;
        self.taken[s as usize] = to;
        let p = (from.min(prefill), to.min(prefill));
        for (phase, (a, b), base) in [
            (Phase::Prefill, p, 0),
            (Phase::Decode, (from.max(p.1), to), prefill),
        ] {
            if b <= a || !self.phases.includes(phase) {
                continue;
            }
            let len = (b - a) as usize;
            self.read(at + a * self.record_bytes as u64, len, records)?;
            pos.push(RecordPos {
                sequence: s,
                phase,
                token: a - base,
                len: len as u32,
                produced: len as u32,
            });
        }
        Ok(())
    }

    /// Append the ids of the `len` records at file offset `offset` to `records`.
    fn read(&mut self, offset: u64, len: usize, records: &mut Vec<u16>) -> Result<()> {
        self.raw.resize(len * self.record_bytes, 0);
        read_exact_at(&self.file, &mut self.raw, offset)
            .with_context(|| format!("reading {}", self.name))?;
        for rec in self.raw.chunks_exact(self.record_bytes) {
            for (i, b) in rec[..self.ipt * 2].chunks_exact(2).enumerate() {
                let id = u16::from_le_bytes([b[0], b[1]]);
                if id >= self.limit[i] {
                    bail!(
                        "{}: an expert id out of range in a record the streaming pass had accepted; the file changed while it was read, run again",
                        self.name
                    );
                }
                records.push(id);
            }
        }
        Ok(())
    }
}
