//! Several tokens per step: speculative or multi-token verification and prompt chunks.
//!
//! With `--verify K`, each decode step of a sequence verifies K drafted tokens plus the current
//! one in one forward pass: its chunk is the next K + 1 tokens of the trace (the routing of
//! drafts that get rejected is approximated by the trace's next tokens, since a trace records
//! only the accepted stream), every MoE layer reads the union of the chunk's experts, and the
//! sequence advances by the accepted drafts + 1. Drafts are accepted independently with
//! probability P (`--acceptance P`; the first rejection ends the step), drawn with PCG from
//! `--seed`, one stream per sequence so a sequence's draws do not depend on batching; or every
//! step accepts exactly N (`--accepted N`), for a deterministic check. Expected tokens per
//! step: (1 - P^(K+1)) / (1 - P) (K + 1 at P = 1), or N + 1.
//!
//! With `--prefill-chunk C`, the prompt is processed in chunks of C tokens (the last one
//! shorter), each one step with its union, before the sequence decodes.
//!
//! With K = 0 and no prompt chunks every step is one token of one sequence, as before.

use crate::cache::Request;
use rand::Rng;
use rand_pcg::Pcg64;
use serde::Serialize;
use traces::{Phase, PhaseSel, Trace};

/// How many drafts a verify step accepts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Acceptance {
    /// Each draft is accepted independently with this probability (0 ..= 1); the first
    /// rejected draft ends the step.
    Probability(f64),
    /// Every step accepts exactly this many drafts (at most K; fewer only where the trace
    /// ends inside the chunk).
    Fixed(u32),
}

/// How a run's steps take tokens: verified drafts per decode step and the prompt chunk.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stepping {
    /// Drafted tokens verified per decode step (`--verify K`); 0: one token per step.
    pub verify: u32,
    /// How many drafts each step accepts (`--acceptance` or `--accepted`).
    pub acceptance: Acceptance,
    /// Prompt tokens per prefill step (`--prefill-chunk C`); `None`: one per step.
    pub prefill_chunk: Option<u32>,
    /// Seed of the acceptance draws (`--seed`).
    pub seed: u64,
}

impl Default for Stepping {
    /// One token per step: no drafts, no prompt chunks.
    fn default() -> Self {
        Stepping {
            verify: 0,
            acceptance: Acceptance::Fixed(0),
            prefill_chunk: None,
            seed: 0,
        }
    }
}

/// Why a stepping was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SteppingError {
    #[error("--acceptance {0}: give a probability from 0 to 1 (e.g. 0.7)")]
    Probability(f64),
    #[error("--accepted {accepted} is more than the --verify {verify} drafts a step verifies")]
    AcceptedAboveK { accepted: u32, verify: u32 },
    #[error("--prefill-chunk 0: a prompt chunk holds at least one token")]
    ChunkZero,
    #[error("--verify drafts decode tokens, but --phase prefill replays only the prompt; use --phase decode or all")]
    VerifyWithoutDecode,
    #[error("--prefill-chunk chunks the prompt, but --phase decode replays no prompt token; use --phase all (or prefill)")]
    ChunkWithoutPrefill,
}

impl Stepping {
    /// True when every step is one token of one sequence (the run is as without stepping).
    pub fn is_off(&self) -> bool {
        self.verify == 0 && self.prefill_chunk.is_none()
    }

    /// Check the stepping against the replayed phases.
    pub fn check(&self, phases: PhaseSel) -> Result<(), SteppingError> {
        match self.acceptance {
            Acceptance::Probability(p) if !(0.0..=1.0).contains(&p) => {
                return Err(SteppingError::Probability(p))
            }
            Acceptance::Fixed(n) if n > self.verify => {
                return Err(SteppingError::AcceptedAboveK {
                    accepted: n,
                    verify: self.verify,
                })
            }
            _ => {}
        }
        if self.prefill_chunk == Some(0) {
            return Err(SteppingError::ChunkZero);
        }
        if self.verify > 0 && phases == PhaseSel::Prefill {
            return Err(SteppingError::VerifyWithoutDecode);
        }
        if self.prefill_chunk.is_some() && phases == PhaseSel::Decode {
            return Err(SteppingError::ChunkWithoutPrefill);
        }
        Ok(())
    }

    /// Expected tokens a verify step produces per sequence: (1 - P^(K+1)) / (1 - P), or N + 1
    /// with a fixed count.
    pub fn expected_tokens_per_step(&self) -> f64 {
        match self.acceptance {
            Acceptance::Probability(p) => expected_tokens(self.verify, p),
            Acceptance::Fixed(n) => (n.min(self.verify) + 1) as f64,
        }
    }

