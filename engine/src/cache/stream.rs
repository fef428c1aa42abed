//! The access stream of the cache regime: groups of unit accesses built from a trace, a
//! unit map and a batching plan.

use crate::verify::Stepping;
/// "Never used again" in [`AccessStream::next_use`].
pub const NEVER_U32: u32 = u32::MAX;
use policies::UnitMap;
use traces::{KeySpace, Phase, PhaseSel, Trace};

/// One request: one step of one sequence, a chunk of `len` consecutive tokens of one phase
/// from `token` on (one token per decode step, the K + 1 tokens of a verify step, or a prompt
/// chunk), producing `produced` tokens (the chunk's prompt tokens, or the accepted drafts + 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub sequence: u32,
    pub phase: Phase,
    pub token: u32,
    pub len: u32,
    pub produced: u32,
}

impl Request {
    /// The trace tokens of the chunk.
    #[inline]
    pub fn tokens(&self) -> std::ops::Range<usize> {
        self.token as usize..(self.token + self.len) as usize
    }
}

/// The requests of a trace in arrival order, one token each: interleaved round-robin across
/// sequences (token 0 of every sequence in sequence order, then token 1, ...). A sequence's
/// tokens are its selected phases in trace order (prefill before decode); a sequence with
/// fewer tokens drops out of the rotation once exhausted, and the others continue.
pub fn round_robin_requests(trace: &Trace, phases: PhaseSel) -> Vec<Request> {
    round_robin_chunks(trace, phases, &Stepping::default())
}

/// [`round_robin_requests`] with the steps of `stepping`: every sequence's chunks
/// ([`Stepping::sequence_chunks`]), interleaved round-robin (chunk 0 of every sequence, then
/// chunk 1, ...).
pub fn round_robin_chunks(trace: &Trace, phases: PhaseSel, stepping: &Stepping) -> Vec<Request> {
    let per_seq: Vec<Vec<Request>> = (0..trace.sequences.len())
        .map(|s| stepping.sequence_chunks(trace, s, phases))
        .collect();
    let longest = per_seq.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| per_seq.iter().filter_map(move |r| r.get(i).copied()))
        .collect()
}

/// Every access of a run, group-major. A group is the accesses of one (batch step, MoE
/// layer): the union, in selection order (request order in the batch, then the router's
/// order, then a key's units in order), of the units holding the experts its requests
/// selected; a unit appears at most once per group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessStream {
    /// Unit ids, group after group.
    pub units: Vec<u32>,
    /// Group g's accesses are `units[group_start[g] .. group_start[g + 1]]`.
    pub group_start: Vec<u32>,
    /// MoE layer (KeySpace index) of each group.
    pub group_layer: Vec<u32>,
    /// Batch step b's groups are `batch_start[b] .. batch_start[b + 1]`.
    pub batch_start: Vec<u32>,
    /// Tokens the stream produces (one per request without verification or prompt chunks).
    pub tokens: u64,
    /// Units in the bank (ids are below this).
    pub num_units: usize,
}

impl AccessStream {
    /// An empty stream over `num_units` units.
    pub fn new(num_units: usize) -> Self {
        AccessStream {
            group_start: vec![0],
            batch_start: vec![0],
            num_units,
            ..Default::default()
        }
    }

    /// Number of groups.
    pub fn num_groups(&self) -> usize {
        self.group_layer.len()
    }

    /// Units of group `g`.
    #[inline]
    pub fn group(&self, g: usize) -> &[u32] {
        &self.units[self.group_start[g] as usize..self.group_start[g + 1] as usize]
    }

    /// Append a group (its units must be distinct).
    pub fn push_group(&mut self, layer: u32, units: &[u32]) {
        self.units.extend_from_slice(units);
        self.group_start.push(self.units.len() as u32);
        self.group_layer.push(layer);
    }

    /// Close the current batch step, which produced `tokens` tokens.
    pub fn end_batch(&mut self, tokens: u64) {
        self.batch_start.push(self.group_layer.len() as u32);
        self.tokens += tokens;
    }

    /// For every access, the position of the next access to the same unit, or
    /// [`NEVER_U32`]: u32, as [`AccessStream::build`] bounds the stream below 2^32 - 1
    /// accesses. One backward pass, O(accesses + units).
    pub fn next_use(&self) -> Vec<u32> {
        let mut last = vec![NEVER_U32; self.num_units];
        let mut next = vec![NEVER_U32; self.units.len()];
        for (pos, &u) in self.units.iter().enumerate().rev() {
            next[pos] = last[u as usize];
            last[u as usize] = pos as u32;
        }
        next
    }

