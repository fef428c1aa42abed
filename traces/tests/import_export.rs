//! Importers and exporters: round trips (import -> write -> read -> export -> import) and
//! the oracleGeneral records checked against a naive recomputation.

use std::path::PathBuf;
use traces::export::{export_csv, oracle_general_records, parse_oracle_general};
use traces::import_rows::{parse_csv, parse_jsonl};
use traces::{
    Header, LayerSpec, ModelSpec, Phase, PhaseSel, Provenance, RowImportOptions, SequenceData,
    SequenceInfo, TokenBlock, Trace, TraceError, TraceReader,
};

fn granite(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data/granite")
        .join(name)
}

/// Layer 0 dense, layers 1 and 2 with 6 experts top-2 / top-3; two sequences.
fn small(has_weights: bool) -> Trace {
    let model = ModelSpec {
        name: "unknown".into(),
        revision: None,
        layers: vec![
            LayerSpec {
                experts: 0,
                top_k: 0,
                shared_experts: 0,
            },
            LayerSpec {
                experts: 6,
                top_k: 2,
                shared_experts: 0,
            },
            LayerSpec {
                experts: 6,
                top_k: 3,
                shared_experts: 0,
            },
        ],
        hidden_size: None,
        expert_ffn: None,
        expert_matrices: traces::GATED_EXPERT_MATRICES,
        shared_expert_ffn: None,
    };
    let seqs = vec![
        SequenceInfo {
            name: "alpha".into(),
            prefill_tokens: 2,
            decode_tokens: 3,
        },
        SequenceInfo {
            name: "beta".into(),
            prefill_tokens: 0,
            decode_tokens: 2,
        },
    ];
    let mut n = 0u16;
    let mut block = |tokens: u64| {
        let (mut ids, mut w) = (Vec::new(), Vec::new());
        for _ in 0..tokens {
            ids.extend_from_slice(&[n % 6, (n + 2) % 6, (n + 1) % 6, (n + 3) % 6, (n + 5) % 6]);
            w.extend((0..5).map(|i| 0.1 * i as f32 + n as f32 / 3.0));
            n += 1;
        }
        TokenBlock {
            ids,
            weights: has_weights.then_some(w),
        }
    };
    let sequences = seqs
        .iter()
        .map(|s| SequenceData {
            prefill: block(s.prefill_tokens),
            decode: block(s.decode_tokens),
        })
        .collect();
    Trace {
        header: Header {
            model,
            provenance: Provenance::default(),
            sequences: seqs,
            has_weights,
            passes: None,
        },
        sequences,
    }
}

fn row_opts(num_experts: Option<u16>) -> RowImportOptions {
    RowImportOptions {
        num_experts,
        ..Default::default()
    }
}

/// Write `t` to a file, stream it to CSV, import the CSV.
fn csv_round_trip(t: &Trace, phases: PhaseSel, num_experts: Option<u16>) -> (String, Trace) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    traces::write_file(&path, t).unwrap();
    let mut reader = TraceReader::open(&path).unwrap();
    let mut csv = Vec::new();
    export_csv(&mut reader, phases, &mut csv).unwrap();
    let text = String::from_utf8(csv).unwrap();
    let back = parse_csv(text.as_bytes(), "t.csv", &row_opts(num_experts)).unwrap();
    // And the imported trace writes and reads back unchanged.
    let path2 = dir.path().join("t2.bin");
    traces::write_file(&path2, &back).unwrap();
    assert_eq!(traces::read_file(&path2).unwrap(), back);
    (text, back)
}

#[test]
fn csv_rows_are_the_documented_layout() {
    let (text, _) = csv_round_trip(&small(false), PhaseSel::All, Some(6));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "sequence,phase,token,layer,experts");
    // Token 0 of alpha (prefill): layer 1 = [0, 2], layer 2 = [1, 3, 5].
    assert_eq!(lines[1], "alpha,prefill,0,1,0 2");
    assert_eq!(lines[2], "alpha,prefill,0,2,1 3 5");
    // 7 tokens x 2 MoE layers + header.
    assert_eq!(lines.len(), 15);
    assert_eq!(lines[14], "beta,decode,1,2,1 3 5"); // token number 6
}

#[test]
fn csv_round_trip_keeps_every_selection_and_weight() {
    for w in [false, true] {
        let t = small(w);
        let (_, back) = csv_round_trip(&t, PhaseSel::All, Some(6));
        assert_eq!(back.header.model.layers, t.header.model.layers);
        assert_eq!(back.header.sequences, t.header.sequences);
        assert_eq!(back.sequences, t.sequences, "weights {w}");
        assert_eq!(back.header.has_weights, w);
    }
}

