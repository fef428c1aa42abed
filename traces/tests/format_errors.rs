//! The binary format: round trips, one test per validation error, the atomic writer, and
//! property tests feeding random, truncated and corrupted bytes to both loaders.
//!
//! Files with specific defects are assembled here byte by byte, independently of the
//! writer, following the layout in FORMAT.md.

use proptest::prelude::*;
use traces::format::{encode_header, MAX_HEADER_BYTES};
use traces::{
    Header, LayerSpec, ModelSpec, Phase, Provenance, SequenceData, SequenceInfo, TokenBlock, Trace,
    TraceError, TraceReader, TraceWriter,
};

/// Layers: 0 dense, 1 with 4 experts top-2, 2 with 8 experts top-3 (5 ids per token).
fn model() -> ModelSpec {
    ModelSpec {
        name: "tiny".into(),
        revision: Some("r1".into()),
        layers: vec![
            LayerSpec {
                experts: 0,
                top_k: 0,
                shared_experts: 1,
            },
            LayerSpec {
                experts: 4,
                top_k: 2,
                shared_experts: 0,
            },
            LayerSpec {
                experts: 8,
                top_k: 3,
                shared_experts: 0,
            },
        ],
        hidden_size: Some(64),
        expert_ffn: None,
        expert_matrices: traces::GATED_EXPERT_MATRICES,
        shared_expert_ffn: None,
    }
}

fn header(has_weights: bool) -> Header {
    Header {
        model: model(),
        provenance: Provenance {
            source: "test".into(),
            prompt_labels: vec!["a".into(), "b".into()],
            ..Default::default()
        },
        sequences: vec![
            SequenceInfo {
                name: "a".into(),
                prefill_tokens: 2,
                decode_tokens: 3,
            },
            SequenceInfo {
                name: "b".into(),
                prefill_tokens: 0,
                decode_tokens: 2,
            },
        ],
        has_weights,
        passes: None,
    }
}

/// A valid trace: token number n (payload order) selects layer1 = [n%4, (n+1)%4],
/// layer2 = [n%8, (n+3)%8, (n+5)%8]; weights are n + i/10.
fn trace(has_weights: bool) -> Trace {
    let h = header(has_weights);
    let mut n = 0u16;
    let mut block = |tokens: u64| {
        let mut ids = Vec::new();
        let mut w = Vec::new();
        for _ in 0..tokens {
            let rec = [n % 4, (n + 1) % 4, n % 8, (n + 3) % 8, (n + 5) % 8];
            ids.extend_from_slice(&rec);
            w.extend((0..5).map(|i| n as f32 + i as f32 / 10.0));
            n += 1;
        }
        TokenBlock {
            ids,
            weights: has_weights.then_some(w),
        }
    };
    let sequences = h
        .sequences
        .iter()
        .map(|s| SequenceData {
            prefill: block(s.prefill_tokens),
            decode: block(s.decode_tokens),
        })
        .collect();
    Trace {
        header: h,
        sequences,
    }
}

/// The 7 token records of `trace(false)` as raw payload bytes.
fn payload(tr: &Trace) -> Vec<u8> {
    let mut p = Vec::new();
    for s in &tr.sequences {
        for b in [&s.prefill, &s.decode] {
            for rec in b.ids.chunks(5) {
                for id in rec {
                    p.extend_from_slice(&id.to_le_bytes());
                }
                if let Some(w) = &b.weights {
                    let i = b.ids.as_ptr();
                    let start = (rec.as_ptr() as usize - i as usize) / 2;
                    for x in &w[start..start + 5] {
                        p.extend_from_slice(&x.to_le_bytes());
                    }
                }
            }
        }
    }
    p
}

/// Assemble a file from header bytes and payload bytes, per FORMAT.md.
fn assemble(header_bytes: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut f = b"MOETRACE".to_vec();
    f.extend_from_slice(&1u32.to_le_bytes());
    f.extend_from_slice(&(header_bytes.len() as u32).to_le_bytes());
    f.extend_from_slice(&crc32fast::hash(header_bytes).to_le_bytes());
    f.extend_from_slice(header_bytes);
    f.extend_from_slice(payload);
    f.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    f
}

