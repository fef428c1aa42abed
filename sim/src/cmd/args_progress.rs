//! The `--progress` / `--no-progress` flags of `sim run`, `sim sweep` and `sim compare`, and
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
    /// Draw a progress bar on stderr for runs longer than a second. Default: on when stderr
    /// is a terminal.
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
            format!("{{prefix}} [{{bar:40}}] {{human_pos}}/{{human_len}} {unit}, {{elapsed}} elapsed, ETA {{eta}}");
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
        }
    }
}

/// A progress bar that appears on stderr after [`SHOW_AFTER`]; cheap to advance from several
/// threads.
pub struct Progress {
    bar: ProgressBar,
    shown: std::sync::atomic::AtomicBool,
    enabled: bool,
}

impl Progress {
    /// A bar that never draws.
    pub fn hidden() -> Progress {
        Progress {
            bar: ProgressBar::hidden(),
            shown: std::sync::atomic::AtomicBool::new(false),
            enabled: false,
        }
    }

    /// Advance by `n` steps; the first advance after [`SHOW_AFTER`] shows the bar.
    pub fn inc(&self, n: u64) {
        use std::sync::atomic::Ordering;
        self.bar.inc(n);
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
