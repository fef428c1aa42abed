//! Errors a first-time user hit, through the built binary: each names what was wrong (the
//! path, the count, the unit) and leaves nothing behind.

#[path = "fresh_user_errors/import.rs"]
mod import;

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Run, expect failure without a panic, and return stderr.
fn fails(args: &[&str]) -> String {
    let (code, err) = status_of(args);
    assert!(code != Some(0), "{args:?} should fail");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn a_missing_trace_gets_the_same_message_from_run_stats_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.bin");
    let m = missing.to_str().unwrap();
    let want = format!("{m}: no such file; give the path of a trace file");
    let run = fails(&["run", "--trace", m]);
    let stats = fails(&["trace", "stats", m]);
    let out = dir.path().join("x.csv");
    let export = fails(&[
        "trace",
        "export",
        "--format",
        "csv",
        m,
        "--out",
        out.to_str().unwrap(),
    ]);
    for e in [&run, &stats, &export] {
        assert!(e.contains(&want), "{e}");
        assert!(!e.contains("os error"), "{e}");
    }
    assert!(!out.exists());
}

#[test]
fn a_missing_router_log_is_named_by_import_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("log.csv");
    let m = missing.to_str().unwrap();
    let out = dir.path().join("out");
    let e = fails(&[
        "trace",
        "import",
        "--format",
        "csv",
        "--model-name",
        "x",
        "--hidden-size",
        "2048",
        "--expert-ffn",
        "768",
        "--out",
        out.to_str().unwrap(),
        m,
    ]);
    assert!(
        e.contains(&format!(
            "{m}: no such file; give the path of the --format csv log"
        )),
        "{e}"
    );
    assert!(!e.contains("os error"), "{e}");
    assert!(!out.exists());
}

#[test]
fn a_directory_given_as_trace_is_named_as_one_by_run_stats_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let want = format!("{d}: is a directory, not a trace file");
    let out = dir.path().join("x.csv");
    let errors = [
        fails(&["run", "--trace", d]),
        fails(&["trace", "stats", d]),
        fails(&[
            "trace",
            "export",
            "--format",
            "csv",
            d,
            "--out",
            out.to_str().unwrap(),
        ]),
    ];
    for e in &errors {
        assert!(e.contains(&want), "{e}");
        assert!(!e.contains("os error"), "{e}");
        // an empty directory: a placeholder, not a file that is not there
        assert!(e.contains(&format!("(e.g. {d}/TRACE.bin)")), "{e}");
    }
    assert!(!out.exists());
    // the example is a trace file the directory holds
    for name in ["notes.txt", "b.bin", "c.bin"] {
        std::fs::write(dir.path().join(name), b"").unwrap();
    }
    let e = fails(&["trace", "stats", d]);
    assert!(e.contains(&format!("(e.g. {d}/b.bin)")), "{e}");
}

#[test]
fn e_n_above_the_expert_count_is_refused() {
    // granite-3.0-1b-a400m: 32 experts per MoE layer, so e32 is the largest packing.
    let e = fails(&["run", "--policy", "e33"]);
    assert!(
        e.contains("at most 32 experts") && e.contains("largest allowed N is 32"),
        "{e}"
    );
    let e = fails(&["sweep", "--policies", "e1,e64:index"]);
    assert!(
        e.contains("e64") && e.contains("largest allowed N is 32"),
        "{e}"
    );
}

#[test]
fn a_unit_budget_of_zero_does_not_talk_about_bytes() {
    let e = fails(&["run", "--policy", "e1", "--evict", "lru", "--budget", "0"]);
    assert!(
        e.contains("budget 0 units holds no unit; give at least one unit"),
        "{e}"
    );
    assert!(!e.contains("bytes"), "{e}");
    // A byte budget below one e1 unit says why: a 3 MiB expert commits two 2 MiB granules,
    // 4 MiB = 4194304 bytes.
    let e = fails(&[
        "run", "--policy", "e1", "--evict", "lru", "--budget", "1MiB",
    ]);
    assert!(e.contains("one unit commits 4194304 bytes"), "{e}");
}

#[test]
fn a_bad_hw_profile_file_is_named_by_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("my-h200.json");
    let mut p = profile::load("h200-linux").unwrap();
    p.set(
        profile::ConstantName::H2dBandwidth,
        profile::Constant::assumed(-1.0, "GB/s", "test"),
    );
    // Profile::save validates; write the JSON directly to get a bad file.
    std::fs::write(&path, p.to_json()).unwrap();
    let e = fails(&["run", "--policy", "e1", "--hw", path.to_str().unwrap()]);
    assert!(
        e.contains(&format!("profile file {}", path.display()))
            && e.contains("'h2d_bandwidth' has value -1"),
        "{e}"
    );
}

