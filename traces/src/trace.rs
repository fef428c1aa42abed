//! The in-memory trace: header plus every selection, for traces small enough to load whole.
//! Large traces are read token by token with the streaming reader instead.

use crate::model::{Header, ModelSpec};
use serde::{Deserialize, Serialize};

/// Phase of a token: the prompt (prefill) or a generated token (decode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Prefill,
    Decode,
}

impl Phase {
    /// `prefill` or `decode`, as the importers, the CSV exporter and `--phase` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which phases a command looks at (`--phase decode|prefill|all`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseSel {
    #[default]
    Decode,
    Prefill,
    All,
}

impl PhaseSel {
    /// True when tokens of `phase` are included.
    pub fn includes(self, phase: Phase) -> bool {
        matches!(
            (self, phase),
            (PhaseSel::All, _)
                | (PhaseSel::Decode, Phase::Decode)
                | (PhaseSel::Prefill, Phase::Prefill)
        )
    }

    /// The phases included, in trace order (prefill before decode).
    pub fn phases(self) -> &'static [Phase] {
        match self {
            PhaseSel::Decode => &[Phase::Decode],
            PhaseSel::Prefill => &[Phase::Prefill],
            PhaseSel::All => &[Phase::Prefill, Phase::Decode],
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PhaseSel::Decode => "decode",
            PhaseSel::Prefill => "prefill",
            PhaseSel::All => "all",
        }
    }
}

/// Dense numbering of expert instances: key = offset of its layer + expert id.
///
/// Only MoE layers have keys. For a model whose MoE layers all have E experts the key of
/// (MoE layer index m, expert e) is `m * E + e`, the numbering used by the exporters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpace {
    /// Model layer index of each MoE layer, in order.
    pub moe_layers: Vec<usize>,
    /// Experts of each MoE layer.
    pub experts: Vec<u16>,
    /// Top-k of each MoE layer.
    pub top_k: Vec<u16>,
    /// First key of each MoE layer; `offsets[m+1] - offsets[m] == experts[m]`; last = total.
    pub offsets: Vec<u32>,
    /// Offset of each MoE layer's ids inside one token's record; last = ids per token.
    pub sel_offsets: Vec<usize>,
}

impl KeySpace {
    pub fn new(model: &ModelSpec) -> Self {
        let moe_layers = model.moe_layers();
        let experts: Vec<u16> = moe_layers
            .iter()
            .map(|&l| model.layers[l].experts)
            .collect();
        let top_k: Vec<u16> = moe_layers.iter().map(|&l| model.layers[l].top_k).collect();
        let mut offsets = vec![0u32];
        let mut sel_offsets = vec![0usize];
        for m in 0..moe_layers.len() {
            offsets.push(offsets[m] + experts[m] as u32);
            sel_offsets.push(sel_offsets[m] + top_k[m] as usize);
        }
        KeySpace {
            moe_layers,
            experts,
            top_k,
            offsets,
            sel_offsets,
        }
    }

    /// Number of MoE layers.
    pub fn num_moe_layers(&self) -> usize {
        self.moe_layers.len()
    }

    /// Total number of expert instances (keys).
    pub fn num_keys(&self) -> usize {
        *self.offsets.last().unwrap() as usize
    }

    /// Selected ids per token, summed over MoE layers.
    pub fn ids_per_token(&self) -> usize {
        *self.sel_offsets.last().unwrap()
    }

    /// Key of expert `e` in MoE layer `m`.
    #[inline]
    pub fn key(&self, m: usize, e: u16) -> u32 {
        self.offsets[m] + e as u32
    }

    /// (MoE layer index, expert id) of a key.
    pub fn split(&self, key: u32) -> (usize, u16) {
        let m = self.offsets.partition_point(|&o| o <= key) - 1;
        (m, (key - self.offsets[m]) as u16)
    }
}

