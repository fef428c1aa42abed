//! `sim trace stats`: statistics of a trace, streamed token by token from the file.

use super::args_input::{emit, emit_json};
use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use traces::stats::{StatsAccumulator, TraceStats};
use traces::{PhaseSel, TraceReader};

/// Which tokens `sim trace stats` counts.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum PhaseArg {
    /// Generated tokens only (one decode step per token).
    #[default]
    Decode,
    /// Prompt tokens only.
    Prefill,
    /// Prompt then generated tokens of each sequence.
    All,
}

impl From<PhaseArg> for PhaseSel {
    fn from(p: PhaseArg) -> PhaseSel {
        match p {
            PhaseArg::Decode => PhaseSel::Decode,
            PhaseArg::Prefill => PhaseSel::Prefill,
            PhaseArg::All => PhaseSel::All,
        }
    }
}

/// Arguments of `sim trace stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Trace file (.bin) to analyse; read in one streaming pass, so any size works.
    pub file: PathBuf,
    /// Print one JSON object (keys documented in traces::stats) instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Tokens to count: decode (generated tokens), prefill (prompt tokens) or all.
    #[arg(long, value_enum, default_value = "decode")]
    pub phase: PhaseArg,
    #[command(flatten)]
    pub progress: super::args_progress::ProgressArgs,
}

/// Stream `path` through a [`StatsAccumulator`]: memory stays bounded whatever the trace size.
/// `tick(1)` follows each token of `phases` counted.
pub fn stats_of_file(
    path: &std::path::Path,
    phases: PhaseSel,
    tick: &dyn Fn(u64),
) -> anyhow::Result<TraceStats> {
    sim::runner::require_trace_file(path)?;
    let mut reader = TraceReader::open(path)?;
    let mut acc = StatsAccumulator::checked(reader.header(), phases)
        .with_context(|| format!("{}", path.display()))?;
    while let Some(tok) = reader.next_token()? {
        acc.push_token(tok.pos.sequence, tok.pos.phase, tok.ids)
            .with_context(|| format!("{}", path.display()))?;
        if phases.includes(tok.pos.phase) {
            tick(1);
        }
    }
    acc.finish()
        .with_context(|| format!("statistics of {}", path.display()))
}

pub fn run_stats(a: StatsArgs) -> anyhow::Result<()> {
    let phases = a.phase.into();
    let tokens = super::args_progress::header_tokens(&a.file, phases);
    let bar = a.progress.bar("sim trace stats", tokens, "tokens read");
    let st = stats_of_file(&a.file, phases, &|n| bar.inc(n));
    bar.finish();
    let st = st?;
    if a.json {
        emit_json(&st)?;
    } else {
        emit(None, &st.to_text())?;
    }
    Ok(())
}
