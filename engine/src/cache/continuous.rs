//! A continuous-batching scheduler (`--batching continuous --max-seqs N
//! --max-batched-tokens T`) for traces that have requests but no recorded passes: it forms
//! the forward passes an engine would, from the sequences' token counts alone, as vLLM's V1
//! scheduler does with chunked prefill (`vllm/v1/core/sched/scheduler.py`, `Scheduler.schedule`):
//!
//! - every pass has a budget of T tokens; the running requests are served first, in the order
//!   they were admitted: one that is still in its prompt takes min(prompt left, budget) prompt
//!   tokens (chunked prefill), one past it takes its next decode token;
//! - then, while fewer than N requests run and budget is left, the next waiting request (in
//!   sequence order: the trace has no arrival times, so all arrive at once) is admitted and
//!   takes min(its prompt, budget) prompt tokens (a request without a prompt, its first token);
//! - a request leaves after the pass that took its last recorded token, so a waiting request
//!   is admitted in the pass after a running one finished.
//!
//! SGLang's scheduler forms the same mixed passes with `--enable-mixed-chunk` (its default
//! runs prefill and decode batches apart). Both engines' other limits (KV-cache blocks,
//! preemption, speculative tokens) are not modelled. The passes then replay as recorded ones
//! do ([`super::schedule::passes_as_batches`], [`crate::bounded`]).

use traces::{Pass, PassRun, SequenceInfo};

/// The scheduler's limits: requests running at once (`--max-seqs`, vLLM's `max_num_seqs`,
/// SGLang's `max_running_requests`) and tokens per pass (`--max-batched-tokens`, vLLM's
/// `max_num_batched_tokens`, SGLang's `chunked_prefill_size`). Both at least 1; no default
/// (an engine's default depends on its version and the GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Continuous {
    pub max_seqs: u32,
    pub max_batched_tokens: u32,
}

/// The passes of [`Continuous`] over a trace's sequences, one at a time (memory: two
/// counts per sequence and the running list).
#[derive(Clone, Debug)]
pub struct ContinuousPasses {
    limits: Continuous,
    prompt_left: Vec<u64>,
    decode_left: Vec<u64>,
    /// Running requests in admission order.
    running: Vec<usize>,
    /// The next waiting request.
    waiting: usize,
}

impl ContinuousPasses {
    /// The scheduler over `sequences` (their prefill and decode token counts).
    pub fn new(sequences: &[SequenceInfo], limits: Continuous) -> ContinuousPasses {
        ContinuousPasses {
            limits,
            prompt_left: sequences.iter().map(|s| s.prefill_tokens).collect(),
            decode_left: sequences.iter().map(|s| s.decode_tokens).collect(),
            running: Vec::new(),
            waiting: 0,
        }
    }

    /// Take request `s`'s next tokens within `budget` (at least 1): prompt tokens while its
    /// prompt lasts, else one decode token.
    fn take(&mut self, s: usize, budget: u64) -> u64 {
        if self.prompt_left[s] > 0 {
            let t = self.prompt_left[s].min(budget);
            self.prompt_left[s] -= t;
            t
        } else {
            self.decode_left[s] -= 1;
            1
        }
    }

    fn left(&self, s: usize) -> bool {
        self.prompt_left[s] > 0 || self.decode_left[s] > 0
    }
}

impl Iterator for ContinuousPasses {
    type Item = Pass;

    fn next(&mut self) -> Option<Pass> {
        let mut budget = u64::from(self.limits.max_batched_tokens);
        let mut runs = Vec::new();
        let push = |runs: &mut Vec<PassRun>, s: usize, t: u64| {
            runs.push(PassRun {
                sequence: s as u32,
                tokens: t as u32,
            })
        };
        for i in 0..self.running.len() {
            if budget == 0 {
                break;
            }
            let s = self.running[i];
            let t = self.take(s, budget);
            push(&mut runs, s, t);
            budget -= t;
        }
        while budget > 0
            && self.running.len() < self.limits.max_seqs as usize
            && self.waiting < self.prompt_left.len()
        {
            let s = self.waiting;
            self.waiting += 1;
            if !self.left(s) {
                continue;
            }
            let t = self.take(s, budget);
            push(&mut runs, s, t);
            budget -= t;
            self.running.push(s);
        }
        let (prompt, decode) = (&self.prompt_left, &self.decode_left);
        self.running.retain(|&s| prompt[s] > 0 || decode[s] > 0);
        (!runs.is_empty()).then_some(Pass { runs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(prefill_tokens: u64, decode_tokens: u64) -> SequenceInfo {
        SequenceInfo {
            name: String::new(),
            prefill_tokens,
            decode_tokens,
        }
    }

    #[test]
    fn prompts_are_chunked_and_requests_join_when_one_leaves() {
        // 2 running at most, 5 tokens a pass; a: prompt 7 + 2 decode, b: 2 + 3, c: 0 + 2,
        // d: nothing (skipped), e: 1 + 1. By hand:
        // pass 0: a 5 (prompt 2 left)                    -> budget 0, b waits
        // pass 1: a 2 (prompt done), b 2 (prompt done)   -> budget 1
        // pass 2: a 1, b 1                               -> 2 running, c waits
        // pass 3: a 1 (a done), b 1                      -> a leaves
        // pass 4: b 1 (b done), c 1                      -> b leaves
        // pass 5: c 1 (c done), d skipped, e 1 (prompt)
        // pass 6: e 1 (e done)
        let seqs = [seq(7, 2), seq(2, 3), seq(0, 2), seq(0, 0), seq(1, 1)];
        let limits = Continuous {
            max_seqs: 2,
            max_batched_tokens: 5,
        };
        let got: Vec<Vec<(u32, u32)>> = ContinuousPasses::new(&seqs, limits)
            .map(|p| p.runs.iter().map(|r| (r.sequence, r.tokens)).collect())
            .collect();
        let want: Vec<Vec<(u32, u32)>> = vec![
            vec![(0, 5)],
            vec![(0, 2), (1, 2)],
            vec![(0, 1), (1, 1)],
            vec![(0, 1), (1, 1)],
            vec![(1, 1), (2, 1)],
            vec![(2, 1), (4, 1)],
            vec![(4, 1)],
        ];
        assert_eq!(got, want);
        // every token taken exactly once
        let passes: Vec<Pass> = ContinuousPasses::new(&seqs, limits).collect();
        traces::model::check_passes(&passes, &seqs).unwrap();
    }
}