fn valid_file() -> Vec<u8> {
    let tr = trace(false);
    assemble(&encode_header(&tr.header).unwrap(), &payload(&tr))
}

fn read(bytes: &[u8]) -> Result<Trace, TraceError> {
    traces::read_bytes(bytes, "t.bin")
}

/// The file loader on the same bytes.
fn read_via_file(bytes: &[u8]) -> Result<Trace, TraceError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    std::fs::write(&path, bytes).unwrap();
    traces::read_file(&path)
}

#[test]
fn assembled_file_equals_written_file_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    for w in [false, true] {
        let tr = trace(w);
        let path = dir.path().join(format!("t{w}.bin"));
        traces::write_file(&path, &tr).unwrap();
        let written = std::fs::read(&path).unwrap();
        assert_eq!(
            written,
            assemble(&encode_header(&tr.header).unwrap(), &payload(&tr))
        );
        assert_eq!(traces::read_file(&path).unwrap(), tr);
        assert_eq!(read(&written).unwrap(), tr);
        // Only the finished file is left in the directory (the temporary one was renamed).
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn streaming_reader_yields_positions_in_payload_order() {
    let tr = trace(true);
    let bytes = assemble(&encode_header(&tr.header).unwrap(), &payload(&tr));
    let mut r = TraceReader::from_reader(&bytes[..], bytes.len() as u64, "t.bin").unwrap();
    let mut seen = Vec::new();
    while let Some(t) = r.next_token().unwrap() {
        seen.push((
            t.pos.sequence,
            t.pos.phase,
            t.pos.token,
            t.ids.to_vec(),
            t.selection(1).to_vec(),
            t.selection_weights(0).unwrap().to_vec(),
        ));
    }
    assert!(r.next_token().unwrap().is_none(), "stays finished");
    let want_pos = [
        (0, Phase::Prefill, 0),
        (0, Phase::Prefill, 1),
        (0, Phase::Decode, 0),
        (0, Phase::Decode, 1),
        (0, Phase::Decode, 2),
        (1, Phase::Decode, 0),
        (1, Phase::Decode, 1),
    ];
    assert_eq!(seen.len(), 7);
    for (n, (got, want)) in seen.iter().zip(want_pos).enumerate() {
        let n16 = n as u16;
        assert_eq!((got.0, got.1, got.2), want);
        assert_eq!(
            got.3,
            vec![
                n16 % 4,
                (n16 + 1) % 4,
                n16 % 8,
                (n16 + 3) % 8,
                (n16 + 5) % 8
            ]
        );
        assert_eq!(got.4, vec![n16 % 8, (n16 + 3) % 8, (n16 + 5) % 8]);
        assert_eq!(got.5, vec![n as f32, n as f32 + 0.1]);
    }
}

#[test]
fn streaming_writer_round_trip_and_atomicity() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.bin");
    let tr = trace(false);
    let mut w = TraceWriter::create(&path, &tr.header).unwrap();
    let records: Vec<&[u16]> = tr
        .sequences
        .iter()
        .flat_map(|s| s.prefill.ids.chunks(5).chain(s.decode.ids.chunks(5)))
        .collect();
    for rec in &records[..6] {
        w.write_token(rec, None).unwrap();
    }
    assert!(!path.exists(), "nothing at the destination before finish");
    // Finishing early is refused and leaves nothing behind.
    let err = w.finish().unwrap_err();
    assert!(
        err.to_string().contains("sequence 1 decode token 1"),
        "{err}"
    );
    assert!(!path.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "temporary file removed"
    );

    // Dropped without finish: no file.
    let mut w = TraceWriter::create(&path, &tr.header).unwrap();
    w.write_token(records[0], None).unwrap();
    drop(w);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let mut w = TraceWriter::create(&path, &tr.header).unwrap();
    for rec in &records {
        w.write_token(rec, None).unwrap();
    }
    let extra = w.write_token(records[0], None).unwrap_err();
    assert!(
        extra.to_string().contains("more than the header declares"),
        "{extra}"
    );
    w.finish().unwrap();
    assert_eq!(traces::read_file(&path).unwrap(), tr);
}

