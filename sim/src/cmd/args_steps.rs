//! Options of several tokens per step, shared by `sim run`, `sim sweep` and `sim compare`:
//! verified drafts (`--verify`, `--acceptance`, `--accepted`) and prompt chunks
//! (`--prefill-chunk`). See `sim::verify`.

use anyhow::{bail, Result};
use clap::Args;
use sim::verify::{Acceptance, Stepping, SteppingError};
use traces::PhaseSel;

/// How each step takes tokens. With none of these flags: one token of one sequence per step.
#[derive(Args, Clone, Debug, Default)]
pub struct StepArgs {
    /// Drafted tokens verified per decode step (speculative decoding, multi-token prediction):
    /// each step reads the union of the experts of the next K + 1 tokens of the trace and
    /// advances by the accepted drafts + 1. 0: one token per step. Needs --acceptance or
    /// --accepted. With --hw the run is also timed at K = 0 (speedup) and, for the break-even
    /// acceptance, at up to 9 more acceptances. `sim sweep` and `sim compare` take a
    /// comma-separated list (an axis).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "K",
        help_heading = "Steps",
        allow_negative_numbers = true
    )]
    pub verify: Vec<u32>,

    /// Probability (0 to 1) that a draft is accepted, independent per position (the first rejection
    /// ends the step), drawn with PCG from --seed; expected tokens per step
    /// (1 - P^(K+1)) / (1 - P). `sim sweep` and `sim compare` take a list (an axis).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "P",
        help_heading = "Steps",
        conflicts_with = "accepted",
        allow_negative_numbers = true
    )]
    pub acceptance: Vec<f64>,

    /// Every verify step accepts exactly N drafts (0 to K): a deterministic check, N + 1
    /// tokens per step.
    #[arg(
        long,
        value_name = "N",
        help_heading = "Steps",
        allow_negative_numbers = true
    )]
    pub accepted: Option<u32>,

    /// Process the prompt in chunks of C tokens, each one step reading the union of its
    /// tokens' experts, before decoding (with --phase all; the `steps` block then shows the
    /// decode page-ins that follow).
    #[arg(
        long,
        value_name = "C",
        help_heading = "Steps",
        allow_negative_numbers = true
    )]
    pub prefill_chunk: Option<u32>,
}

impl StepArgs {
    /// Every stepping of the grid: each K of `--verify` with each P of `--acceptance` (or the
    /// `--accepted` count), K = 0 once (it verifies nothing); one off stepping without the
    /// flags. Each is checked against `phase`; `seed` drives the acceptance draws.
    pub fn points(&self, phase: PhaseSel, seed: u64) -> Result<Vec<Stepping>> {
        let ks = if self.verify.is_empty() {
            vec![0]
        } else {
            self.verify.clone()
        };
        let drafting = ks.iter().any(|&k| k > 0);
        let accepts: Vec<Acceptance> = match (self.accepted, self.acceptance.is_empty()) {
            (Some(n), _) => vec![Acceptance::Fixed(n)],
            (None, false) => self
                .acceptance
                .iter()
                .map(|&p| Acceptance::Probability(p))
                .collect(),
            (None, true) if drafting => {
                bail!("--verify K drafts tokens: give --acceptance P (e.g. 0.7) or --accepted N (a fixed count per step)")
            }
            (None, true) => vec![Acceptance::Fixed(0)],
        };
        if !drafting && (self.accepted.is_some() || !self.acceptance.is_empty()) {
            bail!("--acceptance and --accepted say how many drafts a step accepts: add --verify K (K >= 1)");
        }
        if let Some(&p) = self.acceptance.iter().find(|p| !(0.0..=1.0).contains(*p)) {
            bail!(SteppingError::Probability(p));
        }
        let mut out: Vec<Stepping> = Vec::new();
        for &verify in &ks {
            for &acceptance in &accepts {
                let s = Stepping {
                    verify,
                    // K = 0 verifies nothing: one point, whatever the acceptance
                    acceptance: if verify == 0 {
                        Acceptance::Fixed(0)
                    } else {
                        acceptance
                    },
                    prefill_chunk: self.prefill_chunk,
                    seed,
                };
                s.check(phase)?;
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        Ok(out)
    }

    /// The one stepping of `sim run`; errors when `--verify` or `--acceptance` lists more
    /// than one value (an axis of sweep and compare).
    pub fn for_run(&self, phase: PhaseSel, seed: u64) -> Result<Stepping> {
        if self.verify.len() > 1 || self.acceptance.len() > 1 {
            bail!("--verify and --acceptance take one value in `sim run`; give lists to `sim sweep` or `sim compare`, which run every K at every P");
        }
        Ok(self.points(phase, seed)?[0])
    }
}
