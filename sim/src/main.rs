//! `sim`: replay MoE router traces through a simulator of expert paging mechanisms and
//! retention policies. Each subcommand lives in its own module under `cmd/`.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod cmd;

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
struct Cli {
    #[command(subcommand)]
    command: Command,
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
enum Command {
    /// Run one mechanism (and optionally a retention policy and a hardware profile) on a trace.
    Run(cmd::run::RunArgs),
    /// Run many mechanisms / policies / budgets on a trace and print one row per combination.
    Sweep(cmd::sweep::SweepArgs),
    /// Trace tools: import, export, statistics, synthetic generation.
    #[command(subcommand)]
    Trace(cmd::trace::TraceCommand),
    /// Hardware profiles: list the shipped ones, show one, its kernel union curve, check a churn table.
    #[command(subcommand)]
    Profile(cmd::profile::ProfileCommand),
    /// Measure the cost constants on the local NVIDIA GPU and write a hardware profile.
    Calibrate(cmd::calibrate::CalibrateArgs),
    /// Replay a trace for real on the local GPU and compare with the simulator's prediction.
    Validate(cmd::validate::ValidateArgs),
    /// Page-ins of LRU and Belady/MIN at every budget from one unit to the bank, exact, in
    /// one pass over the trace (stack distances): a table at chosen budgets and the knee.
    Curve(cmd::curve::CurveArgs),
    /// Compare mechanisms and policies on traces and write a report (Markdown, HTML, CSV, JSON, SVG).
    Compare(cmd::compare::CompareArgs),
    /// Find, for each mechanism and retention policy, the largest expert budget that fits on
    /// the GPU with the non-expert weights and KV caches, ranked by tokens/s.
    Plan(cmd::plan::PlanArgs),
    /// Regenerate a report from a results.json, or merge sharded results.
    Report(cmd::report::ReportArgs),
}

/// Flags of argument groups that several commands share but only `sim run` acts on (a
/// tokens/s target's budget search, the resource timeline of one run); the others refuse them.
const RUN_ONLY_FLAGS: [&str; 3] = ["target_tokens_per_s", "link_gbps", "timeline"];

/// The command line as derived from [`Cli`], with [`RUN_ONLY_FLAGS`] hidden from the help of
/// every command but `sim run`, so no help lists a flag its command refuses.
fn command() -> clap::Command {
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

fn main() -> std::process::ExitCode {
    // Interrupted runs remove their hidden temporary outputs. Installing fails only when a
    // handler is already installed, which nothing else in this binary does.
    let _ = traces::cleanup::remove_on_signals();
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Sweep(a) => cmd::sweep::run(a),
        Command::Trace(c) => cmd::trace::run(c),
        Command::Profile(c) => cmd::profile::run(c),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Curve(a) => cmd::curve::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::Report(a) => cmd::report::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // the reader of stdout left (`sim ... | head`): stop quietly, as ripgrep does
        Err(e) if cmd::errors::is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", cmd::errors::message(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
