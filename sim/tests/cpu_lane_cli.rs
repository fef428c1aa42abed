//! `--cpu-experts` and `--hw-host` end to end: the `cpu` block's counts computed by hand on
//! a generated granite trace (24 MoE layers, top-8, one token per step), `none` identical to
//! no flag, and the errors that name what is missing.

use std::path::PathBuf;
use std::process::Command;

fn sim(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .expect("the sim binary runs");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A 16-token granite-geometry trace (hidden 1024).
fn trace(dir: &std::path::Path) -> PathBuf {
    let granite = dir.join("g.bin");
    let g = granite.to_str().unwrap();
    let common = [
        "--skew",
        "1",
        "--locality",
        "0.3",
        "--tokens",
        "16",
        "--seed",
        "3",
    ];
    let (ok, _, e) = sim(&[
        &[
            "trace",
            "gen",
            "--preset",
            "granite-3.0-1b-a400m",
            "--out",
            g,
        ][..],
        &common,
    ]
    .concat());
    assert!(ok, "{e}");
    granite
}

fn run_json(trace: &str, extra: &[&str]) -> serde_json::Value {
    let base = [
        "run",
        "--trace",
        trace,
        "--policy",
        "e1",
        "--dtype",
        "int4",
        "--hw",
        "rtx4060-laptop-wddm",
        "--json",
    ];
    let (ok, out, err) = sim(&[&base[..], extra].concat());
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn cpu_block_counts_the_experts_placed_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let g = trace(dir.path());
    let g = g.to_str().unwrap();
    let host = ["--hw-host", "dev-box-host"];
    // layers:4: every token's 8 selections in each of the first 4 MoE layers, 16 tokens
    let r = run_json(
        g,
        &[
            &host[..],
            &[
                "--cpu-experts",
                "layers:4",
                "--evict",
                "lru",
                "--budget",
                "25%",
            ],
        ]
        .concat(),
    );
    let c = &r["cpu"];
    assert_eq!(c["placement"], "layers:4");
    assert_eq!(c["cpu_layers"], 4);
    assert_eq!(c["experts_on_cpu"], 16 * 4 * 8);
    assert_eq!(c["experts_on_cpu_per_token"], 32.0);
    // 4 of 24 layers: a sixth of the keys
    assert!((c["cpu_share"].as_f64().unwrap() - 4.0 / 24.0).abs() < 1e-12);
    // the budget counts GPU units only: 25% of the 20 GPU layers' 640 units
    assert_eq!(r["cache"]["budget_units"], 160);
    // all: every selection on the CPU, nothing mapped
    let r = run_json(g, &[&host[..], &["--cpu-experts", "all"]].concat());
    assert_eq!(r["cpu"]["experts_on_cpu"], 16 * 24 * 8);
    assert_eq!(r["timing"]["map_calls"], 0);
    // none is the run without the flag, byte for byte; with --hw-host only the profile's
    // name changes (no constant of the GPU run comes from the host profile)
    let plain = run_json(g, &[]);
    assert_eq!(run_json(g, &["--cpu-experts", "none"]), plain);
    let hosted = run_json(g, &[&host[..], &["--cpu-experts", "none"]].concat());
    assert_eq!(hosted["timing"], plain["timing"]);
    assert_eq!(
        hosted["timing_detail"]["profile"],
        "rtx4060-laptop-wddm+dev-box-host"
    );
    assert!(plain.get("cpu").is_none());
}

#[test]
fn missing_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let g = trace(dir.path());
    let g = g.to_str().unwrap();
    let hw = [
        "run",
        "--policy",
        "e1",
        "--hw",
        "rtx4060-laptop-wddm",
        "--trace",
    ];
    let cases: [(&[&str], &str); 4] = [
        (
            &[g, "--dtype", "int4", "--cpu-experts", "misses"],
            "--hw-host",
        ),
        (
            &[
                g,
                "--expert-mib",
                "2",
                "--hw-host",
                "dev-box-host",
                "--cpu-experts",
                "all",
            ],
            "--dtype",
        ),
        (
            &[
                g,
                "--dtype",
                "int4",
                "--hw-host",
                "h200-linux",
                "--cpu-experts",
                "all",
            ],
            "calibrate --only host",
        ),
        (
            &[
                g,
                "--dtype",
                "fp8",
                "--hw-host",
                "dev-box-host",
                "--cpu-experts",
                "all",
            ],
            "int4 and bf16 only",
        ),
    ];
    for (args, want) in cases {
        let (ok, _, err) = sim(&[&hw[..], args].concat());
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
