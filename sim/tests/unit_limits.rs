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
    // 10,000 MiB / 4 KiB = 2,560,000 pages x 768 = 1,966,080,000 units of 32 bytes: 63 GB.
    let avail = traces::resources::available_memory().expect("the machine reports its memory");
    let need = 1_966_080_000u64 * 32;
    if avail >= need {
        eprintln!("skipped: {avail} bytes available hold the map");
        return;
    }
    let (code, err) = run("10000");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("`os4k`: its 1966080000 pages of 4096 bytes would need 62,914,560,000 bytes"),
        "{err}"
    );
    assert!(
        err.contains("of memory available now; use larger units"),
        "{err}"
    );
}
