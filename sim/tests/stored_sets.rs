//! Every stored calibration under `validate/data/` whose profile sits beside its measurement
//! set (`X.json` next to `X.measurements.json`) rebuilds from those measurements byte for byte,
//! so a change to how constants are derived shows up here (the shipped profile's own check is
//! in `sim/src/cmd/calibrate.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn measurement_sets(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            measurement_sets(&p, out);
        } else if p.to_string_lossy().ends_with(".measurements.json") {
            out.push(p);
        }
    }
}

#[test]
fn stored_calibrations_rebuild_byte_for_byte() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../validate/data");
    let mut sets = Vec::new();
    measurement_sets(&data, &mut sets);
    sets.sort();
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for m in &sets {
        let profile = PathBuf::from(m.to_string_lossy().replace(".measurements.json", ".json"));
        let Ok(stored) = std::fs::read_to_string(&profile) else {
            continue; // a pooled or shipped set whose profile lives elsewhere
        };
        let name = serde_json::from_str::<serde_json::Value>(&stored).unwrap()["name"]
            .as_str()
            .unwrap()
            .to_string();
        let out = tmp.path().join(format!("{checked}.json"));
        let st = Command::new(env!("CARGO_BIN_EXE_sim"))
            .args(["calibrate", "--from-measurements"])
            .arg(m)
            .arg("--out")
            .arg(&out)
            .args(["--name", &name])
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}: {}",
            m.display(),
            String::from_utf8_lossy(&st.stderr)
        );
        assert!(
            std::fs::read_to_string(&out).unwrap() == stored,
            "{} no longer rebuilds {} byte for byte",
            m.display(),
            profile.display()
        );
        checked += 1;
    }
    // the sixteenth pass's two GPU and seven host calibrations, the fifteenth's three and the
    // fourteenth's five at least
    assert!(checked >= 16, "only {checked} stored calibrations found");
}

/// Runs `sim calibrate --from-measurements SETS --out OUT --name NAME`, asserting success.
fn rebuild(sets: &[PathBuf], out: &Path, name: &str) {
    rebuild_with(sets, out, name, &[]);
}

/// [`rebuild`] with `extra` arguments (e.g. `--live-set-from`).
fn rebuild_with(sets: &[PathBuf], out: &Path, name: &str, extra: &[&str]) {
    let list: Vec<String> = sets.iter().map(|p| p.display().to_string()).collect();
    let st = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(["calibrate", "--from-measurements", &list.join(",")])
        .arg("--out")
        .arg(out)
        .args(["--name", name])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
}

#[test]
fn the_shipped_h200_host_profile_is_the_pool_of_its_three_host_calibrations() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("validate/data/h200-linux-p16");
    let sets: Vec<PathBuf> = ["h4", "h5", "h6"]
        .iter()
        .map(|s| dir.join(format!("{s}.measurements.json")))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("h200-host.json");
    rebuild(&sets, &out, "h200-host");
    let shipped = std::fs::read_to_string(root.join("profile/profiles/h200-host.json")).unwrap();
    assert!(std::fs::read_to_string(&out).unwrap() == shipped);
    let pooled = std::fs::read_to_string(tmp.path().join("h200-host.measurements.json")).unwrap();
    let stored = std::fs::read_to_string(dir.join("h200-host.measurements.json")).unwrap();
    assert!(
        pooled == stored,
        "the stored pooled set is the pool of the three"
    );
}

/// The `[min, max]` of `domain.ranges[of]` of constant `name` in profile `p`.
fn range(p: &serde_json::Value, name: &str, of: &str) -> Option<(f64, f64)> {
    let r = p["constants"][name]["domain"]["ranges"]
        .as_array()?
        .iter()
        .find(|r| r["of"] == of)?
        .clone();
    Some((r["min"].as_f64()?, r["max"].as_f64()?))
}

/// The smallest and largest of `xs`.
fn span(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    })
}

