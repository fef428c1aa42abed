//! `sim trace import` / `sim trace export` end to end: the bundled granite traces are exactly
//! what the documented import command produces, exports land atomically, bad input fails
//! with a message and leaves no output.

use std::path::PathBuf;
use std::process::Command;

#[path = "trace_io_cli/model_config.rs"]
mod model_config;

fn repo(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn import_reproduces_the_bundled_granite_files_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let bundled = traces::read_header(repo("traces/data/granite/all.bin")).unwrap();
    let p = &bundled.provenance;
    let json = repo("traces/data/granite/source/moe_expert_trace.json");
    let o = sim(&[
        "trace",
        "import",
        "--format",
        "onnx-genai-json",
        json.to_str().unwrap(),
        "--out",
        out,
        "--model-name",
        &bundled.model.name,
        "--hidden-size",
        "1024",
        "--expert-ffn",
        "512",
        "--source",
        &p.source,
        "--licence",
        p.licence.as_deref().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["english_prose.bin", "code.bin", "math.bin", "all.bin"] {
        let made = std::fs::read(dir.path().join(f)).unwrap();
        let shipped = std::fs::read(repo("traces/data/granite").join(f)).unwrap();
        assert!(made == shipped, "{f} differs from the bundled file");
    }
    assert_eq!(
        std::fs::read(repo("traces/data/granite/prose.bin")).unwrap(),
        std::fs::read(dir.path().join("english_prose.bin")).unwrap()
    );
}

#[test]
fn export_oracle_general_with_expert_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("prose.og");
    let trace = repo("traces/data/granite/prose.bin");
    let o = sim(&[
        "trace",
        "export",
        "--format",
        "oracle-general",
        "--dtype",
        "bf16",
        trace.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recs = traces::export::parse_oracle_general(&std::fs::read(&out).unwrap()).unwrap();
    // 64 decode tokens x 24 layers x top-8; a bf16 expert is 3 x 1024 x 512 x 2 bytes.
    assert_eq!(recs.len(), 12_288);
    assert!(recs.iter().all(|r| r.size == 3_145_728));
}

#[test]
fn bad_input_fails_with_a_message_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "sequence,token,layer,experts\na,0,0,1 1\n").unwrap();
    let o = sim(&[
        "trace",
        "import",
        "--format",
        "csv",
        bad.to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.csv") && err.contains("repeated"), "{err}");
    assert!(!dir.path().join("bad.bin").exists());

    let not_trace = dir.path().join("x.bin");
    std::fs::write(&not_trace, b"definitely not a trace").unwrap();
    let out = dir.path().join("x.csv");
    let o = sim(&[
        "trace",
        "export",
        "--format",
        "csv",
        not_trace.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a MoE trace file"));
    assert!(!out.exists());
    // Only the two inputs remain: no temporary files were left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);

    // Counts no trace can hold are refused before anything is allocated or written: a
    // dense-layer count whose sum with --layers overflows, and an onnx-genai num_layers.
    let g = dir.path().join("g.bin");
    let o = sim(&[
        "trace",
        "gen",
        "--layers",
        "1",
        "--experts",
        "2",
        "--top-k",
        "1",
        "--dense-layers",
        "18446744073709551615",
        "--tokens",
        "1",
        "--out",
        g.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("exceed the 65536 layers a trace may have"),
        "{err}"
    );
    assert!(!g.exists());
    let onnx = dir.path().join("o.json");
    std::fs::write(
        &onnx,
        r#"{"model":"m","num_layers":4611686018427387904,"num_experts":8,"top_k":2,"prompts":{"a":{"prompt_len":0,"prefill":[],"decode":[]}}}"#,
    )
    .unwrap();
    let o = sim(&[
        "trace",
        "import",
        "--format",
        "onnx-genai-json",
        onnx.to_str().unwrap(),
        "--out",
        dir.path().join("i").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("num_layers: 4611686018427387904 layers exceed the 65536"),
        "{err}"
    );
}

/// Without --num-experts and --num-layers the import says both were inferred, with the
/// figures: ids up to 4 make 5 experts, layers 0 and 2 make 3 layers (2 with selections);
/// with both given it says neither.
#[test]
fn import_names_the_geometry_it_inferred() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.csv");
    std::fs::write(&log, "sequence,layer,experts\na,0,0 4\na,2,1 2\n").unwrap();
    let out = dir.path().join("out");
    let (log, out) = (log.to_str().unwrap(), out.to_str().unwrap());
    let base = ["trace", "import", "--format", "csv", log, "--out", out];
    let o = sim(&base);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("experts per layer: 5, inferred as the largest expert id seen (4) + 1")
            && err.contains(
                "layers: 3, inferred as the largest layer index seen + 1 (2 with selections)"
            ),
        "{err}"
    );
    let given = [&base[..], &["--num-experts", "8", "--num-layers", "4"]].concat();
    let o = sim(&given);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("inferred"), "{err}");
    let h = traces::read_header(std::path::Path::new(out).join("log.bin")).unwrap();
    assert_eq!((h.model.layers.len(), h.model.layers[0].experts), (4, 8));
}

/// `--shared-expert-ffn` is recorded in the header, which makes the trace version 3; without
/// it the same import is version 1, as before (Qwen1.5-MoE-A2.7B's one shared expert of FFN
/// 5632; routed FFN 1408, hidden 2048).
#[test]
fn import_records_the_shared_expert_ffn_in_version_3() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.csv");
    std::fs::write(&log, "sequence,layer,experts\na,0,0 4\na,0,1 2\n").unwrap();
    let (log, out) = (log.to_str().unwrap(), dir.path().join("out"));
    let out = out.to_str().unwrap();
    let base = [
        "trace",
        "import",
        "--format",
        "csv",
        log,
        "--out",
        out,
        "--hidden-size",
        "2048",
        "--expert-ffn",
        "1408",
        "--shared-experts",
        "1",
        "--json",
    ];
    let header = |extra: &[&str]| {
        let o = sim(&[&base[..], extra].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let h = traces::read_header(std::path::Path::new(out).join("log.bin")).unwrap();
        (v[0]["format_version"].as_u64().unwrap(), h.model)
    };
    let (version, model) = header(&[]);
    assert_eq!((version, model.shared_expert_ffn), (1, None));
    let (version, model) = header(&["--shared-expert-ffn", "5632"]);
    assert_eq!((version, model.shared_expert_ffn), (3, Some(5632)));
    assert_eq!(model.layers[0].shared_experts, 1);
    // the flag needs --shared-experts
    let o = sim(&[
        "trace",
        "import",
        "--format",
        "csv",
        log,
        "--out",
        out,
        "--shared-expert-ffn",
        "5632",
    ]);
    assert_eq!(o.status.code(), Some(2));
}
