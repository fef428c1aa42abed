//! Every flag of every subcommand, walked from clap's command tree (`sim::cli::command`),
//! through the built binary: once with each valid value and once with each invalid one. No
//! run may panic (exit 101, "panicked"), hang or answer a valid value with a usage error about
//! the value. A clap field read with a type other than its parser's panics only when the flag
//! is given, so this is what covers a new flag the day it is added: a flag that takes a value
//! and has no entry in [`VALID`] (nor possible values of its own) fails the test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A run longer than this is a hang. Every base command below finishes in well under a second
/// except `trace gen --fit-to` (about 4 s of CPU in a debug build), which on a loaded 2-core
/// machine has taken over 60 s of wall time: the bound leaves room for that.
const HANG: Duration = Duration::from_secs(180);

/// The tiny trace every command replays: granite geometry, 4 tokens (2.5 KB).
const TRACE: &str = "{root}/sim/tests/fixtures/golden/inputs/granite-fit-4tok.bin";
/// A stored measurement set, for `sim calibrate --from-measurements` (measures nothing).
const MEASUREMENTS: &str = "{root}/validate/tests/fixtures/h200-linux-p8.measurements.json";
/// A stored granite LRU replay, for `sim validate --measured` (replays nothing).
const REPLAY: &str = "{root}/validate/data/h200-linux-p14-validation/paired/gl.json";

/// The command line each leaf subcommand is tested from: a run that succeeds (or, for the
/// commands that need a GPU, one that re-prices stored measurements instead), in well under a
/// second. `{tmp}` is a fresh directory per run, the working directory of the run (so that a
/// value taken for a path writes nothing elsewhere); `{root}` the repository; `{csv}`, `{cmp}`
/// inputs made once.
const BASE: &[(&str, &[&str])] = &[
    ("run", &["--trace", TRACE]),
    ("sweep", &["--trace", TRACE, "--policies", "e1"]),
    (
        "trace import",
        &["--format", "csv", "{csv}", "--out", "{tmp}/imp"],
    ),
    (
        "trace export",
        &["--format", "csv", TRACE, "--out", "{tmp}/e.csv"],
    ),
    ("trace stats", &[TRACE]),
    (
        "trace gen",
        &[
            "--out",
            "{tmp}/g.bin",
            "--layers",
            "2",
            "--experts",
            "8",
            "--top-k",
            "2",
            "--skew",
            "1",
            "--locality",
            "0.3",
            "--tokens",
            "4",
        ],
    ),
    ("profile list", &[]),
    ("profile show", &["h200-linux"]),
    (
        "profile union-curve",
        &["--hw", "h200-linux", "--slots", "8"],
    ),
    ("profile check-churn", &[]),
    (
        "calibrate",
        &["--from-measurements", MEASUREMENTS, "--out", "{tmp}/p.json"],
    ),
    (
        "validate",
        &[
            "--trace",
            "{root}/traces/data/granite/prose.bin",
            "--expert-mib",
            "16",
            "--steps",
            "12",
            "--policy",
            "e1,e4,region:256",
            "--evict",
            "lru",
            "--budget",
            "50%",
            "--hw",
            "h200-linux",
            "--measured",
            REPLAY,
        ],
    ),
    (
        "compare",
        &["--trace", TRACE, "--out", "{tmp}/cmp", "--policies", "e1"],
    ),
    ("plan", &["--trace", TRACE, "--hw", "h200-linux"]),
    ("curve", &["--trace", TRACE]),
    ("report", &["{cmp}", "--out", "{tmp}/rep"]),
];