    /// Build the stream of `batches` (lists of requests decoded together), every MoE layer
    /// in order per batch. Errors, before building anything, when the stream could exceed
    /// 2^32 - 2 accesses (positions are u32 here; `sim run` on a trace file streams longer
    /// ones, `sim::bounded`).
    pub fn build(
        trace: &Trace,
        ks: &KeySpace,
        map: &UnitMap,
        batches: &[Vec<Request>],
    ) -> Result<AccessStream, super::CacheError> {
        check_accesses_bound(accesses_bound(ks, map, batches))?;
        let mut s = AccessStream::new(map.num_units());
        let mut stamp = vec![0u32; map.num_units()];
        let mut group_units: Vec<u32> = Vec::new();
        let mut g = 0u32;
        for batch in batches {
            for m in 0..ks.num_moe_layers() {
                g += 1;
                group_units.clear();
                for r in batch {
                    for t in r.tokens() {
                        let sel = trace.selection(ks, r.sequence as usize, r.phase, t, m);
                        for &e in sel {
                            for u in map.units_of(ks.key(m, e)) {
                                if stamp[u as usize] != g {
                                    stamp[u as usize] = g;
                                    group_units.push(u);
                                }
                            }
                        }
                    }
                }
                s.push_group(m as u32, &group_units);
            }
            s.end_batch(batch.iter().map(|r| r.produced as u64).sum());
            check_accesses_bound(s.units.len() as u64)?;
        }
        Ok(s)
    }
}

/// An upper bound of the accesses of `batches`' stream: per batch, every selection's units,
/// and at most every unit once per MoE layer.
fn accesses_bound(ks: &KeySpace, map: &UnitMap, batches: &[Vec<Request>]) -> u64 {
    let per_key = map.key_count.iter().copied().max().unwrap_or(1) as u64;
    let tokens = batches.iter().map(|b| b.iter().map(|r| r.len as u64).sum());
    bound_of(
        tokens,
        ks.ids_per_token() as u64 * per_key,
        (ks.num_moe_layers() as u64).saturating_mul(map.num_units() as u64),
    )
}

/// The sum over batches of `tokens` times `per_token` accesses, each batch at most
/// `per_batch`.
fn bound_of(tokens: impl Iterator<Item = u64>, per_token: u64, per_batch: u64) -> u64 {
    tokens
        .map(|t| t.saturating_mul(per_token).min(per_batch))
        .fold(0u64, u64::saturating_add)
}

/// Refuse a stream of up to `accesses` accesses that u32 positions cannot number.
fn check_accesses_bound(accesses: u64) -> Result<(), super::CacheError> {
    if accesses >= NEVER_U32 as u64 {
        return Err(super::CacheError::Input(format!(
            "the access stream could reach {accesses} accesses, more than the {} a stream held in memory numbers; select fewer tokens (--phase) or a coarser mechanism, or use a run that streams the trace file (docs/DESIGN.md \"Bounded memory\")",
            NEVER_U32 - 1
        )));
    }
    Ok(())
}

/// Statistics of a profile trace that the pinning policies rank units by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileStats {
    /// Groups (token, layer) of the profile that access each unit, batch 1.
    pub counts: Vec<u64>,
    /// Whether each unit is accessed in every token of the profile.
    pub always_on: Vec<bool>,
    /// Tokens of the profile.
    pub tokens: u64,
}

impl ProfileStats {
    /// Statistics of a stream built with batch 1 (one token per batch step).
    pub fn from_stream(s: &AccessStream) -> ProfileStats {
        let mut counts = vec![0u64; s.num_units];
        let mut tokens_with = vec![0u64; s.num_units];
        let mut stamp = vec![u32::MAX; s.num_units];
        for b in 0..s.batch_start.len() - 1 {
            for g in s.batch_start[b] as usize..s.batch_start[b + 1] as usize {
                for &u in s.group(g) {
                    counts[u as usize] += 1;
                    if stamp[u as usize] != b as u32 {
                        stamp[u as usize] = b as u32;
                        tokens_with[u as usize] += 1;
                    }
                }
            }
        }
        let steps = (s.batch_start.len() - 1) as u64;
        ProfileStats {
            counts,
            always_on: tokens_with
                .iter()
                .map(|&n| steps > 0 && n == steps)
                .collect(),
            tokens: s.tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: batches of 1, 3 and 5 tokens at 10 accesses a token, capped at 40 a batch:
    /// 10 + 30 + 40 = 80; saturating at the u64 limit instead of wrapping.
    #[test]
    fn the_bound_sums_capped_batches() {
        assert_eq!(bound_of([1, 3, 5].into_iter(), 10, 40), 80);
        assert_eq!(bound_of([u64::MAX, 1].into_iter(), 2, u64::MAX), u64::MAX);
    }

    /// The last stream u32 positions number is 2^32 - 2 accesses; one more is refused, with
    /// an error naming the count and the remedy.
    #[test]
    fn a_stream_past_u32_positions_is_refused() {
        assert!(check_accesses_bound(u32::MAX as u64 - 1).is_ok());
        let e = check_accesses_bound(u32::MAX as u64)
            .unwrap_err()
            .to_string();
        assert!(e.contains("4294967295 accesses"), "{e}");
        assert!(e.contains("--phase"), "{e}");
    }
}
