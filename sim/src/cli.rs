//! The command line of `sim`: the [`Cli`] type derived with clap and [`command`], the tree
//! the binary parses. In the library so that tests and the `cli-values` fuzz target can walk
//! every subcommand's flags and extract them as the binary does.

use clap::{CommandFactory, Parser, Subcommand};

/// Simulate how MoE expert weights are paged into GPU memory, from recorded router traces.
///
/// Replays which experts each layer's router selected for each token through a model of the
/// paging mechanisms (per-expert VMM commits, packed chunks, committed regions, OS paging) and
/// retention policies, and reports memory held, bytes moved and time per decode step.
#[derive(Parser)]
#[command(
    name = "sim",
    version,
    propagate_version = true,
    after_help = EXIT_STATUS
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The exit statuses, shown under `sim --help`: clap's usage errors exit 2, the tool's own
/// checks 1.
const EXIT_STATUS: &str = "Exit status:
  0  success
  1  the command ran and failed: bad or corrupt input, an impossible budget, a missing profile
     constant, no GPU; the message says what was wrong and how to fix it
  2  the command line did not parse (an unknown flag, a value of the wrong type or outside
     its range); the message names the flag";

#[derive(Subcommand)]
pub enum Command {
    /// Run one mechanism (and optionally a retention policy and a hardware profile) on a trace.
    Run(crate::cmd::run::RunArgs),
    /// Run many mechanisms / policies / budgets on a trace and print one row per combination.
    Sweep(crate::cmd::sweep::SweepArgs),
    /// Trace tools: import, export, statistics, synthetic generation.
    #[command(subcommand)]
    Trace(crate::cmd::trace::TraceCommand),
    /// Hardware profiles: list the shipped ones, show one, its kernel union curve, check a churn table.
    #[command(subcommand)]
    Profile(crate::cmd::profile::ProfileCommand),
    /// Measure the cost constants on the local NVIDIA GPU and write a hardware profile.
    Calibrate(crate::cmd::calibrate::CalibrateArgs),
    /// Replay a trace for real on the local GPU and compare with the simulator's prediction.
    Validate(crate::cmd::validate::ValidateArgs),
    /// Compare mechanisms and policies on traces and write a report (Markdown, HTML, CSV, JSON, SVG).
    Compare(crate::cmd::compare::CompareArgs),
    /// Page-ins of LRU and Belady/MIN at every budget from one unit to the bank, exact, in
    /// one pass over the trace (stack distances): a table at chosen budgets and the knee.
    Curve(crate::cmd::curve::CurveArgs),
    /// Find, for each mechanism and retention policy, the expert budget with the highest
    /// tokens/s that fits on the GPU with the non-expert weights and KV caches.
    Plan(crate::cmd::plan::PlanArgs),
    /// Regenerate a report from a results.json, or merge sharded results.
    Report(crate::cmd::report::ReportArgs),
}

/// Flags of argument groups that several commands share but only `sim run` acts on (a
/// tokens/s target's budget search, the resource timeline of one run); the others refuse them.
const RUN_ONLY_FLAGS: [&str; 3] = ["target_tokens_per_s", "link_gbps", "timeline"];

/// The command line as derived from [`Cli`], with [`RUN_ONLY_FLAGS`] hidden from the help of
/// every command but `sim run`, so no help lists a flag its command refuses.
pub fn command() -> clap::Command {
    let mut cli = Cli::command();
    let others: Vec<String> = cli
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|name| name != "run")
        .collect();
    for name in others {
        cli = cli.mut_subcommand(name, |mut sub| {
            for id in RUN_ONLY_FLAGS {
                if sub.get_arguments().any(|a| a.get_id() == id) {
                    sub = sub.mut_arg(id, |a| a.hide(true));
                }
            }
            sub
        });
    }
    cli
}
