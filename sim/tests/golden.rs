//! Golden outputs: a corpus of `sim` commands whose stdout, stderr and written files must stay
//! byte-identical to the fixtures in `tests/fixtures/golden/`.
//!
//! The corpus was recorded at commit 225ec1c, the code before the architecture restructuring, whose
//! proof is that no output changes. Each [`Case`] is data: a name, the argument list, the files the
//! command writes (under `{OUT}`, a fresh temporary directory per case) and the expected exit
//! status. Its fixtures are `NAME.stdout`, `NAME.stderr` (only when stderr is not empty: a missing
//! one means stderr must be empty) and `NAME.FILE` for each written file (`FILE` is the file's name
//! without its directories). Commands run with the test build's `sim` binary from the workspace
//! root, so relative trace paths in the outputs are the same on every machine.
//!
//! Run-dependent text: the only one the corpus produces is the temporary directory's path (in
//! `compare`'s "wrote ... to DIR" line and `run --timeline`'s "wrote FILE" note); it is replaced
//! by `{OUT}` before comparing. The flags were chosen so that nothing else run-dependent
//! appears: no timestamps, no wall-clock time, no binary version (the traces' provenance names
//! the version that *recorded* them, which is data in the trace file), `--quiet` for compare's
//! progress bar.
//!
//! Blessing: a later change that alters an output on purpose (a new field a later issue adds)
//! rewrites the fixtures with
//!
//! ```sh
//! SIM_GOLDEN_BLESS=1 cargo test -p sim --locked --test golden
//! ```
//!
//! and the diff of `tests/fixtures/golden/` is then reviewed like code. Without it the test only
//! compares; a missing fixture, or a fixture no case produces, is a failure.
//! `SIM_GOLDEN_BIN=path/to/sim` runs the corpus with another binary (for example the release
//! build, to check that debug and release agree).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One command of the corpus.
struct Case {
    /// Fixture prefix; unique.
    name: &'static str,
    /// Arguments after `sim`; `{OUT}` stands for the case's temporary directory.
    args: &'static [&'static str],
    /// Files the command writes, relative to `{OUT}`; each is compared with `NAME.<file name>`.
    files: &'static [&'static str],
    /// Expected exit status (0, or 1 for the error cases).
    exit: i32,
}

const fn ok(name: &'static str, args: &'static [&'static str]) -> Case {
    Case {
        name,
        args,
        files: &[],
        exit: 0,
    }
}

const fn writes(
    name: &'static str,
    args: &'static [&'static str],
    files: &'static [&'static str],
) -> Case {
    Case {
        name,
        args,
        files,
        exit: 0,
    }
}