    /// The steps of sequence `s` of `trace` over `phases`, in order: one request per step,
    /// each a chunk of consecutive tokens of one phase (see the module doc).
    pub fn sequence_chunks(&self, trace: &Trace, s: usize, phases: PhaseSel) -> Vec<Request> {
        let mut out = Vec::new();
        let mut rng = self.sequence_rng(s);
        for &phase in phases.phases() {
            let n = trace.tokens(s, phase) as u32;
            let mut token = 0u32;
            while token < n {
                let (len, produced) = self.chunk(&mut rng, phase, n - token);
                out.push(Request {
                    sequence: s as u32,
                    phase,
                    token,
                    len,
                    produced,
                });
                token += produced;
            }
        }
        out
    }

    /// The acceptance draws of sequence `s`: one PCG stream per sequence from the seed, so a
    /// sequence's draws do not depend on the other sequences (nor on batching).
    pub fn sequence_rng(&self, s: usize) -> Pcg64 {
        Pcg64::new(u128::from(self.seed), s as u128)
    }

    /// The next step of a sequence in `phase` with `left` tokens of it still to process:
    /// the chunk's length and the tokens it produces, drawing from the sequence's `rng`
    /// ([`Stepping::sequence_rng`]) in decode steps with an acceptance probability.
    pub fn chunk(&self, rng: &mut Pcg64, phase: Phase, left: u32) -> (u32, u32) {
        match phase {
            Phase::Prefill => {
                let c = self.prefill_chunk.unwrap_or(1).min(left);
                (c, c)
            }
            Phase::Decode => {
                let len = self.verify.saturating_add(1).min(left);
                (len, self.accepted(rng, len - 1) + 1)
            }
        }
    }

    /// The longest chunk a step may take: K + 1 tokens, or the prompt chunk.
    pub fn max_chunk(&self) -> u32 {
        self.verify
            .saturating_add(1)
            .max(self.prefill_chunk.unwrap_or(1))
    }

    /// Drafts accepted in one step with `drafts` drafts in its chunk.
    fn accepted(&self, rng: &mut Pcg64, drafts: u32) -> u32 {
        match self.acceptance {
            Acceptance::Fixed(n) => n.min(drafts),
            Acceptance::Probability(p) => {
                (0..drafts).take_while(|_| rng.gen::<f64>() < p).count() as u32
            }
        }
    }
}

/// Expected tokens per verify step of `k` drafts accepted independently with probability `p`:
/// the current token plus each draft whose predecessors were all accepted,
/// sum_{i=0..=k} p^i = (1 - p^(k+1)) / (1 - p).
pub fn expected_tokens(k: u32, p: f64) -> f64 {
    if p >= 1.0 {
        k as f64 + 1.0
    } else {
        (1.0 - p.powf(k as f64 + 1.0)) / (1.0 - p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_tokens_match_the_closed_form() {
        for (k, p) in [(1u32, 0.5f64), (2, 0.7), (4, 0.9), (3, 0.0)] {
            // the current token, then each draft whose predecessors were all accepted
            let sum: f64 = (0..=k).map(|i| p.powi(i as i32)).sum();
            assert!((expected_tokens(k, p) - sum).abs() < 1e-12, "{k} {p}");
        }
        // K = 2 at P = 0.7: 1 + 0.7 + 0.49
        assert!((expected_tokens(2, 0.7) - 2.19).abs() < 1e-12);
        assert_eq!(expected_tokens(2, 1.0), 3.0);
        assert_eq!(expected_tokens(0, 0.3), 1.0);
    }

    #[test]
    fn checks_name_the_flag() {
        let s = |verify, acceptance, chunk| Stepping {
            verify,
            acceptance,
            prefill_chunk: chunk,
            seed: 0,
        };
        let e = s(2, Acceptance::Probability(1.5), None).check(PhaseSel::Decode);
        assert_eq!(e, Err(SteppingError::Probability(1.5)));
        let e = s(2, Acceptance::Fixed(3), None).check(PhaseSel::Decode);
        assert!(e.unwrap_err().to_string().contains("--accepted 3"));
        let e = s(2, Acceptance::Fixed(1), None).check(PhaseSel::Prefill);
        assert_eq!(e, Err(SteppingError::VerifyWithoutDecode));
        let e = s(0, Acceptance::Fixed(0), Some(4)).check(PhaseSel::Decode);
        assert_eq!(e, Err(SteppingError::ChunkWithoutPrefill));
        let e = s(0, Acceptance::Fixed(0), Some(0)).check(PhaseSel::All);
        assert_eq!(e, Err(SteppingError::ChunkZero));
        assert!(s(2, Acceptance::Probability(1.0), Some(8))
            .check(PhaseSel::All)
            .is_ok());
        assert!(Stepping::default().is_off());
    }
}
