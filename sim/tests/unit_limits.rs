//! Unit maps sized by a flag rather than by the trace: one OS page unit per page of every
//! expert instance can outnumber the u32 unit ids or the memory; both are refused before
//! anything is allocated, with the figures (they aborted on an allocation failure before).

use std::process::Command;

const TINY: &str = "sim/tests/fixtures/golden/inputs/granite-fit-4tok.bin";

fn run(expert_mib: &str) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args([
            "run",
            "--trace",
            TINY,
            "--policy",
            "os4k",
            "--expert-mib",
            expert_mib,
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn more_pages_than_unit_ids_are_refused() {
    // 30,000 MiB / 4 KiB = 7,680,000 pages per expert x 768 expert instances
    let (code, err) = run("30000");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("`os4k` would make 5898240000 units (7680000 per expert instance), more than the 4294967295 unit ids allow"),
        "{err}"
    );
}

#[test]
fn a_unit_map_larger_than_the_memory_available_is_refused() {
    // 10,000 MiB / 4 KiB = 2,560,000 pages x 768 = 1,966,080,000 units of 32 bytes, plus
    // 8 bytes of key index for each of the 768 expert instances: 62,914,566,144 bytes.
    let avail = traces::resources::available_memory().expect("the machine reports its memory");
    let need = 1_966_080_000u64 * 32 + 768 * 8;
    if avail >= need {
        eprintln!("skipped: {avail} bytes available hold the map");
        return;
    }
    let (code, err) = run("10000");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "`os4k`: its tables for 768 expert instances in 1966080000 units would need 62,914,566,144 bytes"
        ),
        "{err}"
    );
    assert!(
        err.contains("of memory available now; use larger units"),
        "{err}"
    );
}

#[test]
fn a_small_trace_declaring_billions_of_expert_instances_is_refused() {
    // 60,000 MoE layers of 65,535 experts, one token selecting expert 0 in each: a valid
    // trace of 420 KB whose geometry declares 3,932,100,000 expert instances.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("big.csv");
    let mut rows = String::from("sequence,phase,token,layer,experts\n");
    for l in 0..60_000 {
        rows.push_str(&format!("s,decode,0,{l},0\n"));
    }
    std::fs::write(&csv, rows).unwrap();
    let sim = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sim"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = dir.path().join("out");
    let o = sim(&[
        "trace",
        "import",
        "--format",
        "csv",
        csv.to_str().unwrap(),
        "--num-experts",
        "65535",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let started = std::time::Instant::now();
    let trace = out.join("big.bin");
    let o = sim(&[
        "run",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "e4",
        "--expert-mib",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    // The index alone (8 bytes an instance) is 31,456,800,000 bytes; where the machine holds
    // it, the unit map (a 32-byte unit per 4 experts more) is refused instead.
    let index = err.contains("declares 3932100000 expert instances; their unit-map index would need 31,456,800,000 bytes");
    let map =
        err.contains("`e4:hot`: its tables for 3932100000 expert instances in 983040000 units");
    assert!(index || map, "{err}");
    assert!(err.contains("of memory available now"), "{err}");
    assert!(
        started.elapsed().as_secs() < 10,
        "refused before allocating"
    );
    // `trace stats` streams, but keeps one key state per declared instance: refused too
    let o = sim(&["trace", "stats", trace.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the statistics' per-expert state") && err.contains("of memory available now"),
        "{err}"
    );
}