/// Valid values of the flags that take one, keyed by `--flag` or, where subcommands read the
/// flag differently, by `subcommand --flag` (looked up first). A flag with possible values of
/// its own (a value enum) is run with each of them unless listed here.
const VALID: &[(&str, &[&str])] = &[
    ("--acceptance", &["0.5"]),
    ("--accepted", &["1"]),
    ("--admission-cap", &["0.9"]),
    ("--allocate", &["25%", "30"]),
    ("--archetype-share", &["0.5"]),
    ("--archetypes", &["2"]),
    ("--batch", &["2"]),
    ("--blocks", &["1"]),
    ("--budget", &["25%", "3", "12MiB"]),
    // `--only host` measures this machine's CPU, DRAM and SSD for minutes
    ("calibrate --only", &["kernels"]),
    ("--context", &["16"]),
    ("--cpu-experts", &["none", "all", "layers:2"]),
    ("--cpu-threads", &["1"]),
    ("--cross-layer", &["0.3"]),
    ("--date", &["2024-05-01"]),
    ("--dense-layers", &["1"]),
    ("--device", &["0"]),
    ("--distinct", &["1,2"]),
    ("--dram", &["50%"]),
    ("--dram-mode", &["pinned", "page-cache"]),
    ("trace export --dtype", &["bf16"]),
    ("compare --dtype", &["int4", "int4,bf16"]),
    ("--e", &["1,2"]),
    ("--evict", &["lru", "belady"]),
    ("--expert-ffn", &["512"]),
    ("--expert-matrices", &["2"]),
    ("--expert-mib", &["3"]),
    ("--expert-us", &["10"]),
    ("--experts", &["8"]),
    ("--fit-to", &[TRACE]),
    ("--from-measurements", &[MEASUREMENTS]),
    ("--granule-mib", &["2"]),
    ("--hidden-size", &["1024"]),
    ("--hw", &["h200-linux"]),
    ("--hw-host", &["dev-box-host"]),
    ("--host-ram", &["32"]),
    (
        "--engine",
        &["llama.cpp", "ktransformers", "vllm", "sglang"],
    ),
    ("--intervals", &["2"]),
    ("--kernels-from", &[MEASUREMENTS]),
    ("--kv-bytes-per-token", &["1024"]),
    ("--layers", &["2"]),
    ("--licence", &["CC-BY-4.0"]),
    ("--link-gbps", &["25"]),
    (
        "--live-set-from",
        &["{root}/validate/data/h100-linux-2026-12-07/live-set/l1.json"],
    ),
    ("--live-set-levels", &["0,1024,90%"]),
    ("--locality", &["0.3"]),
    ("--map", &["sequence=sequence,experts=experts"]),
    ("--max-batched-tokens", &["4"]),
    ("--max-seqs", &["2"]),
    ("--measured", &[REPLAY]),
    ("--merge", &["{cmp}"]),
    ("--model-name", &["tiny"]),
    (
        "--model-config",
        &["{root}/traces/data/configs/qwen3-30b-a3b.json"],
    ),
    ("--moe-layers", &["24"]),
    ("--name", &["flag-tree"]),
    ("--nonexpert-mib", &["100"]),
    ("--nonexpert-us", &["5"]),
    ("--num-experts", &["32"]),
    ("--num-layers", &["30"]),
    ("--object-size", &["4096"]),
    ("--orders", &["index,hot"]),
    ("--out", &["{tmp}/out"]),
    ("--policies", &["e1,e2"]),
    ("--policy", &["e1"]),
    ("--prefill-chunk", &["2"]),
    ("--prefetch-buffer", &["4"]),
    ("--prefetch-cap", &["4"]),
    ("--prefetch-min-score", &["0.5", "auto"]),
    ("--preset", &["granite-3.0-1b-a400m"]),
    ("--preset-tokens", &["4"]),
    ("--profile-trace", &[TRACE]),
    ("--prompt-lengths", &["{lengths}"]),
    ("--prompt-tokens", &["2"]),
    ("--points", &["25%", "3"]),
    ("--queue", &["4"]),
    ("--repeat", &["1"]),
    ("--reprice", &["{tmp}"]),
    ("--revision", &["abc123"]),
    ("--seed", &["3"]),
    ("--sequences", &["2"]),
    // a run spec (sim/src/cmd/run_spec.rs), as `sim run --dump-spec` prints one
    ("run --spec", &["{root}/sim/tests/fixtures/run-spec.json"]),
    ("--shard", &["0/2"]),
    ("--shared-experts", &["1"]),
    ("--shared-expert-ffn", &["5632"]),
    ("--skew", &["1.0"]),
    ("--slots", &["8"]),
    ("--source", &["hand-made"]),
    ("--ssd-path", &["{tmp}"]),
    ("--steps", &["4"]),
    ("--target-tokens-per-s", &["10"]),
    ("--threads", &["1"]),
    ("--timeline", &["{tmp}/timeline.json"]),
    ("--tokens", &["4"]),
    ("--top-k", &["2"]),
    ("--trace", &[TRACE]),
    ("--unrecorded-layers", &["24-25", "30"]),
    ("--verify", &["1"]),
    ("--warm-up", &["auto", "2"]),
    ("--where", &["phase=decode"]),
    ("--window", &["1"]),
];