#[test]
fn csv_export_of_one_phase_imports_as_that_phase_only() {
    let t = small(false);
    let (_, back) = csv_round_trip(&t, PhaseSel::Decode, Some(6));
    let names: Vec<_> = back
        .header
        .sequences
        .iter()
        .map(|s| (s.name.as_str(), s.prefill_tokens, s.decode_tokens))
        .collect();
    assert_eq!(names, [("alpha", 0, 3), ("beta", 0, 2)]);
    assert_eq!(back.sequences[0].decode, t.sequences[0].decode);
    assert!(back.sequences[0].prefill.ids.is_empty());
}

#[test]
fn experts_default_to_largest_id_plus_one() {
    let (_, back) = csv_round_trip(&small(false), PhaseSel::All, None);
    // ids go up to 5.
    assert!(back.header.model.layers[1..].iter().all(|l| l.experts == 6));
}

#[test]
fn granite_json_to_bin_to_csv_to_bin_is_lossless() {
    let opts = traces::ImportOptions::default();
    let imported =
        traces::import_onnx_genai_json(granite("source/moe_expert_trace.json"), &opts).unwrap();
    let (_, back) = csv_round_trip(&imported.all, PhaseSel::All, Some(32));
    assert_eq!(back.sequences, imported.all.sequences);
    assert_eq!(back.header.sequences, imported.all.header.sequences);
    assert_eq!(back.header.model.layers, imported.all.header.model.layers);
}