#[test]
fn every_stored_constant_has_the_domain_of_its_sets_arm_levels() {
    // read against the raw measurement sets, not through the calibration's code: the live-set
    // arm's live levels and unit sizes, the page-in arm's unit sizes, the H2D arm's copy sizes
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../validate/data");
    let mut sets = Vec::new();
    measurement_sets(&data, &mut sets);
    let mut live_set_checked = 0;
    for m in &sets {
        let profile = PathBuf::from(m.to_string_lossy().replace(".measurements.json", ".json"));
        let Ok(text) = std::fs::read_to_string(&profile) else {
            continue;
        };
        let p: serde_json::Value = serde_json::from_str(&text).unwrap();
        let set: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(m).unwrap()).unwrap();
        for (k, c) in p["constants"].as_object().unwrap() {
            assert!(
                c.get("domain").is_some(),
                "{}: {k} has no domain",
                profile.display()
            );
        }
        if set.get("vmm").is_none() {
            continue; // a host set: threads and bytes, checked by the rebuild
        }
        let f = |v: &serde_json::Value| v.as_f64().unwrap();
        let page_in = span(
            set["page_in"]
                .as_array()
                .unwrap()
                .iter()
                .map(|q| f(&q["granules"])),
        );
        assert_eq!(
            range(&p, "vmm_commit", "unit_granules"),
            Some(page_in),
            "{}",
            m.display()
        );
        let h2d = set["h2d_pinned"]["points"].as_array().unwrap();
        let bytes = span(h2d.iter().map(|q| f(&q["bytes"])));
        assert_eq!(range(&p, "h2d_bandwidth", "bytes"), Some(bytes));
        let busy: Vec<&serde_json::Value> = set["live_set"]["points"]
            .as_array()
            .map(|a| a.iter().filter(|q| q["work"] == "kernels").collect())
            .unwrap_or_default();
        if !busy.is_empty() && p["constants"].get("vmm_commit_busy_live_slope").is_some() {
            let live = span(busy.iter().map(|q| f(&q["live_granules"])));
            let sizes = span(busy.iter().map(|q| f(&q["granules"])));
            for name in ["vmm_commit_busy_live_slope", "vmm_decommit_busy_live_slope"] {
                assert_eq!(range(&p, name, "live_granules"), Some(live), "{name}");
                assert_eq!(range(&p, name, "unit_granules"), Some(sizes), "{name}");
            }
            live_set_checked += 1;
        }
    }
    // the fifteenth pass's three and the sixteenth's two calibrations ran the live-set arm
    assert!(live_set_checked >= 5, "{live_set_checked}");
    // the shipped profile's two slopes fitted to the stored replays: the live-set arm's range
    let shipped: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("../../profile/profiles/h200-linux.json")).unwrap(),
    )
    .unwrap();
    for name in ["vmm_commit_busy_live_slope", "vmm_decommit_busy_live_slope"] {
        assert_eq!(shipped["constants"][name]["provenance"]["kind"], "derived");
        assert_eq!(range(&shipped, name, "live_granules"), Some((0.0, 6144.0)));
    }
}

/// The shipped H100 profiles are the pools of the three full calibrations of 2026-12-07: the
/// GPU sets `c1`-`c3` give `h100-linux` (with the concave live-set curve of the two live-set
/// sets `live-set/l1`, `l2`), their host arms `c1-host`-`c3-host` give `h100-linux-host`,
/// byte for byte, and each pooled set is the one stored beside them.
#[test]
fn the_shipped_h100_profiles_are_the_pools_of_their_three_calibrations() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("validate/data/h100-linux-2026-12-07");
    let live = format!(
        "{},{}",
        dir.join("live-set/l1.json").display(),
        dir.join("live-set/l2.json").display()
    );
    for (name, suffix, extra) in [
        ("h100-linux", "", vec!["--live-set-from", live.as_str()]),
        ("h100-linux-host", "-host", vec![]),
    ] {
        let sets: Vec<PathBuf> = ["c1", "c2", "c3"]
            .iter()
            .map(|s| dir.join(format!("{s}{suffix}.measurements.json")))
            .collect();
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join(format!("{name}.json"));
        rebuild_with(&sets, &out, name, &extra);
        let shipped =
            std::fs::read_to_string(root.join(format!("profile/profiles/{name}.json"))).unwrap();
        assert!(
            std::fs::read_to_string(&out).unwrap() == shipped,
            "{name} no longer rebuilds from its three calibrations"
        );
        let pooled =
            std::fs::read_to_string(tmp.path().join(format!("{name}.measurements.json"))).unwrap();
        let stored =
            std::fs::read_to_string(dir.join(format!("{name}.measurements.json"))).unwrap();
        assert!(
            pooled == stored,
            "{name}: the stored pooled set is the pool of the three"
        );
    }
}