const fn fails(name: &'static str, args: &'static [&'static str]) -> Case {
    Case {
        name,
        args,
        files: &[],
        exit: 1,
    }
}

const PROSE: &str = "traces/data/granite/prose.bin";
const ALL: &str = "traces/data/granite/all.bin";
/// A 4-token granite-geometry trace (`sim trace gen --fit-to traces/data/granite/prose.bin
/// --tokens 4 --sequences 1 --seed 16`), so that the `--timeline` files stay small (about
/// 2.7 MB each on the 64-token prose trace, about 170 kB on this one).
const TINY: &str = "sim/tests/fixtures/golden/inputs/granite-fit-4tok.bin";
const QWEN: &str = "validate/data/validation/qwen3-30b-a3b.trace";
const P9_QS: &str = "validate/data/h200-linux-p9-validation/qs.json";
const P14_GL: &str = "validate/data/h200-linux-p14-validation/paired/gl.json";

/// The `validate --measured` flags of the stored granite LRU replay `P14_GL`, then `--hw` and the
/// extras.
macro_rules! p14_gl {
    ($($extra:expr),*) => {
        &[
            "validate", "--trace", PROSE, "--expert-mib", "16", "--steps", "12",
            "--policy", "e1,e4,region:256", "--evict", "lru", "--budget", "50%",
            "--measured", P14_GL, $($extra),*
        ]
    };
}

const CASES: &[Case] = &[
    // 1. The README main job, text and JSON; and the embedded trace.
    ok("run_main_e2", &["run", "--policy", "e2", "--trace", PROSE]),
    ok(
        "run_main_e2_json",
        &["run", "--policy", "e2", "--trace", PROSE, "--json"],
    ),
    ok("run_embedded_default", &["run"]),
    // Mechanism forms and expert sizes (docs/guide/run.md).
    ok(
        "run_e4_coact_json",
        &["run", "--policy", "e4:coact", "--json"],
    ),
    ok(
        "run_region64_hot_profile_trace",
        &[
            "run",
            "--policy",
            "region:64:hot",
            "--trace",
            "traces/data/granite/code.bin",
            "--profile-trace",
            "traces/data/granite/english_prose.bin",
        ],
    ),
    ok(
        "run_os64k_fp8",
        &["run", "--policy", "os64k", "--dtype", "fp8"],
    ),
    ok(
        "run_e2_prefill_expert_mib",
        &[
            "run",
            "--policy",
            "e2:index",
            "--trace",
            ALL,
            "--phase",
            "all",
            "--expert-mib",
            "5.5",
            "--granule-mib",
            "4",
            "--json",
        ],
    ),
    // 2. Sweeps on all.bin: the packing axis, and every retention policy under budgets.
    ok(
        "sweep_e_orders",
        &[
            "sweep",
            "--trace",
            ALL,
            "--e",
            "1,2,3,4,6,8,16,32",
            "--orders",
            "index,hot,coact",
        ],
    ),
    ok(
        "sweep_policies_csv",
        &[
            "sweep",
            "--trace",
            ALL,
            "--policies",
            "e1,e2:coact,region:64,os4k",
            "--format",
            "csv",
        ],
    ),
    ok(
        "sweep_evict_all",
        &[
            "sweep",
            "--trace",
            ALL,
            "--evict",
            "all",
            "--budget",
            "10%,25%,50%,75%,90%",
        ],
    ),
    ok(
        "sweep_evict_all_json",
        &[
            "sweep", "--trace", ALL, "--evict", "all", "--budget", "25%", "--format", "json",
        ],
    ),
    // Retention policies and options in `sim run`.
    ok(
        "run_e1_lru",
        &["run", "--policy", "e1", "--evict", "lru", "--budget", "25%"],
    ),
    ok(
        "run_os4k_lru",
        &[
            "run", "--policy", "os4k", "--evict", "lru", "--budget", "25%",
        ],
    ),
    ok(
        "run_e1_belady_json",
        &[
            "run", "--policy", "e1", "--evict", "belady", "--budget", "1GiB", "--json",
        ],
    ),
    ok(
        "run_static_pin_target",
        &[
            "run",
            "--policy",
            "e1",
            "--evict",
            "static-pin",
            "--target-tokens-per-s",
            "100",
            "--link-gbps",
            "25",
        ],
    ),
    ok(
        "run_pin_lru_per_layer_access",
        &[
            "run",
            "--trace",
            ALL,
            "--policy",
            "e2",
            "--evict",
            "pin-lru",
            "--budget",
            "10",
            "--split",
            "per-layer",
            "--semantics",
            "access",
        ],
    ),
    ok(
        "run_random_access_json",
        &[
            "run",
            "--trace",
            ALL,
            "--policy",
            "e1",
            "--evict",
            "random",
            "--seed",
            "3",
            "--budget",
            "25%",
            "--semantics",
            "access",
            "--json",
        ],
    ),
    ok(
        "run_e4_coact_arc",
        &[
            "run", "--trace", ALL, "--policy", "e4:coact", "--evict", "arc", "--budget", "1GiB",
        ],
    ),
    // 3. A DRAM tier; batching, queueing and scheduling.
    ok(
        "run_dram",
        &[
            "run", "--policy", "e1", "--evict", "lru", "--budget", "25%", "--dram", "50%",
        ],
    ),
    ok(
        "run_dram_json",
        &[
            "run", "--policy", "e1", "--evict", "lru", "--budget", "25%", "--dram", "50%", "--json",
        ],
    ),
    ok(
        "run_batch_queue_route_aware",
        &[
            "run",
            "--trace",
            ALL,
            "--policy",
            "e1",
            "--evict",
            "lru",
            "--budget",
            "25%",
            "--batch",
            "2",
            "--queue",
            "4",
            "--schedule",
            "route-aware",
        ],
    ),
    ok(
        "run_batch_queue_fifo_json",
        &[
            "run",
            "--trace",
            ALL,
            "--policy",
            "e2",
            "--evict",
            "s3fifo",
            "--budget",
            "50%",
            "--batch",
            "3",
            "--queue",
            "3",
            "--schedule",
            "fifo",
            "--json",
        ],
    ),
    // 4. Timing on both shipped profiles, with predictors and a timeline.
    ok(
        "hw_rtx_e2",
        &["run", "--policy", "e2", "--hw", "rtx4060-laptop-wddm"],
    ),
    ok(
        "hw_rtx_lru_batch8_json",
        &[
            "run",
            "--policy",
            "e2",
            "--evict",
            "lru",
            "--budget",
            "25%",
            "--batch",
            "8",
            "--hw",
            "rtx4060-laptop-wddm",
            "--json",
        ],
    ),
    writes(
        "hw_h200_oracle_timeline",
        &[
            "run",
            "--trace",
            TINY,
            "--policy",
            "e1",
            "--evict",
            "lru",
            "--budget",
            "25%",
            "--hw",
            "h200-linux",
            "--handle-pool",
            "--deferred-unmap",
            "--predictor",
            "oracle",
            "--window",
            "2",
            "--prefetch-issue",
            "legacy",
            "--timeline",
            "{OUT}/steps.json",
        ],
        &["steps.json"],
    ),
    writes(
        "hw_rtx_prev_token_timeline_json",
        &[
            "run",
            "--trace",
            TINY,
            "--policy",
            "e2",
            "--evict",
            "lru",
            "--budget",
            "25%",
            "--hw",
            "rtx4060-laptop-wddm",
            "--predictor",
            "prev-token",
            "--prefetch-issue",
            "legacy",
            "--serial-loader",
            "--timeline",
            "{OUT}/steps.json",
            "--json",
        ],
        &["steps.json"],
    ),
    ok(
        "hw_h200_next_layer_os64k",
        &[
            "run",
            "--policy",
            "os64k",
            "--evict",
            "lru",
            "--budget",
            "50%",
            "--hw",
            "h200-linux",
            "--predictor",
            "next-layer",
        ],
    ),
    ok(
        "hw_h200_static_compute_none",
        &[
            "run",
            "--policy",
            "e2",
            "--evict",
            "belady",
            "--budget",
            "25%",
            "--hw",
            "h200-linux",
            "--predictor",
            "static",
            "--prefetch-issue",
            "legacy",
            "--compute",
            "none",
        ],
    ),
    ok(
        "sweep_hw_batch_admission",
        &[
            "sweep",
            "--policies",
            "e2",
            "--evict",
            "lru",
            "--budget",
            "25%",
            "--batch",
            "1,2,4,8,16,32",
            "--hw",
            "rtx4060-laptop-wddm",
            "--admission-cap",
            "0.9",
        ],
    ),
    // 5. Trace statistics.
    ok("trace_stats_all_json", &["trace", "stats", ALL, "--json"]),
    ok("trace_stats_all", &["trace", "stats", ALL]),
    ok(
        "trace_stats_code_all_phases",
        &[
            "trace",
            "stats",
            "traces/data/granite/code.bin",
            "--phase",
            "all",
        ],
    ),
    // 6. Profiles.
    ok("profile_list", &["profile", "list"]),
    ok(
        "profile_show_rtx_json",
        &["profile", "show", "rtx4060-laptop-wddm", "--json"],
    ),
    ok(
        "profile_show_h200_json",
        &["profile", "show", "h200-linux", "--json"],
    ),
    ok("profile_show_h200", &["profile", "show", "h200-linux"]),
    ok("profile_check_churn", &["profile", "check-churn"]),
    ok(
        "profile_check_churn_h200_json",
        &["profile", "check-churn", "--hw", "h200-linux", "--json"],
    ),
    // 7. Re-pricing stored replays (no GPU): docs/guide/validate.md's example, the granite LRU
    // replay `P14_GL` (text, JSON, and priced by the other GPU's profile, which adds a note on
    // stderr).
    ok(
        "validate_measured_p9_qs",
        &[
            "validate",
            "--trace",
            QWEN,
            "--dtype",
            "int4",
            "--steps",
            "12",
            "--policy",
            "e1,e4,region:256,os4k",
            "--hw",
            "h200-linux",
            "--measured",
            P9_QS,
        ],
    ),
    ok("validate_measured_p14_gl", p14_gl!("--hw", "h200-linux")),
    ok(
        "validate_measured_p14_gl_json",
        p14_gl!("--hw", "h200-linux", "--json"),
    ),
    ok(
        "validate_measured_p14_gl_rtx",
        p14_gl!("--hw", "rtx4060-laptop-wddm"),
    ),
    // 8. A compare report: its data files, its Markdown and its stdout.
    writes(
        "compare_small",
        &[
            "compare",
            "--trace",
            "traces/data/granite/english_prose.bin",
            "--trace",
            "traces/data/granite/code.bin",
            "--policies",
            "e1,e2:hot,os64k",
            "--evict",
            "lru,static-pin",
            "--budgets",
            "25%",
            "--hw",
            "rtx4060-laptop-wddm",
            "--quiet",
            "--out",
            "{OUT}/report",
        ],
        &[
            "report/results.json",
            "report/results.csv",
            "report/report.md",
        ],
    ),
    // Errors a restructuring maps from typed library errors to flag names.
    fails(
        "error_predictor_os_on_wddm",
        &[
            "run",
            "--policy",
            "os4k",
            "--predictor",
            "oracle",
            "--hw",
            "rtx4060-laptop-wddm",
        ],
    ),
    fails(
        "error_handle_pool_unmeasured",
        &[
            "run",
            "--policy",
            "e1",
            "--evict",
            "lru",
            "--budget",
            "25%",
            "--hw",
            "rtx4060-laptop-wddm",
            "--handle-pool",
        ],
    ),
    fails(
        "error_window_out_of_range",
        &[
            "run",
            "--policy",
            "e1",
            "--hw",
            "h200-linux",
            "--predictor",
            "oracle",
            "--window",
            "99",
        ],
    ),
    fails("error_unknown_profile", &["run", "--hw", "gtx-9000"]),
    fails(
        "error_budget_above_bank",
        &[
            "run", "--trace", ALL, "--policy", "e4:coact", "--evict", "arc", "--budget", "3GiB",
        ],
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden")
}

/// The outputs of one case: (fixture file name, bytes), stdout first.
fn run_case(bin: &Path, case: &Case) -> Result<Vec<(String, Vec<u8>)>, String> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out_dir = dir
        .path()
        .to_str()
        .expect("a UTF-8 temporary path")
        .to_string();
    let args: Vec<String> = case
        .args
        .iter()
        .map(|a| a.replace("{OUT}", &out_dir))
        .collect();
    let o = Command::new(bin)
        .args(&args)
        .current_dir(root())
        .output()
        .expect("the sim binary runs");
    // The temporary directory's path is the one run-dependent string (see the module doc).
    let scrub = |bytes: &[u8]| -> Vec<u8> {
        String::from_utf8_lossy(bytes)
            .replace(&out_dir, "{OUT}")
            .into_bytes()
    };
    if o.status.code() != Some(case.exit) {
        return Err(format!(
            "exit status {:?}, expected {}; stderr:\n{}",
            o.status.code(),
            case.exit,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let mut outputs = vec![(format!("{}.stdout", case.name), scrub(&o.stdout))];
    outputs.push((format!("{}.stderr", case.name), scrub(&o.stderr)));
    for file in case.files {
        let path = dir.path().join(file);
        let bytes = std::fs::read(&path).map_err(|e| format!("{file} was not written: {e}"))?;
        let base = Path::new(file)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let bytes = if std::str::from_utf8(&bytes).is_ok() {
            scrub(&bytes)
        } else {
            bytes
        };
        outputs.push((format!("{}.{base}", case.name), bytes));
    }
    Ok(outputs)
}

/// Shows `line` whole when short, else a window around byte column `col`.
fn excerpt(line: &str, col: usize) -> String {
    const WIDE: usize = 160;
    if line.len() <= WIDE {
        return line.to_string();
    }
    let mut start = col.saturating_sub(WIDE / 2);
    while !line.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + WIDE).min(line.len());
    while !line.is_char_boundary(end) {
        end += 1;
    }
    format!(
        "[col {start}..{end} of {}] {}",
        line.len(),
        &line[start..end]
    )
}

/// A readable report of the first differing lines of `expected` and `actual`.
fn diff(expected: &[u8], actual: &[u8]) -> String {
    let (e, a) = (
        String::from_utf8_lossy(expected),
        String::from_utf8_lossy(actual),
    );
    let (el, al): (Vec<&str>, Vec<&str>) = (e.split('\n').collect(), a.split('\n').collect());
    let first = el
        .iter()
        .zip(&al)
        .position(|(x, y)| x != y)
        .unwrap_or(el.len().min(al.len()));
    let mut s = format!(
        "  {} bytes / {} lines expected, {} bytes / {} lines actual; first difference at line {}\n",
        expected.len(),
        el.len(),
        actual.len(),
        al.len(),
        first + 1
    );
    for (i, line) in el
        .iter()
        .enumerate()
        .take(first)
        .skip(first.saturating_sub(2))
    {
        let _ = writeln!(s, "    {:>5}  {}", i + 1, excerpt(line, 0));
    }
    // The first differing line and the next few, equal ones once, differing ones as -/+.
    for i in first..(first + 8) {
        let (x, y) = (el.get(i), al.get(i));
        if x.is_none() && y.is_none() {
            break;
        }
        if x == y {
            let _ = writeln!(s, "    {:>5}  {}", i + 1, excerpt(x.unwrap(), 0));
            continue;
        }
        let col = match (x, y) {
            (Some(x), Some(y)) => x
                .bytes()
                .zip(y.bytes())
                .position(|(p, q)| p != q)
                .unwrap_or(x.len().min(y.len())),
            _ => 0,
        };
        if let Some(x) = x {
            let _ = writeln!(s, "  - {:>5}  {}", i + 1, excerpt(x, col));
        }
        if let Some(y) = y {
            let _ = writeln!(s, "  + {:>5}  {}", i + 1, excerpt(y, col));
        }
    }
    s
}

fn is_fixture(name: &str) -> bool {
    name != "README.md" && name != ".gitattributes"
}

#[test]
fn golden_outputs_are_unchanged() {
    let bless = std::env::var("SIM_GOLDEN_BLESS").is_ok_and(|v| v == "1");
    let bin = std::env::var_os("SIM_GOLDEN_BIN")
        .map(|p| root().join(p))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sim")));
    let dir = fixtures();
    let mut names = std::collections::BTreeSet::new();
    for c in CASES {
        assert!(names.insert(c.name), "two cases named {}", c.name);
    }
    let mut failures = Vec::new();
    let mut produced = std::collections::BTreeSet::new();
    for case in CASES {
        let outputs = match run_case(&bin, case) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        for (file, actual) in outputs {
            let path = dir.join(&file);
            // An empty stderr has no fixture (and needs none).
            let is_stderr = file.ends_with(".stderr");
            if is_stderr && actual.is_empty() {
                if bless {
                    let _ = std::fs::remove_file(&path);
                } else if path.exists() {
                    failures.push(format!(
                        "{file}: stderr is empty, the fixture expects:\n{}",
                        diff(&std::fs::read(&path).unwrap(), &[])
                    ));
                }
                continue;
            }
            produced.insert(file.clone());
            if bless {
                std::fs::write(&path, &actual).unwrap();
                continue;
            }
            match std::fs::read(&path) {
                Err(_) => failures.push(format!(
                    "{file}: no fixture (record it with SIM_GOLDEN_BLESS=1)"
                )),
                Ok(expected) if expected != actual => failures.push(format!(
                    "{file}: differs from the fixture (`sim {}`)\n{}",
                    case.args.join(" "),
                    diff(&expected, &actual)
                )),
                Ok(_) => {}
            }
        }
    }
    // A fixture that no case produces is stale: removed when blessing, a failure otherwise.
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_file() && is_fixture(&name) && !produced.contains(&name) {
            let stale_stderr =
                name.ends_with(".stderr") && names.iter().any(|n| name == format!("{n}.stderr"));
            if bless {
                std::fs::remove_file(e.path()).unwrap();
            } else if !stale_stderr {
                // (a case's stale stderr fixture was reported above)
                failures.push(format!("{name}: a fixture no case produces"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} golden output(s) differ:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}
