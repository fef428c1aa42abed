//! What a first import of a router log told a fresh user too little of: a file that is not
//! UTF-8, an `--out` named like a trace, and an expert size the trace does not record.

use super::fails;
use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .unwrap()
}

/// A two-row hook log: one sequence, two tokens of one layer.
const LOG: &str = "{\"r\":\"a\",\"layer\":0,\"e\":[1,2]}\n{\"r\":\"a\",\"layer\":0,\"e\":[2,3]}\n";

fn import<'a>(input: &'a str, out: &'a str) -> Vec<&'a str> {
    let mut a = vec!["trace", "import", "--format", "jsonl", input, "--out", out];
    a.extend(["--num-experts", "8", "--map", "sequence=r,experts=e"]);
    a
}

#[test]
fn a_log_or_config_that_is_not_utf8_is_named_with_the_offset_of_its_first_bad_byte() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    // line 1 is a row of 30 bytes with its line break; line 2 holds 6 good bytes, then 0xFF
    let line1 = LOG.lines().next().unwrap().to_string() + "\n";
    assert_eq!(line1.len(), 30);
    let bad = [line1.as_bytes(), b"{\"r\": \xff}\n"].concat();
    std::fs::write(p("bad.jsonl"), bad).unwrap();
    let out = p("t");
    let e = fails(&import(&p("bad.jsonl"), &out));
    let want = "bad.jsonl: line 2: not UTF-8 text: byte 0xFF at byte offset 36 (line 2, column 7)";
    assert!(e.contains(want), "{e}");
    assert!(!e.contains("stream did not contain"), "{e}");
    assert!(!std::path::Path::new(&out).exists());
    // a config.json: `{"x": ` is 6 bytes, a NUL (valid UTF-8), then 0xFE at offset 7
    std::fs::write(p("config.json"), b"{\"x\": \x00\xfe}").unwrap();
    std::fs::write(p("ok.jsonl"), LOG).unwrap();
    let cfg = p("config.json");
    let e = fails(&[&import(&p("ok.jsonl"), &out)[..], &["--model-config", &cfg]].concat());
    assert!(e.contains("--model-config"), "{e}");
    assert!(e.contains("config.json"), "{e}");
    assert!(
        e.contains("not UTF-8 text: byte 0xFE at byte offset 7 (line 1, column 8)"),
        "{e}"
    );
    // sim run reads it the same way
    let e = fails(&["run", "--model-config", &cfg, "--hw", "h200-linux"]);
    assert!(e.contains("byte 0xFE at byte offset 7"), "{e}");
}

#[test]
fn an_out_named_like_a_trace_or_naming_a_file_is_refused_and_nothing_is_made() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    std::fs::write(p("log.jsonl"), LOG).unwrap();
    let input = p("log.jsonl");
    let e = fails(&import(&input, &p("x.bin")));
    assert!(e.contains("would be made a directory"), "{e}");
    assert!(
        e.contains("--out names that directory, not the file"),
        "{e}"
    );
    assert!(!d.path().join("x.bin").exists());
    std::fs::create_dir(p("y.bin")).unwrap();
    let e = fails(&import(&input, &p("y.bin")));
    assert!(
        e.contains("is a directory (an earlier import made it?)"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(p("y.bin")).unwrap().count(), 0);
    std::fs::write(p("f"), "").unwrap();
    let e = fails(&import(&input, &p("f")));
    assert!(
        e.contains("is a file, but trace import writes into a directory"),
        "{e}"
    );
    // a directory: the trace is written inside it, named after the input
    let o = sim(&import(&input, &p("traces")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(d.path().join("traces/log.bin").is_file());
}

#[test]
fn an_import_without_the_expert_size_says_run_will_need_expert_mib() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    std::fs::write(p("log.jsonl"), LOG).unwrap();
    let (input, out) = (p("log.jsonl"), p("t"));
    let o = sim(&import(&input, &out));
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("expert size: unknown"), "{err}");
    assert!(err.contains("needs --expert-mib X"), "{err}");
    // as said: sim run refuses without it and runs with it
    let trace = p("t/log.bin");
    let e = fails(&["run", "--trace", &trace]);
    assert!(e.contains("--expert-mib"), "{e}");
    let o = sim(&["run", "--trace", &trace, "--expert-mib", "4"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // with the sizes given, nothing to say
    let u = p("u");
    let sized = [&import(&input, &u)[..], &["--hidden-size", "256"]].concat();
    let o = sim(&[&sized[..], &["--expert-ffn", "128"]].concat());
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("expert size"));
}