#[test]
fn writer_refuses_bad_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.bin");
    let mut w = TraceWriter::create(&path, &header(false)).unwrap();
    let e = w.write_token(&[0, 1, 2, 3], None).unwrap_err();
    assert!(
        e.to_string()
            .contains("4 ids given, a token record holds 5"),
        "{e}"
    );
    let e = w.write_token(&[0, 4, 0, 1, 2], None).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::IdOutOfRange {
                layer: 1,
                id: 4,
                experts: 4,
                ..
            }
        ),
        "{e}"
    );
    let e = w.write_token(&[0, 1, 7, 2, 7], None).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::RepeatedId {
                layer: 2,
                id: 7,
                ..
            }
        ),
        "{e}"
    );
    let e = w
        .write_token(&[0, 1, 2, 3, 4], Some(&[0.0; 5]))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("weights given but the header declares none"),
        "{e}"
    );
    let mut hw = TraceWriter::create(dir.path().join("x.bin"), &header(true)).unwrap();
    let e = hw.write_token(&[0, 1, 2, 3, 4], None).unwrap_err();
    assert!(e.to_string().contains("declares router weights"), "{e}");
}

#[test]
fn writer_into_missing_directory_names_the_directory() {
    let e = TraceWriter::create("/nonexistent-dir-for-test/x.bin", &header(false)).unwrap_err();
    assert!(matches!(e, TraceError::NoDirectory { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("/nonexistent-dir-for-test/x.bin"), "{e}");
    assert!(
        text.contains("the directory /nonexistent-dir-for-test does not exist"),
        "{e}"
    );
    assert!(
        !text.contains(".trace-"),
        "the temporary name stays hidden: {e}"
    );
}

#[test]
fn writer_onto_a_directory_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let e = TraceWriter::create(dir.path(), &header(false)).unwrap_err();
    assert!(matches!(e, TraceError::OutputIsDirectory { .. }), "{e}");
    assert!(
        e.to_string().contains("names a directory, not a file"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bad_magic() {
    let mut f = valid_file();
    f[0] = b'X';
    let e = read(&f).unwrap_err();
    assert!(matches!(e, TraceError::BadMagic { .. }), "{e}");
    assert!(
        e.to_string().starts_with("t.bin: not a MoE trace file"),
        "{e}"
    );
    // A short text file is not a trace either.
    assert!(matches!(
        read(b"hello").unwrap_err(),
        TraceError::BadMagic { .. }
    ));
}

#[test]
fn unsupported_version() {
    let mut f = valid_file();
    f[8..12].copy_from_slice(&4u32.to_le_bytes());
    let e = read(&f).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::UnsupportedVersion {
                found: 4,
                supported: 3,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn header_length_over_the_cap() {
    let mut f = valid_file();
    f[12..16].copy_from_slice(&((MAX_HEADER_BYTES + 1) as u32).to_le_bytes());
    let e = read(&f).unwrap_err();
    assert!(matches!(e, TraceError::HeaderTooLarge { .. }), "{e}");
}

#[test]
fn header_length_beyond_the_file() {
    let mut f = valid_file();
    f[12..16].copy_from_slice(&100_000u32.to_le_bytes());
    let e = read(&f).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::Truncated {
                needed: 100_024,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn header_checksum_mismatch() {
    let mut f = valid_file();
    f[21] ^= 0x40;
    let e = read(&f).unwrap_err();
    assert!(matches!(e, TraceError::HeaderChecksum { .. }), "{e}");
}

#[test]
fn header_that_does_not_decode() {
    let garbage = [0xffu8; 16];
    let e = read(&assemble(&garbage, &[])).unwrap_err();
    assert!(matches!(e, TraceError::HeaderDecode { len: 16, .. }), "{e}");
    // A valid header followed by extra bytes inside the declared header length.
    let mut hb = encode_header(&header(false)).unwrap();
    hb.push(0);
    let e = read(&assemble(&hb, &payload(&trace(false)))).unwrap_err();
    assert!(e.to_string().contains("decodes from"), "{e}");
}

#[test]
fn invalid_geometry() {
    let cases: [(LayerSpec, &str); 2] = [
        (
            LayerSpec {
                experts: 4,
                top_k: 5,
                shared_experts: 0,
            },
            "selects top-5 of only 4 experts",
        ),
        (
            LayerSpec {
                experts: 0,
                top_k: 2,
                shared_experts: 0,
            },
            "has no experts but top-k 2",
        ),
    ];
    // Bounds on what a header may claim: layer count, sizes, 3 x hidden x FFN within u64.
    type Edit = fn(&mut Header);
    let huge: [(Edit, &str); 3] = [
        (
            |h| h.model.layers = vec![h.model.layers[1].clone(); 65_537],
            "65537 layers exceed the 65536 this format allows",
        ),
        (|h| h.model.hidden_size = Some(0), "the hidden size is 0"),
        (
            |h| {
                h.model.hidden_size = Some(u32::MAX);
                h.model.expert_ffn = Some(u32::MAX);
            },
            "overflow 64 bits",
        ),
    ];
    for (edit, msg) in huge {
        let mut h = header(false);
        edit(&mut h);
        let e = read(&assemble(&encode_header(&h).unwrap(), &[])).unwrap_err();
        assert!(e.to_string().contains(msg), "{e}");
    }
    for (layer, msg) in cases {
        let mut h = header(false);
        h.model.layers[1] = layer;
        let e = read(&assemble(&encode_header(&h).unwrap(), &[])).unwrap_err();
        assert!(matches!(e, TraceError::Geometry { .. }), "{e}");
        assert!(e.to_string().contains(msg), "{e}");
        assert!(TraceWriter::create("/tmp/never-written.bin", &h).is_err());
    }
    let mut h = header(false);
    h.model.layers = vec![LayerSpec {
        experts: 0,
        top_k: 0,
        shared_experts: 0,
    }];
    let e = read(&assemble(&encode_header(&h).unwrap(), &[])).unwrap_err();
    assert!(e.to_string().contains("none with routed experts"), "{e}");
    // 65,538 layers of 65,535 experts would overflow the u32 key numbering; the layer bound
    // refuses them first.
    let mut h = header(false);
    h.model.layers = vec![
        LayerSpec {
            experts: 65_535,
            top_k: 1,
            shared_experts: 0,
        };
        65_538
    ];
    let e = read(&assemble(&encode_header(&h).unwrap(), &[])).unwrap_err();
    assert!(
        e.to_string().contains("65538 layers exceed the 65536"),
        "{e}"
    );
}

#[test]
fn header_claiming_a_trillion_tokens_in_a_small_file() {
    let mut h = header(false);
    h.sequences[0].decode_tokens = 1_000_000_000_000;
    let f = assemble(&encode_header(&h).unwrap(), &[0u8; 100]);
    assert!(f.len() < 1024);
    let e = read(&f).unwrap_err();
    // 10^12 + 4 tokens x 5 ids x 2 bytes.
    assert!(
        matches!(
            e,
            TraceError::PayloadSize {
                expected: 10_000_000_000_040,
                found: 100,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("truncated"), "{e}");
}

#[test]
fn truncated_payload() {
    let f = valid_file();
    let e = read(&f[..f.len() - 1]).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::PayloadSize {
                expected: 70,
                found: 69,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn trailing_bytes() {
    let mut f = valid_file();
    f.extend_from_slice(&[0, 0]);
    let e = read(&f).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::PayloadSize {
                expected: 70,
                found: 72,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("trailing bytes"), "{e}");
}

#[test]
fn id_out_of_range_names_the_position() {
    let tr = trace(false);
    let hb = encode_header(&tr.header).unwrap();
    let mut p = payload(&tr);
    // Token 3 of the payload = sequence 0, decode token 1; its layer-2 ids are ids 2..5 of
    // the record; put 8 (layer 2 has 8 experts) in the second of them.
    let at = 3 * 10 + 3 * 2;
    p[at..at + 2].copy_from_slice(&8u16.to_le_bytes());
    let f = assemble(&hb, &p);
    let e = read(&f).unwrap_err();
    let offset = (20 + hb.len() + at) as u64;
    match &e {
        TraceError::IdOutOfRange {
            pos,
            layer,
            id,
            experts,
            offset: o,
            ..
        } => {
            assert_eq!((pos.sequence, pos.phase, pos.token), (0, Phase::Decode, 1));
            assert_eq!((*layer, *id, *experts, *o), (2, 8, 8, Some(offset)));
        }
        other => panic!("wrong error {other}"),
    }
    assert!(
        e.to_string().contains("sequence 0 decode token 1 layer 2"),
        "{e}"
    );
}

#[test]
fn repeated_id_names_the_position() {
    let tr = trace(false);
    let hb = encode_header(&tr.header).unwrap();
    let mut p = payload(&tr);
    // Token 6 = sequence 1 decode token 1; layer 1 is [6%4, 7%4] = [2, 3]: make it [2, 2].
    let at = 6 * 10 + 2;
    p[at..at + 2].copy_from_slice(&2u16.to_le_bytes());
    let e = read(&assemble(&hb, &p)).unwrap_err();
    match &e {
        TraceError::RepeatedId {
            pos,
            layer,
            id,
            offset,
            ..
        } => {
            assert_eq!((pos.sequence, pos.phase, pos.token), (1, Phase::Decode, 1));
            assert_eq!(
                (*layer, *id, *offset),
                (1, 2, Some((20 + hb.len() + at) as u64))
            );
        }
        other => panic!("wrong error {other}"),
    }
}

#[test]
fn payload_checksum_mismatch() {
    let mut f = valid_file();
    let n = f.len();
    f[n - 1] ^= 1;
    let e = read(&f).unwrap_err();
    assert!(matches!(e, TraceError::Checksum { .. }), "{e}");
    // A payload change that keeps every id valid is caught by the checksum too:
    // token 0's layer-1 ids [0, 1] become [0, 2].
    let tr = trace(false);
    let hb = encode_header(&tr.header).unwrap();
    let good = assemble(&hb, &payload(&tr));
    let mut bad = good.clone();
    bad[20 + hb.len() + 2] = 2;
    let e = read(&bad).unwrap_err();
    assert!(matches!(e, TraceError::Checksum { .. }), "{e}");
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let e = traces::read_file("/no/such/trace.bin").unwrap_err();
    assert!(matches!(e, TraceError::Io { .. }));
    assert!(e.to_string().contains("/no/such/trace.bin"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_rejected(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        prop_assert!(read(&bytes).is_err());
        prop_assert!(read_via_file(&bytes).is_err());
    }

    #[test]
    fn random_bytes_after_a_valid_preamble_are_rejected(
        hlen in 0u32..600, tail in proptest::collection::vec(any::<u8>(), 0..512)
    ) {
        let mut f = b"MOETRACE".to_vec();
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&hlen.to_le_bytes());
        f.extend_from_slice(&tail);
        prop_assert!(read(&f).is_err());
        let mut r = TraceReader::from_reader(&f[..], f.len() as u64, "t.bin");
        if let Ok(r) = r.as_mut() { while r.next_token().transpose().is_some() {} }
    }

    #[test]
    fn every_truncation_is_rejected(cut in 0usize..1000) {
        for w in [false, true] {
            let tr = trace(w);
            let f = assemble(&encode_header(&tr.header).unwrap(), &payload(&tr));
            let cut = cut % f.len();
            prop_assert!(read(&f[..cut]).is_err());
            prop_assert!(read_via_file(&f[..cut]).is_err());
        }
    }

    #[test]
    fn every_single_byte_corruption_is_rejected(at in 0usize..1000, xor in 1u8..=255) {
        let mut f = valid_file();
        let at = at % f.len();
        f[at] ^= xor;
        prop_assert!(read(&f).is_err());
    }

    #[test]
    fn random_headers_with_valid_checksums_never_panic(
        hb in proptest::collection::vec(any::<u8>(), 0..200),
        p in proptest::collection::vec(any::<u8>(), 0..200)
    ) {
        let _ = read(&assemble(&hb, &p));
    }
}
