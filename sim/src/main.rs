//! `sim`: replay MoE router traces through a simulator of expert paging mechanisms and
//! retention policies. Each subcommand lives in its own module under `cmd/`.

use clap::FromArgMatches;
use sim::cli::{command, Cli, Command};
use sim::cmd;

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
