//! `sim compare` with cells over the admission cap: they are marked "does not fit" with the
//! reason, the other cells run, and the report regenerates from results.json unchanged.

use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn cells_over_the_cap_do_not_fit_and_the_rest_run() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("report");
    let prose = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../traces/data/granite/prose.bin"
    );
    // granite's bank is 3 GiB at e1 (768 experts of 4 MiB committed); 90% of it is over
    // 0.3 x usable VRAM (about 2.3 GiB), 10% is well under
    let o = sim(&[
        "compare",
        "--trace",
        prose,
        "--policies",
        "e1",
        "--evict",
        "lru",
        "--budgets",
        "10%,90%",
        "--hw",
        "rtx4060-laptop-wddm",
        "--admission-cap",
        "0.3",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("(e1 / lru @ 90%): does not fit: the admission cap admits no sequence"),
        "{err}"
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = results["runs"].as_array().unwrap();
    let over: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|r| r.get("does_not_fit").is_some())
        .collect();
    // Belady and LRU at 90%
    assert_eq!(over.len(), 2);
    for r in &over {
        assert_eq!(r["grid"]["budget"], "90%");
        assert_eq!(r["admission"]["admitted"], 0);
        assert!(r.get("timing").is_none() && r.get("cache").is_some());
    }
    for r in runs.iter().filter(|r| r["grid"]["budget"] == "10%") {
        assert!(r.get("does_not_fit").is_none() && r.get("timing").is_some());
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("`e1 / lru @ 90%` on `prose`: does not fit:"),
        "the report lists the cell"
    );
    // regenerating from results.json gives the same report
    let again = d.path().join("again");
    let o = sim(&[
        "report",
        out.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(again.join("report.md")).unwrap(),
        md
    );
}