/// Flags a flag under test needs beside it (clap's `requires`), with their values; left out
/// when they are the flag under test.
const COMPANIONS: &[(&str, &[&str])] = &[
    ("--target-tokens-per-s", &["--link-gbps", "25"]),
    ("--link-gbps", &["--target-tokens-per-s", "10"]),
    ("--archetypes", &["--archetype-share", "0.5"]),
    ("--archetype-share", &["--archetypes", "2"]),
    ("--shared-expert-ffn", &["--shared-experts", "1"]),
];

/// Values no flag of `sim` accepts as what it means (strings accept them and go on).
const INVALID: [&str; 3] = ["-1", "not-a-value", ""];

/// One run: the subcommand path, its flag and the value given (`None`: a switch).
struct Case {
    path: String,
    flag: String,
    value: Option<String>,
    valid: bool,
}

/// Every leaf subcommand of `c` with its path, clap's own `help` subcommands left out.
fn leaves<'a>(c: &'a clap::Command, path: &str, out: &mut Vec<(String, &'a clap::Command)>) {
    let subs: Vec<_> = c
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
        .collect();
    if subs.is_empty() {
        out.push((path.trim().to_string(), c));
    }
    for s in subs {
        leaves(s, &format!("{path} {}", s.get_name()), out);
    }
}

/// The valid values of a flag: the table's, else its possible values; an error asking for a
/// table entry when it has neither.
fn valid_values(path: &str, flag: &str, arg: &clap::Arg) -> Result<Vec<String>, String> {
    let table: BTreeMap<&str, &[&str]> = VALID.iter().copied().collect();
    if let Some(v) = table
        .get(format!("{path} {flag}").as_str())
        .or(table.get(flag))
    {
        return Ok(v.iter().map(|s| s.to_string()).collect());
    }
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| p.get_name().to_string())
        .collect();
    if possible.is_empty() {
        return Err(format!(
            "`sim {path} {flag}` takes a value but has no valid one in VALID of \
             sim/tests/cli/flag_tree.rs: add an entry (\"{flag}\" or \"{path} {flag}\") so \
             that this test runs it"
        ));
    }
    Ok(possible)
}

