//! `sim run --dump-spec` and `--spec FILE` (sim/src/cmd/run_spec.rs): the spec the flags
//! make, and the same run, byte for byte, from that spec.

use super::{fails, sim};

const FLAGS: [&str; 9] = [
    "run", "--policy", "e4:coact", "--evict", "s3fifo", "--budget", "12.5%", "--seed", "3",
];

/// The spec the flags make, written out by hand from the flags above (defaults: the decode phase,
/// global split, group semantics).
const WANT: &str = r#"{
  "mechanism": "e4:coact",
  "phase": "decode",
  "retention": {
    "evict": "s3fifo",
    "budget": "12.5%",
    "split": "global",
    "semantics": "group",
    "seed": 3
  }
}
"#;

fn stdout(args: &[&str]) -> Vec<u8> {
    let o = sim(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

#[test]
fn a_dumped_spec_reruns_the_same_run_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let with = |extra: &'static str| [&FLAGS[..], &[extra]].concat();
    let dumped = stdout(&with("--dump-spec"));
    assert_eq!(String::from_utf8(dumped.clone()).unwrap(), WANT);
    let path = dir.path().join("run.json");
    std::fs::write(&path, &dumped).unwrap();
    let spec = path.to_str().unwrap();
    let by_flags = stdout(&with("--json"));
    let by_spec = stdout(&["run", "--spec", spec, "--json"]);
    assert_eq!(by_flags, by_spec);
    // the spec's own dump is itself
    assert_eq!(stdout(&["run", "--spec", spec, "--dump-spec"]), dumped);
    // a describing flag beside --spec is refused, not merged
    let err = fails(&["run", "--spec", spec, "--policy", "e1"]);
    assert!(err.contains("--spec") && err.contains("leave out"), "{err}");
    // a run the spec cannot hold yet says what
    let err = fails(&["run", "--hw", "h200-linux", "--dump-spec"]);
    assert!(err.contains("timing"), "{err}");
    let err = fails(&["run", "--spec", "/nonexistent/run.json"]);
    assert!(err.contains("/nonexistent/run.json"), "{err}");
}