/// Selections of consecutive tokens of one phase of one sequence.
///
/// `ids` is token-major: token t's record is `ids[t*stride .. (t+1)*stride]` with
/// `stride = KeySpace::ids_per_token()`, and inside it MoE layer m's selection is
/// `[sel_offsets[m] .. sel_offsets[m+1]]`, in the order the router emitted it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenBlock {
    pub ids: Vec<u16>,
    /// Router weights, same shape as `ids`, when the trace records them.
    pub weights: Option<Vec<f32>>,
}

/// Both phases of one sequence.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SequenceData {
    pub prefill: TokenBlock,
    pub decode: TokenBlock,
}

impl SequenceData {
    pub fn block(&self, phase: Phase) -> &TokenBlock {
        match phase {
            Phase::Prefill => &self.prefill,
            Phase::Decode => &self.decode,
        }
    }
}

/// A whole trace in memory. Invariants (checked by the reader and by [`Trace::check`]):
/// `sequences.len() == header.sequences.len()`, and each block holds exactly the header's
/// token count times `ids_per_token` ids, each below its layer's expert count, no repeats
/// inside one selection.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub header: Header,
    pub sequences: Vec<SequenceData>,
}

impl Trace {
    /// A decode-only trace of `model` with one sequence per entry of `sequences`, named
    /// `s0`, `s1`, ...; `sequences[s][t][m]` is the selection of sequence s, token t, MoE
    /// layer m. Token counts in the header follow from the data; the result is checked
    /// ([`Trace::check`]), so a wrong shape, an id out of range or a repeat is an error.
    pub fn decode_only(
        model: ModelSpec,
        provenance: crate::Provenance,
        sequences: &[Vec<Vec<Vec<u16>>>],
    ) -> Result<Trace, String> {
        let sequences = sequences
            .iter()
            .map(|s| SequenceData {
                prefill: TokenBlock::default(),
                decode: TokenBlock {
                    ids: s.iter().flatten().flatten().copied().collect(),
                    weights: None,
                },
            })
            .collect();
        Trace::from_blocks(model, provenance, sequences)
    }

    /// A trace of `model` with the token blocks `sequences` (unweighted), named `s0`, `s1`,
    /// ...; the header's token counts follow from the blocks' lengths (ids per token: the
    /// model's top-k summed over its MoE layers). Checked ([`Trace::check`]): a block whose
    /// length is not a whole number of tokens, an id out of range or a repeat is an error.
    pub fn from_blocks(
        model: ModelSpec,
        provenance: crate::Provenance,
        sequences: Vec<SequenceData>,
    ) -> Result<Trace, String> {
        let ipt = KeySpace::new(&model).ids_per_token().max(1);
        let tokens = |b: &TokenBlock| (b.ids.len() / ipt) as u64;
        let trace = Trace {
            header: Header {
                model,
                provenance,
                sequences: sequences
                    .iter()
                    .enumerate()
                    .map(|(i, s)| crate::SequenceInfo {
                        name: format!("s{i}"),
                        prefill_tokens: tokens(&s.prefill),
                        decode_tokens: tokens(&s.decode),
                    })
                    .collect(),
                has_weights: false,
                passes: None,
            },
            sequences,
        };
        trace.check()?;
        Ok(trace)
    }

    /// The key space of the trace's model.
    pub fn keyspace(&self) -> KeySpace {
        KeySpace::new(&self.header.model)
    }

    /// Number of tokens of sequence `s` in `phase`.
    pub fn tokens(&self, s: usize, phase: Phase) -> usize {
        let info = &self.header.sequences[s];
        (match phase {
            Phase::Prefill => info.prefill_tokens,
            Phase::Decode => info.decode_tokens,
        }) as usize
    }

    /// Total tokens over all sequences in the selected phases.
    pub fn total_tokens(&self, phases: PhaseSel) -> usize {
        self.header.tokens(phases) as usize
    }

    /// The whole record (all MoE layers) of token `t` of sequence `s` in `phase`.
    pub fn token(&self, ks: &KeySpace, s: usize, phase: Phase, t: usize) -> &[u16] {
        let stride = ks.ids_per_token();
        &self.sequences[s].block(phase).ids[t * stride..(t + 1) * stride]
    }

