//! `sim trace gen` against the machine's limits, through the built binary: tables larger than
//! the memory available and files larger than the free disk space are refused before anything
//! is allocated or written; a write that fails, and a run ended by SIGINT or SIGTERM, leave no
//! hidden temporary file behind.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .expect("the sim binary runs")
}

/// The entries of `dir`, names only.
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

const GRANITE: [&str; 6] = [
    "--preset",
    "granite-3.0-1b-a400m",
    "--skew",
    "1",
    "--locality",
    "0.3",
];

#[test]
fn tables_larger_than_the_memory_available_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.bin");
    let avail = traces::resources::available_memory().expect("the machine reports its memory");
    // Tables take 25 bytes per expert instance: find a layer count that needs twice what is
    // available, within the format's 65,536 layers of 65,535 experts (107 GB in all).
    let layers = (2 * avail as u128 / (25 * 65_535) + 1) as usize;
    if layers > traces::format::MAX_LAYERS {
        eprintln!("skipped: {avail} bytes available exceed what any geometry needs");
        return;
    }
    let started = Instant::now();
    let o = sim(&[
        "trace",
        "gen",
        "--layers",
        &layers.to_string(),
        "--experts",
        "65535",
        "--top-k",
        "1",
        "--skew",
        "1",
        "--locality",
        "0",
        "--tokens",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "the generator's tables for {layers} MoE layers of up to 65535 experts would need"
        )),
        "{err}"
    );
    assert!(err.contains("of memory available now; give fewer --layers or --experts"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused before allocating"
    );
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

#[test]
fn a_file_larger_than_the_free_space_is_refused_with_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.bin");
    let mut args = vec!["trace", "gen"];
    args.extend(GRANITE);
    args.extend(["--tokens", "18446744073709551615", "--out"]);
    args.push(out.to_str().unwrap());
    let o = sim(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    // By hand: 24 MoE layers x top-8 x 2 bytes = 384 bytes per token, times 2^64 - 1 tokens,
    // plus the 20-byte preamble, the header (encoded here the same way) and the 4-byte checksum.
    let params = traces::gen::GenParams {
        preset: Some("granite-3.0-1b-a400m".into()),
        skew: vec![1.0],
        locality: vec![0.3],
        cross_layer: 0.0,
        sequences: 1,
        tokens: u64::MAX,
        seed: 0,
        fitted_to: None,
        always_on: Vec::new(),
        archetypes: None,
    };
    let model = traces::presets::preset("granite-3.0-1b-a400m")
        .unwrap()
        .model_spec();
    let header = traces::format::encode_header(&params.header(&model)).unwrap();
    let total = 20 + header.len() as u128 + 384u128 * u64::MAX as u128 + 4;
    let want = format!("the trace would take {} bytes (6.0 ZiB)", grouped(total));
    assert!(err.contains(&format!("--out {}", out.display())), "{err}");
    assert!(err.contains(&want), "{want} in {err}");
    assert!(err.contains("give fewer --tokens or --sequences"), "{err}");
    assert!(entries(dir.path()).is_empty());
}

/// `n` with thousands separators, grouped from the right.
fn grouped(n: u128) -> String {
    let d = n.to_string();
    let groups: Vec<&str> = d
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    groups.join(",")
}

#[cfg(unix)]
#[test]
fn a_failed_write_removes_the_temporary_file() {
    // A file-size limit of 1 MiB makes the write fail with EFBIG, as a full disk does with
    // ENOSPC (SIGXFSZ ignored, so the write returns the error instead of killing the process).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.bin");
    let script = format!(
        "trap '' XFSZ; ulimit -f 1024; exec \"$0\" trace gen {} --tokens 1000000 --out \"$1\"",
        GRANITE.join(" ")
    );
    let o = Command::new("sh")
        .args([
            "-c",
            &script,
            env!("CARGO_BIN_EXE_sim"),
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}: writing the payload", out.display())),
        "{err}"
    );
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

/// Start a long `trace gen`, wait for its hidden temporary file to grow, send `signal`, and
/// check that it exits with status 130 and leaves nothing in the directory.
#[cfg(unix)]
fn interrupted_by(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.bin");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(["trace", "gen"])
        .args(GRANITE)
        // 1,000,000 tokens x 384 bytes = 384 MB (it must fit the free space to start): half a
        // minute in a debug build, interrupted after its first MiB.
        .args(["--tokens", "1000000", "--out", out.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let tmp_written = || {
        std::fs::read_dir(dir.path()).unwrap().any(|e| {
            let e = e.unwrap();
            e.file_name().to_string_lossy().starts_with(".trace-")
                && e.metadata().unwrap().len() > 1 << 20
        })
    };
    while !tmp_written() {
        assert!(Instant::now() < deadline, "no temporary file appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("still running 20 s after SIG{signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "SIG{signal}: {err}");
    assert!(
        err.contains("interrupted: removed 1 unfinished temporary output"),
        "{err}"
    );
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

#[cfg(unix)]
#[test]
fn sigint_removes_the_temporary_file() {
    interrupted_by("INT");
}

#[cfg(unix)]
#[test]
fn sigterm_removes_the_temporary_file() {
    interrupted_by("TERM");
}