/// docs/VALIDATION.md is what `sim validate --reprice validate/data --coverage` prints now: a
/// change to the model or to the stored replays that moves an error, a verdict or a live-set
/// range fails here until the page is regenerated (the command is the page's first paragraph).
#[test]
fn the_coverage_page_is_the_one_the_stored_replays_give_now() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(["validate", "--reprice", "validate/data", "--coverage"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let now = String::from_utf8(o.stdout).unwrap();
    let stored = std::fs::read_to_string(root.join("docs/VALIDATION.md")).unwrap();
    assert!(
        stored == now,
        "docs/VALIDATION.md is stale: regenerate it with `sim validate --reprice validate/data \
         --coverage --out docs/VALIDATION.md` from the repository root"
    );
}

/// `--coverage` on one stored replay: one region per row (granite gs.json: 4 mechanisms), each
/// line carrying the row's own p50 error as the stored file's re-pricing reports it.
#[test]
fn coverage_of_one_stored_replay_has_one_region_per_row() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root.join("validate/data/h200-linux-p9-validation/gs.json"),
        dir.path().join("gs.json"),
    )
    .unwrap();
    let d = dir.path().to_str().unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sim"))
            .args(["validate", "--reprice", d])
            .args(extra)
            .current_dir(&root)
            .output()
            .unwrap()
    };
    let o = run(&["--coverage"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = String::from_utf8(o.stdout).unwrap();
    let j: serde_json::Value = serde_json::from_slice(&run(&["--json"]).stdout).unwrap();
    let rows = j["reprice"]["rows"].as_array().unwrap();
    let lines: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| h200-linux"))
        .collect();
    assert_eq!(lines.len(), rows.len());
    for r in rows {
        let c = &r["context"];
        assert_eq!(c["gpu"], "h200-linux");
        let cell = format!(
            "| {} | {} | 1 | ",
            r["policy"].as_str().unwrap(),
            r["retention"].as_str().unwrap()
        );
        let line = lines.iter().find(|l| l.contains(&cell)).unwrap();
        let err = format!("| 1 | {:+.1}% |", r["error_pct_p50"].as_f64().unwrap());
        assert!(line.contains(&err), "{line} lacks {err}");
    }
    // --coverage needs --reprice, and prints Markdown, not JSON
    let bad = run(&["--coverage", "--json"]);
    assert_eq!(bad.status.code(), Some(2));
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args([
            "validate",
            "--coverage",
            "--policy",
            "e1",
            "--hw",
            "h200-linux",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--reprice"));
}

/// `--live-set-from` through the binary: one live-set set gives the curve with one repetition
/// and no spread (the spread is that of several sets' own fits); a full calibration's set in
/// its place, or host sets in --from-measurements, are refused naming the flag.
#[test]
fn live_set_from_adds_the_curve_and_refuses_other_sets() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("validate/data/h100-linux-2026-12-07");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("one.json");
    let l1 = dir.join("live-set/l1.json").display().to_string();
    rebuild_with(
        &[dir.join("c1.measurements.json")],
        &out,
        "one",
        &["--live-set-from", &l1],
    );
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    for name in [
        "vmm_commit_live_power",
        "vmm_commit_live_power_exp",
        "vmm_decommit_live_power",
        "vmm_decommit_live_power_exp",
    ] {
        let c = &p["constants"][name];
        assert_eq!(c["provenance"]["repetitions"], 1, "{name}");
        assert!(c["provenance"].get("spread").is_none(), "{name}");
        assert_eq!(range(&p, name, "live_granules"), Some((0.0, 36248.0)));
        assert!(c["provenance"]["source"]
            .as_str()
            .unwrap()
            .ends_with("l1.json"));
    }
    let e = c_exp(&p);
    assert!(e > 0.0 && e <= 1.0, "{e}");
    let run = |from: &Path, live: &Path| {
        Command::new(env!("CARGO_BIN_EXE_sim"))
            .args(["calibrate", "--from-measurements"])
            .arg(from)
            .arg("--live-set-from")
            .arg(live)
            .arg("--out")
            .arg(tmp.path().join("bad.json"))
            .output()
            .unwrap()
    };
    let full = dir.join("c2.measurements.json");
    let o = run(&dir.join("c1.measurements.json"), &full);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--live-set-from"),
        "{err}"
    );
    let o = run(&dir.join("c1-host.measurements.json"), Path::new(&l1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("host sets"), "{err}");
}

/// The commit curve's exponent in profile JSON `p`.
fn c_exp(p: &serde_json::Value) -> f64 {
    p["constants"]["vmm_commit_live_power_exp"]["value"]
        .as_f64()
        .unwrap()
}