/// Every case of the tree, or the flags missing from [`VALID`].
fn cases() -> Result<Vec<Case>, Vec<String>> {
    let mut root = sim::cli::command();
    root.build();
    let mut subs = Vec::new();
    leaves(&root, "", &mut subs);
    let (mut out, mut missing) = (Vec::new(), Vec::new());
    for (path, c) in subs {
        assert!(
            BASE.iter().any(|(p, _)| *p == path),
            "`sim {path}` has no base command line in BASE of sim/tests/cli/flag_tree.rs: add one"
        );
        for arg in c.get_arguments().filter(|a| !a.is_positional()) {
            let Some(long) = arg.get_long() else { continue };
            let flag = format!("--{long}");
            let case = |value: Option<String>, valid| Case {
                path: path.clone(),
                flag: flag.clone(),
                value,
                valid,
            };
            match arg.get_action() {
                clap::ArgAction::Help
                | clap::ArgAction::HelpShort
                | clap::ArgAction::HelpLong
                | clap::ArgAction::Version => continue,
                a if !a.takes_values() => {
                    out.push(case(None, true));
                    // a switch given a value is a usage error, not a panic
                    out.push(case(Some("1".into()), false));
                    continue;
                }
                _ => {}
            }
            match valid_values(&path, &flag, arg) {
                Ok(values) => out.extend(values.into_iter().map(|v| case(Some(v), true))),
                Err(why) => missing.push(why),
            }
            out.extend(INVALID.iter().map(|v| case(Some(v.to_string()), false)));
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    }
}

/// The inputs made once: a CSV export of [`TRACE`], a `sim compare` report directory and a
/// prompt-lengths file.
struct Inputs {
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl Inputs {
    fn make(root: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let inputs = Inputs {
            dir,
            root: root.to_path_buf(),
        };
        let d = inputs.dir.path();
        std::fs::write(d.join("lengths.json"), r#"{"english_prose": 2}"#).unwrap();
        for args in [
            vec![
                "trace", "export", "--format", "csv", TRACE, "--phase", "all",
            ],
            vec!["compare", "--trace", TRACE, "--policies", "e1"],
        ] {
            let out = if args[0] == "trace" { "t.csv" } else { "cmp" };
            let args: Vec<String> = args.iter().map(|a| inputs.fill(a, d)).collect();
            let o = Command::new(env!("CARGO_BIN_EXE_sim"))
                .args(&args)
                .arg("--out")
                .arg(d.join(out))
                .current_dir(root)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        inputs
    }

    fn fill(&self, s: &str, tmp: &Path) -> String {
        let d = self.dir.path();
        s.replace("{tmp}", &tmp.display().to_string())
            .replace("{root}", &self.root.display().to_string())
            .replace("{csv}", &d.join("t.csv").display().to_string())
            .replace("{cmp}", &d.join("cmp").display().to_string())
            .replace("{lengths}", &d.join("lengths.json").display().to_string())
    }
}

/// The argument list of a case: its subcommand path, the base line without the flag under
/// test (and its value), then the flag as `--flag=value`.
fn argv(case: &Case, inputs: &Inputs, tmp: &Path) -> Vec<String> {
    let base = BASE.iter().find(|(p, _)| *p == case.path).unwrap().1;
    let mut args: Vec<String> = case.path.split(' ').map(String::from).collect();
    let mut i = 0;
    while i < base.len() {
        if base[i] == case.flag {
            i += 2; // every base flag takes a value
            continue;
        }
        args.push(inputs.fill(base[i], tmp));
        i += 1;
    }
    if let Some((_, more)) = COMPANIONS.iter().find(|(f, _)| *f == case.flag) {
        args.extend(more.iter().map(|a| a.to_string()));
    }
    args.push(match &case.value {
        None => case.flag.clone(),
        Some(v) => format!("{}={}", case.flag, inputs.fill(v, tmp)),
    });
    args
}

/// Run one case: its exit status, or what was wrong with it.
fn check(case: &Case, inputs: &Inputs) -> Result<i32, String> {
    let tmp = tempfile::tempdir().unwrap();
    let args = argv(case, inputs, tmp.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(&args)
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("sim {}: ran over {HANG:?}", args.join(" ")));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let line = format!("sim {} (exit {:?})", args.join(" "), status.code());
    if status.code() == Some(101) || err.contains("panicked") {
        return Err(format!("{line} panicked:\n{err}"));
    }
    let Some(code) = status.code() else {
        return Err(format!("{line} was killed by a signal:\n{err}"));
    };
    // A valid value may be refused with the base (a conflict, a flag another format reads),
    // but clap may refuse it only as a conflict with the base, never as a value it cannot
    // parse or a line missing a required flag.
    if case.valid && code == 2 && !err.contains("cannot be used with") {
        return Err(format!(
            "{line}: VALID's value or BASE's line is not valid:\n{err}"
        ));
    }
    Ok(code)
}

#[test]
fn every_flag_of_every_subcommand_runs_without_a_panic() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cases = match cases() {
        Ok(c) => c,
        Err(missing) => panic!("{}", missing.join("\n")),
    };
    let inputs = Inputs::make(&root);
    let next = AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let exits = std::sync::Mutex::new(BTreeMap::<(bool, i32), usize>::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                match check(case, &inputs) {
                    Ok(code) => *exits.lock().unwrap().entry((case.valid, code)).or_default() += 1,
                    Err(why) => failures.lock().unwrap().push(why),
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    // exit statuses by valid / invalid value, for the record (`--nocapture` shows them)
    println!(
        "flag tree: {} runs, exits {:?}",
        cases.len(),
        exits.into_inner().unwrap()
    );
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    // The walk reached the flags this test was written for (a sanity check that it walks).
    let has = |p: &str, f: &str| cases.iter().any(|c| c.path == p && c.flag == f);
    assert!(has("trace import", "--unrecorded-layers") && has("run", "--budget"));
    assert!(has("trace import", "--model-config"));
}
