//! The simulator's command line, driven in process: a Python dict of options becomes the
//! flags of a `sim` subcommand (`{"evict": "lru", "budget": "8GiB"}` is `--evict lru --budget
//! 8GiB`), parsed by the same clap tree as the binary and dispatched to the same command
//! functions, so the options, their checks and their messages are the CLI's own.

use anyhow::{anyhow, bail, Result};
use clap::FromArgMatches;
use serde_json::Value;
use sim::cli::{command, Cli, Command};
use sim::cmd;

/// Turn a JSON object of options into flags: each key `a_b` is `--a-b`; `true` is the bare
/// flag, `false` and `null` leave it out, a list repeats the flag once per element, a
/// string or number is its value. `reserved` names the keys the caller sets itself (the
/// output file, `--json`, the trace): giving one is an error saying which argument to use.
pub fn flags(spec: &Value, what: &str, reserved: &[(&str, &str)]) -> Result<Vec<String>> {
    let Value::Object(map) = spec else {
        bail!(
            "the spec must be a dict of `{what}` options (e.g. {{\"policy\": \"e2\"}}), not {spec}"
        );
    };
    let mut out = Vec::new();
    for (key, value) in map {
        let key = key.replace('_', "-");
        if let Some((_, instead)) = reserved.iter().find(|(k, _)| *k == key) {
            bail!("the spec key {key:?} is set by this function: {instead}");
        }
        let flag = format!("--{key}");
        match value {
            Value::Null | Value::Bool(false) => {}
            Value::Bool(true) => out.push(flag),
            Value::Array(items) => {
                for item in items {
                    out.push(flag.clone());
                    out.push(scalar(&key, item)?);
                }
            }
            v => {
                out.push(flag);
                out.push(scalar(&key, v)?);
            }
        }
    }
    Ok(out)
}

/// The text of one option value: a string as is, a number as JSON writes it.
fn scalar(key: &str, v: &Value) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => {
            bail!("the value of {key:?} must be a string, a number or a list of them, not {other}")
        }
    }
}

/// Parse `args` (without the program name) as a `sim` command line and run it. A line that
/// does not parse is an error with clap's message (which flag, which value, what is
/// accepted); a command that fails gives the message the binary prints after `error:`.
pub fn invoke(args: &[String]) -> Result<()> {
    let argv = std::iter::once("sim".to_string()).chain(args.iter().cloned());
    let matches = command()
        .try_get_matches_from(argv)
        .map_err(|e| anyhow!("{}", e.render().to_string().trim_end()))?;
    let cli =
        Cli::from_arg_matches(&matches).map_err(|e| anyhow!("{}", e.to_string().trim_end()))?;
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Sweep(a) => cmd::sweep::run(a),
        Command::Trace(c) => cmd::trace::run(c),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        _ => bail!("this command is not available from Python"),
    };
    result.map_err(|e| anyhow!("{}", cmd::errors::message(&e)))
}