#[test]
fn a_failed_import_leaves_no_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rows.csv");
    std::fs::write(&input, "not,a,trace\n").unwrap();
    let out = dir.path().join("new").join("out");
    let e = fails(&[
        "trace",
        "import",
        "--format",
        "csv",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(e.contains("rows.csv"), "{e}");
    assert!(!dir.path().join("new").exists(), "{e}");
}

#[test]
fn a_bad_dram_budget_names_dram_and_a_huge_size_stays_short() {
    for (dram, why) in [
        ("0", "budget 0 units holds no unit"),
        ("200%", "budget 200% is above the bank"),
    ] {
        let e = fails(&["run", "--evict", "lru", "--budget", "25%", "--dram", dram]);
        assert!(e.contains(&format!("--dram: {why}")), "{e}");
    }
    // the VRAM budget's message is unchanged
    let e = fails(&["run", "--evict", "lru", "--budget", "0"]);
    assert!(e.starts_with("error: budget 0 units holds no unit"), "{e}");
    let e = fails(&["run", "--expert-mib", "1e300"]);
    assert!(
        e.contains("--expert-mib 1e300 is above the limit of 1 TiB"),
        "{e}"
    );
    assert!(e.len() < 300, "{e}");
}

#[test]
fn a_negative_count_names_its_flag() {
    // clap would read `-1` as an unknown flag; these flags take it as a value and refuse it
    for (flag, value) in [("--verify", "-1"), ("--seed", "-3"), ("--batch", "-2")] {
        let err = fails(&[
            "run",
            "--trace",
            "traces/data/granite/prose.bin",
            "--policy",
            "e1",
            "--evict",
            "lru",
            "--budget",
            "50%",
            flag,
            value,
        ]);
        assert!(
            err.contains(&format!("invalid value '{value}' for '{flag}")),
            "{flag}: {err}"
        );
    }
}

#[test]
fn reprice_with_a_profile_that_does_not_load_fails_once() {
    let err = fails(&[
        "validate",
        "--reprice",
        "validate/data",
        "--hw",
        "no-such.json",
    ]);
    assert_eq!(err.matches("unknown hardware profile").count(), 1, "{err}");
    assert!(err.contains("--hw no-such.json"), "{err}");
}

/// The exit status of a run, with its stderr.
fn status_of(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the sim binary runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

#[test]
fn usage_errors_exit_2_and_the_tools_own_checks_exit_1_as_help_says() {
    let help = Command::new(env!("CARGO_BIN_EXE_sim"))
        .arg("--help")
        .output()
        .expect("the sim binary runs");
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    assert!(help.contains("Exit status:"), "{help}");
    assert!(help.contains("  1  the command ran and failed"), "{help}");
    assert!(
        help.contains("  2  the command line did not parse"),
        "{help}"
    );
    // A value of the wrong type: clap refuses it before the command runs.
    let (code, err) = status_of(&["run", "--seed", "many"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--seed") && err.contains("many"), "{err}");
    // An oracleGeneral object of no bytes.
    let (code, err) = status_of(&[
        "trace",
        "export",
        "--format",
        "oracle-general",
        "traces/data/granite/prose.bin",
        "--out",
        "x.oracleGeneral",
        "--object-size",
        "0",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--object-size"), "{err}");
    // No worker threads, in both grid commands.
    for cmd in ["sweep", "compare"] {
        let (code, err) = status_of(&[cmd, "--threads", "0"]);
        assert_eq!(code, Some(2), "{cmd}: {err}");
        assert!(err.contains("--threads"), "{cmd}: {err}");
    }
    // A name outside a fixed list, as `--split` and `--semantics` refuse theirs.
    let (code, err) = status_of(&["run", "--evict", "lruu", "--budget", "25%"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown eviction policy `lruu`"), "{err}");
    // A value that parses but is impossible: the tool's own check.
    let (code, err) = status_of(&["run", "--policy", "e99"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
}

/// Flags that only `sim run` acts on are listed in its help and in no other command's, where
/// they would be refused.
#[test]
fn run_only_flags_are_in_run_help_alone() {
    let help = |cmd: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_sim"))
            .args([cmd, "--help"])
            .output()
            .expect("the sim binary runs");
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let flags = ["--target-tokens-per-s", "--link-gbps", "--timeline"];
    let run = help("run");
    assert!(flags.iter().all(|f| run.contains(f)), "{run}");
    for cmd in ["sweep", "compare", "plan"] {
        let h = help(cmd);
        assert!(h.contains("--evict") || h.contains("--hw"), "{cmd}: {h}");
        for f in flags {
            assert!(!h.contains(f), "{cmd} --help lists {f}");
        }
    }
}

/// Output piped into a reader that has gone (`sim trace stats ... | head -1`): the command
/// stops quietly with status 0, as ripgrep does, instead of panicking on the failed write.
#[test]
fn a_closed_stdout_pipe_ends_the_command_quietly() {
    for args in [
        &["trace", "stats", "traces/data/granite/prose.bin", "--json"][..],
        &["profile", "list"][..],
        &[
            "trace",
            "export",
            "--format",
            "csv",
            "traces/data/granite/prose.bin",
            "--out",
            "-",
        ][..],
        &[
            "run",
            "--trace",
            "traces/data/granite/prose.bin",
            "--policy",
            "e1",
        ][..],
    ] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let o = Command::new(env!("CARGO_BIN_EXE_sim"))
            .args(args)
            .current_dir(root())
            .stdout(writer)
            .output()
            .expect("the sim binary runs");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// `sim trace export --out -` writes the CSV a file export writes, on stdout; what cannot go
/// there is refused, and no file named `-` is left.
#[test]
fn export_to_stdout_is_the_file_export() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prose.csv");
    let export = |out: &str, extra: &[&str]| {
        let mut args = vec![
            "trace",
            "export",
            "traces/data/granite/prose.bin",
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_sim"))
            .args(&args)
            .current_dir(root())
            .output()
            .expect("the sim binary runs")
    };
    let to_file = export(file.to_str().unwrap(), &["--format", "csv"]);
    assert!(to_file.status.success());
    let to_stdout = export("-", &["--format", "csv"]);
    assert!(to_stdout.status.success());
    assert_eq!(to_stdout.stdout, std::fs::read(&file).unwrap());
    for (extra, why) in [
        (&["--format", "csv", "--json"][..], "--json"),
        (&["--format", "oracle-general"][..], "needs a file"),
    ] {
        let o = export("-", extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        assert!(err.contains(why), "{extra:?}: {err}");
    }
    assert!(!root().join("-").exists(), "a file named `-` was written");
}

/// An output given the name of an existing directory (with or without a trailing slash) is
/// refused before any work, in words that say so, and nothing is written into it; so are
/// flags that the command would otherwise ignore.
#[test]
fn a_directory_as_an_output_and_ignored_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let slash = format!("{d}/");
    for out in [&d, &slash] {
        for args in [
            &[
                "trace",
                "export",
                "--format",
                "csv",
                "traces/data/granite/prose.bin",
                "--out",
                out,
            ][..],
            &[
                "trace",
                "gen",
                "--preset",
                "deepseek-v3",
                "--tokens",
                "10",
                "--seed",
                "1",
                "--skew",
                "1",
                "--locality",
                "0.3",
                "--out",
                out,
            ][..],
            &[
                "run",
                "--trace",
                "traces/data/granite/prose.bin",
                "--policy",
                "e1",
                "--out",
                out,
            ][..],
        ] {
            let (code, err) = status_of(args);
            assert_eq!(code, Some(1), "{args:?}: {err}");
            assert!(
                err.contains("names a directory, not a file"),
                "{args:?}: {err}"
            );
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
    for (args, why) in [
        (
            &[
                "trace",
                "export",
                "--format",
                "csv",
                "traces/data/granite/prose.bin",
                "--out",
                "x.csv",
                "--object-size",
                "5",
            ][..],
            "CSV rows have none",
        ),
        (
            &[
                "sweep",
                "--trace",
                "traces/data/granite/prose.bin",
                "--evict",
                "lru",
                "--budget",
                "25%",
                "--hw",
                "h200-linux",
                "--timeline",
                "t.json",
            ][..],
            "a `sim run` option, not a `sim sweep` one",
        ),
    ] {
        let (code, err) = status_of(args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
    assert!(!root().join("x.csv").exists() && !root().join("t.json").exists());
}

/// `--out` into a directory that does not exist: every writer names the directory and the
/// output, never its hidden temporary name, and writes nothing.
#[test]
fn an_output_in_a_missing_directory_names_the_directory_not_a_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let out = |name: &str| missing.join(name).to_str().unwrap().to_string();
    let (bin, csv, sweep) = (out("g.bin"), out("x.csv"), out("s.csv"));
    let gen = [
        "trace",
        "gen",
        "--layers",
        "2",
        "--experts",
        "8",
        "--top-k",
        "2",
        "--tokens",
        "3",
        "--skew",
        "1",
        "--locality",
        "0.3",
        "--seed",
        "1",
        "--out",
        &bin,
    ];
    let export = [
        "trace",
        "export",
        "--format",
        "csv",
        "traces/data/granite/prose.bin",
        "--out",
        &csv,
    ];
    let sweep_args = [
        "sweep",
        "--trace",
        "traces/data/granite/prose.bin",
        "--out",
        &sweep,
    ];
    for args in [&gen[..], &export[..], &sweep_args[..]] {
        let e = fails(args);
        let want = format!("the directory {} does not exist", missing.display());
        assert!(e.contains(&want), "{args:?}: {e}");
        for hidden in ["at path", ".trace-", ".export-", ".out-"] {
            assert!(!e.contains(hidden), "{args:?}: {e}");
        }
    }
    assert!(!missing.exists());
}