    /// Selection of MoE layer `m` for token `t` of sequence `s` in `phase`.
    pub fn selection(&self, ks: &KeySpace, s: usize, phase: Phase, t: usize, m: usize) -> &[u16] {
        &self.token(ks, s, phase, t)[ks.sel_offsets[m]..ks.sel_offsets[m + 1]]
    }

    /// Check the invariants above; the message names where the first violation is.
    pub fn check(&self) -> Result<(), String> {
        let ks = self.keyspace();
        if self.sequences.len() != self.header.sequences.len() {
            return Err(format!(
                "header lists {} sequences but {} are present",
                self.header.sequences.len(),
                self.sequences.len()
            ));
        }
        if let Some(p) = &self.header.passes {
            crate::model::check_passes(p, &self.header.sequences)?;
        }
        let stride = ks.ids_per_token();
        for (s, data) in self.sequences.iter().enumerate() {
            let seq = || format!("sequence {s} ({:?})", self.header.sequences[s].name);
            for &phase in PhaseSel::All.phases() {
                let block = data.block(phase);
                let n = self.tokens(s, phase);
                if block.ids.len() != n * stride {
                    return Err(format!(
                        "{} {phase}: {} ids, expected {n} tokens x {stride}",
                        seq(),
                        block.ids.len()
                    ));
                }
                if let Some(w) = &block.weights {
                    if w.len() != block.ids.len() {
                        return Err(format!(
                            "{} {phase}: weights and ids differ in length",
                            seq()
                        ));
                    }
                }
                if self.header.has_weights != block.weights.is_some() {
                    return Err(format!(
                        "{} {phase}: weights presence disagrees with header",
                        seq()
                    ));
                }
                for t in 0..n {
                    for m in 0..ks.num_moe_layers() {
                        let sel = self.selection(&ks, s, phase, t, m);
                        for (i, &e) in sel.iter().enumerate() {
                            if e >= ks.experts[m] {
                                return Err(format!(
                                    "{} {phase} token {t} layer {}: expert id {e} >= {} experts",
                                    seq(),
                                    ks.moe_layers[m],
                                    ks.experts[m]
                                ));
                            }
                            if sel[..i].contains(&e) {
                                return Err(format!(
                                    "{} {phase} token {t} layer {}: expert id {e} repeated",
                                    seq(),
                                    ks.moe_layers[m]
                                ));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(ids: &[u16]) -> TokenBlock {
        TokenBlock {
            ids: ids.to_vec(),
            weights: None,
        }
    }

    #[test]
    fn a_trace_from_blocks_counts_its_tokens_and_is_checked() {
        // 2 MoE layers, top-2: 4 ids a token
        let model = ModelSpec::uniform("t", 2, 8, 2);
        let seq = |p: &[u16], d: &[u16]| SequenceData {
            prefill: block(p),
            decode: block(d),
        };
        let t = Trace::from_blocks(
            model.clone(),
            crate::Provenance::default(),
            vec![
                seq(&[0, 1, 2, 3], &[4, 5, 6, 7, 1, 2, 3, 4]),
                seq(&[], &[0, 7, 7, 0]),
            ],
        )
        .unwrap();
        let counts: Vec<(u64, u64)> = t
            .header
            .sequences
            .iter()
            .map(|s| (s.prefill_tokens, s.decode_tokens))
            .collect();
        assert_eq!(counts, [(1, 2), (0, 1)]);
        assert_eq!(t.header.sequences[1].name, "s1");
        // six ids are not a whole number of tokens; 9 is out of range
        let part = Trace::from_blocks(
            model.clone(),
            crate::Provenance::default(),
            vec![seq(&[], &[0, 1, 2, 3, 4, 5])],
        );
        assert!(part.is_err());
        let range = Trace::from_blocks(
            model,
            crate::Provenance::default(),
            vec![seq(&[], &[0, 1, 2, 9])],
        );
        assert!(range.is_err());
    }
}
