//! The `--progress` / `--no-progress` flags of `sim run`, `sim sweep`, `sim compare`, `sim
//! trace gen` and `sim trace stats`, and
//! the progress bar they switch: indicatif, drawn on stderr, shown only once a run has taken
//! more than [`SHOW_AFTER`] (short runs print nothing).

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// How long a run goes before its bar appears: a run shorter than this leaves stderr as it
/// was (the "runs that take more than a second").
pub const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Whether to draw a progress bar on stderr.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct ProgressArgs {
    /// Draw a progress bar on stderr for runs longer than a second (default: on when stderr
    /// is a terminal). The bar redraws one line, so a stderr that is not a terminal (a file,
    /// a pipe) shows none even with this flag.
    #[arg(long, overrides_with = "no_progress")]
    pub progress: bool,

    /// No progress bar on stderr (`--quiet` is an alias).
    #[arg(long, visible_alias = "quiet", overrides_with = "progress")]
    pub no_progress: bool,
}

impl ProgressArgs {
    /// True when the bar is to be drawn: `--progress`, else not `--no-progress` and stderr
    /// is a terminal.
    pub fn enabled(&self) -> bool {
        self.progress || (!self.no_progress && std::io::stderr().is_terminal())
    }

    /// A bar of `len` steps counted in `unit` (e.g. "runs", "tokens"), labelled `prefix`;
    /// hidden when not [`ProgressArgs::enabled`].
    pub fn bar(&self, prefix: &'static str, len: u64, unit: &str) -> Progress {
        if !self.enabled() {
            return Progress::hidden();
        }
        let template =
            format!("{{prefix}} [{{wide_bar}}] {{human_pos}}/{{human_len}} {unit} ({{elapsed}}, ETA {{eta}})");
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden())
            .with_style(
                ProgressStyle::with_template(&template)
                    .expect("a valid template")
                    .progress_chars("=> "),
            )
            .with_prefix(prefix);
        Progress {
            bar,
            shown: std::sync::atomic::AtomicBool::new(false),
            enabled: true,
            grow_by: 0,
        }
    }
}

/// The tokens of `phases` that the header of the trace file `path` declares: a bar's length
/// for one pass over the file (0 when the header cannot be read; the pass itself words that
/// error).
pub fn header_tokens(path: &std::path::Path, phases: traces::PhaseSel) -> u64 {
    traces::read_header(path).map_or(0, |h| h.tokens(phases))
}

/// A progress bar that appears on stderr after [`SHOW_AFTER`]; cheap to advance from several
/// threads.
pub struct Progress {
    bar: ProgressBar,
    shown: std::sync::atomic::AtomicBool,
    enabled: bool,
    /// Steps added to the length whenever the position passes it (0: never): one more pass
    /// of a run whose passes are not known up front (a tokens/s target's or an admission
    /// cap's search replays the file once per budget or batch size tried).
    grow_by: u64,
}

impl Progress {
    /// A bar that never draws.
    pub fn hidden() -> Progress {
        Progress {
            bar: ProgressBar::hidden(),
            shown: std::sync::atomic::AtomicBool::new(false),
            enabled: false,
            grow_by: 0,
        }
    }

    /// The same bar, whose length grows by `steps` each time its position passes it, so a
    /// run that makes more passes than it announced never sits at a full bar.
    pub fn growing_by(mut self, steps: u64) -> Progress {
        self.grow_by = steps;
        self
    }

    /// Advance by `n` steps; the first advance after [`SHOW_AFTER`] shows the bar.
    pub fn inc(&self, n: u64) {
        use std::sync::atomic::Ordering;
        self.bar.inc(n);
        if self.grow_by > 0 && self.bar.length().is_some_and(|l| self.bar.position() > l) {
            self.bar.inc_length(self.grow_by);
        }
        if self.enabled
            && !self.shown.load(Ordering::Relaxed)
            && self.bar.elapsed() >= SHOW_AFTER
            && !self.shown.swap(true, Ordering::Relaxed)
        {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// Remove the bar from stderr.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use traces::{ModelSpec, PhaseSel, SequenceData, TokenBlock, Trace};

    #[test]
    fn a_headers_tokens_are_counted_per_phase() {
        // one layer, top-1: a token is one id; sequences of (2, 3) and (0, 4) tokens
        let block = |n: usize| TokenBlock {
            ids: vec![0; n],
            weights: None,
        };
        let sequences = [(2, 3), (0, 4)]
            .into_iter()
            .map(|(p, d)| SequenceData {
                prefill: block(p),
                decode: block(d),
            })
            .collect();
        let model = ModelSpec::uniform("t", 1, 4, 1);
        let trace = Trace::from_blocks(model, Default::default(), sequences).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        traces::write_file(&path, &trace).unwrap();
        assert_eq!(header_tokens(&path, PhaseSel::Decode), 7);
        assert_eq!(header_tokens(&path, PhaseSel::Prefill), 2);
        assert_eq!(header_tokens(&path, PhaseSel::All), 9);
        assert_eq!(
            header_tokens(&dir.path().join("none.bin"), PhaseSel::All),
            0
        );
    }

    #[test]
    fn a_growing_bar_adds_a_pass_each_time_its_position_passes_the_length() {
        let args = ProgressArgs {
            progress: true,
            no_progress: false,
        };
        let bar = args.bar("t", 20, "tokens").growing_by(10);
        bar.inc(20); // two announced passes done: at the length, not past it
        assert_eq!(bar.bar.length(), Some(20));
        bar.inc(5); // a third pass begins
        assert_eq!(bar.bar.length(), Some(30));
        bar.inc(10); // 35 > 30: a fourth
        assert_eq!((bar.bar.position(), bar.bar.length()), (35, Some(40)));
        let fixed = args.bar("t", 20, "tokens");
        fixed.inc(25);
        assert_eq!(fixed.bar.length(), Some(20));
    }
}