/// An independent JSONL writer: one object per (token, MoE layer), in shuffled order.
fn jsonl_of(t: &Trace) -> String {
    let ks = t.keyspace();
    let mut lines = Vec::new();
    for (s, info) in t.header.sequences.iter().enumerate() {
        for (phase, name) in [(Phase::Prefill, "prefill"), (Phase::Decode, "decode")] {
            for tok in 0..t.tokens(s, phase) {
                for m in 0..ks.num_moe_layers() {
                    let ids = t.selection(&ks, s, phase, tok, m);
                    lines.push(format!(
                        r#"{{"sequence": "{}", "phase": "{name}", "token": {tok}, "layer": {}, "experts": {ids:?}}}"#,
                        info.name, ks.moe_layers[m]
                    ));
                }
            }
        }
    }
    // Deterministic shuffle: a stride coprime with the count, after the first row (which
    // fixes the first sequence's name) stays first.
    let n = lines.len();
    let mut out = vec![lines[0].clone()];
    let stride = (1..n).find(|k| *k > 1 && gcd(*k, n - 1) == 1).unwrap_or(1);
    for i in 0..n - 1 {
        out.push(lines[1 + (i * stride) % (n - 1)].clone());
    }
    out.join("\n") + "\n\n"
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[test]
fn jsonl_rows_in_any_order_import_exactly() {
    let t = small(false);
    let text = jsonl_of(&t);
    let back = parse_jsonl(text.as_bytes(), "t.jsonl", &row_opts(Some(6))).unwrap();
    assert_eq!(back.header.sequences, t.header.sequences);
    assert_eq!(back.sequences, t.sequences);
    assert_eq!(back.header.model.layers, t.header.model.layers);
}

#[test]
fn jsonl_phase_is_optional_and_numbers_name_sequences() {
    let text = "{\"sequence\": 7, \"token\": 0, \"layer\": 0, \"experts\": [3, 1]}\n\
                {\"sequence\": 7, \"token\": 1, \"layer\": 0, \"experts\": [0, 1], \"phase\": \"decode\"}\n";
    let t = parse_jsonl(text.as_bytes(), "t.jsonl", &row_opts(None)).unwrap();
    assert_eq!(
        t.header.sequences,
        vec![SequenceInfo {
            name: "7".into(),
            prefill_tokens: 0,
            decode_tokens: 2
        }]
    );
    assert_eq!(t.sequences[0].decode.ids, vec![3, 1, 0, 1]);
    assert_eq!(
        t.header.model.layers,
        vec![LayerSpec {
            experts: 4,
            top_k: 2,
            shared_experts: 0
        }]
    );
}

fn csv_err(text: &str) -> String {
    let e = parse_csv(text.as_bytes(), "bad.csv", &row_opts(None)).unwrap_err();
    assert!(
        matches!(e, TraceError::Import { .. } | TraceError::Geometry { .. }),
        "{e}"
    );
    e.to_string()
}

#[test]
fn row_import_errors_name_the_line_and_problem() {
    let h = "sequence,phase,token,layer,experts\n";
    let e = csv_err(&format!("{h}a,decode,1,0,1 2\n"));
    assert!(e.contains("token 1 present but token 0 missing"), "{e}");
    let e = csv_err(&format!(
        "{h}a,decode,0,0,1 2\na,decode,0,1,1 2\na,decode,1,0,1 2\n"
    ));
    assert!(e.contains("token 1: layer 1 missing"), "{e}");
    // a (sequence, phase, token, layer) given twice is a position that restarts at each
    // forward pass: the second pass (from line 4) lacks layer 1
    let e = csv_err(&format!(
        "{h}a,decode,0,0,1 2\na,decode,0,1,1 2\na,decode,0,0,3 4\n"
    ));
    assert!(
        e.contains("line 4") && e.contains("position 0 lacks layer 1"),
        "{e}"
    );
    let e = csv_err(&format!("{h}a,decode,0,0,1 2\na,decode,1,0,1 2 3\n"));
    assert!(
        e.contains("line 3") && e.contains("top-k must be constant"),
        "{e}"
    );
    let e = csv_err(&format!("{h}a,later,0,0,1 2\n"));
    assert!(e.contains("line 2") && e.contains("\"later\""), "{e}");
    let e = csv_err(&format!("{h}a,decode,0,0,1 x\n"));
    assert!(e.contains("\"x\" is not a valid number"), "{e}");
    let e = csv_err(&format!("{h}a,decode,0,0,1 70000\n"));
    assert!(
        e.contains("\"70000\" is out of range: expert ids run from 0 to 65534"),
        "{e}"
    );
    let e = csv_err(&format!("{h}a,decode,0,0,1 2\na,decode,1,0,1 65535\n"));
    assert!(
        e.contains("line 3: expert id 65535 needs 65,536 experts"),
        "{e}"
    );
    let e = csv_err(&format!("{h}a,decode,0,18446744073709551615,1 2\n"));
    assert!(
        e.contains("line 2: layer 18446744073709551615 is beyond the 65536 layers"),
        "{e}"
    );
    let e = csv_err(&format!("{h}a,decode,0,0,2 2\n"));
    assert!(e.contains("repeated"), "{e}");
    let e = csv_err("sequence,token,layer\na,0,0\n");
    assert!(e.contains("experts"), "{e}");
    let e = csv_err(h);
    assert!(e.contains("no rows"), "{e}");
    let e = parse_csv(
        format!("{h}a,decode,0,0,1 7\n").as_bytes(),
        "bad.csv",
        &row_opts(Some(4)),
    )
    .unwrap_err();
    assert!(e.to_string().contains("expert id 7 >= 4 experts"), "{e}");
    // with the row's line and the valid ids (the id is on the second data row, line 3)
    let e = parse_csv(
        format!("{h}a,decode,0,0,1 2\na,decode,1,0,3 7\n").as_bytes(),
        "bad.csv",
        &row_opts(Some(4)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("line 3") && e.contains("ids run from 0 to 3"),
        "{e}"
    );
    // a negative id names the same range
    let e = parse_csv(
        format!("{h}a,decode,0,0,1 -1\n").as_bytes(),
        "bad.csv",
        &row_opts(Some(4)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("\"-1\" is out of range: expert ids run from 0 to 3 (--num-experts)"),
        "{e}"
    );
    let e = parse_jsonl("{\"sequence\": \"a\", \"token\": 0, \"layer\": 0, \"experts\": [1], \"weights\": [0.5]}\n{\"sequence\": \"a\", \"token\": 1, \"layer\": 0, \"experts\": [2]}\n".as_bytes(), "bad.jsonl", &row_opts(None)).unwrap_err();
    assert!(
        e.to_string().contains("line 2") && e.to_string().contains("every row or on none"),
        "{e}"
    );
    let e = parse_jsonl(
        "{\"sequence\": \"a\", \"tokn\": 0}\n".as_bytes(),
        "bad.jsonl",
        &row_opts(None),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("bad.jsonl: line 1:"), "{e}");
}

/// Naive next access: scan forward for the same object; 1-based position, or -1.
fn naive_next(ids: &[u64]) -> Vec<i64> {
    (0..ids.len())
        .map(|i| {
            (i + 1..ids.len())
                .find(|&j| ids[j] == ids[i])
                .map(|j| j as i64 + 1)
                .unwrap_or(-1)
        })
        .collect()
}

#[test]
fn oracle_general_records_of_granite_prose_decode() {
    let t = traces::read_file(granite("prose.bin")).unwrap();
    let recs = oracle_general_records(&t, PhaseSel::Decode, 1).unwrap();
    assert_eq!(recs.len(), 12_288);
    // Request order: token, MoE layer, router order; key = layer x 32 + expert.
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(granite("source/moe_expert_trace.json")).unwrap(),
    )
    .unwrap();
    let decode = json["prompts"]["english_prose"]["decode"]
        .as_array()
        .unwrap();
    let mut want_ids = Vec::new();
    let mut want_time = Vec::new();
    for (step, layers) in decode.iter().enumerate() {
        for (l, sel) in layers.as_array().unwrap().iter().enumerate() {
            for e in sel.as_array().unwrap() {
                want_ids.push(l as u64 * 32 + e.as_u64().unwrap());
                want_time.push(step as u32);
            }
        }
    }
    let ids: Vec<u64> = recs.iter().map(|r| r.obj_id).collect();
    assert_eq!(ids, want_ids);
    assert_eq!(recs.iter().map(|r| r.time).collect::<Vec<_>>(), want_time);
    assert!(recs.iter().all(|r| r.size == 1));
    assert_eq!(
        recs.iter().map(|r| r.next_access_vtime).collect::<Vec<_>>(),
        naive_next(&ids)
    );
}

#[test]
fn oracle_general_file_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.bin");
    let n = traces::export::export_oracle_general_file(
        granite("all.bin"),
        PhaseSel::All,
        3 * 1024 * 512 * 2,
        &out,
    )
    .unwrap();
    // (39 + 44 + 29 + 3 x 64) tokens x 24 layers x top-8.
    assert_eq!(n, 304 * 24 * 8);
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(bytes.len(), 304 * 24 * 8 * 24);
    let recs = parse_oracle_general(&bytes).unwrap();
    let t = traces::read_file(granite("all.bin")).unwrap();
    assert_eq!(
        recs,
        oracle_general_records(&t, PhaseSel::All, 3_145_728).unwrap()
    );
    // First record, byte by byte: time 0, key of (layer 0, first prefill id), size, next.
    let first = &bytes[..24];
    assert_eq!(u32::from_le_bytes(first[0..4].try_into().unwrap()), 0);
    assert_eq!(
        u64::from_le_bytes(first[4..12].try_into().unwrap()),
        t.sequences[0].prefill.ids[0] as u64
    );
    assert_eq!(
        u32::from_le_bytes(first[12..16].try_into().unwrap()),
        3_145_728
    );
    // The last token's time is 303.
    assert_eq!(recs.last().unwrap().time, 303);
    assert_eq!(recs.last().unwrap().next_access_vtime, -1);
    assert!(parse_oracle_general(&bytes[..25]).is_err());
}

/// The streamed oracleGeneral writer against a naive one: every request collected forward,
/// its next access found by scanning ahead, then encoded field by field; with chunks of
/// 1, 7 (not dividing the count) and the default size, and through the file exporter.
#[test]
fn streamed_oracle_general_is_byte_identical_to_a_naive_writer() {
    let t = traces::read_file(granite("all.bin")).unwrap();
    let ks = t.keyspace();
    let (mut ids, mut times) = (Vec::new(), Vec::new());
    let mut time = 0u32;
    for s in 0..t.sequences.len() {
        for phase in [Phase::Prefill, Phase::Decode] {
            for tok in 0..t.tokens(s, phase) {
                for m in 0..ks.num_moe_layers() {
                    for &e in t.selection(&ks, s, phase, tok, m) {
                        ids.push(ks.key(m, e) as u64);
                        times.push(time);
                    }
                }
                time += 1;
            }
        }
    }
    let next = naive_next(&ids);
    let mut want = Vec::new();
    for i in 0..ids.len() {
        want.extend_from_slice(&times[i].to_le_bytes());
        want.extend_from_slice(&ids[i].to_le_bytes());
        want.extend_from_slice(&5u32.to_le_bytes());
        want.extend_from_slice(&next[i].to_le_bytes());
    }
    assert_eq!(want.len(), 304 * 24 * 8 * 24);
    for chunk in [1, 7, traces::export::ORACLE_CHUNK_RECORDS] {
        let mut out = std::io::Cursor::new(Vec::new());
        let n =
            traces::export::write_oracle_general(&t, PhaseSel::All, 5, &mut out, chunk).unwrap();
        assert_eq!(n, ids.len() as u64);
        assert!(out.get_ref() == &want, "chunk of {chunk} records");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.bin");
    traces::export::export_oracle_general_file(granite("all.bin"), PhaseSel::All, 5, &path)
        .unwrap();
    assert!(std::fs::read(&path).unwrap() == want);
}
