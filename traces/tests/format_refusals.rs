//! Every refusal that `traces/FORMAT.md` lists in its validation table, one file each: the
//! table's ids and this file's cases must be the same set, and each case's bytes must be
//! refused with the error the table names.
//!
//! Each bad file starts from a valid one written by `TraceWriter`; the defect is then made by
//! hand in the bytes (or in the header before it is encoded), with the header CRC recomputed
//! where the defect lies beyond it, so that each file reaches the check it is meant for.

use std::collections::BTreeSet;
use traces::format::{encode_header, MAGIC};
use traces::{Header, LayerSpec, ModelSpec, Provenance, SequenceInfo, TraceError, TraceWriter};

/// Two MoE layers (4 experts top-2, 8 experts top-3) after one dense layer; 3 decode tokens.
fn good_header() -> Header {
    let moe = |experts, top_k| LayerSpec {
        experts,
        top_k,
        shared_experts: 0,
    };
    Header {
        model: ModelSpec {
            name: "refusals".into(),
            revision: None,
            layers: vec![moe(0, 0), moe(4, 2), moe(8, 3)],
            hidden_size: Some(16),
            expert_ffn: Some(8),
            expert_matrices: traces::GATED_EXPERT_MATRICES,
            shared_expert_ffn: None,
        },
        provenance: Provenance::default(),
        sequences: vec![SequenceInfo {
            name: "s".into(),
            prefill_tokens: 0,
            decode_tokens: 3,
        }],
        has_weights: false,
        passes: None,
    }
}

/// The valid file of `good_header`: token n selects [n, n+1] of 4 and [n, n+2, n+4] of 8.
fn good_file() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("good.bin");
    let mut w = TraceWriter::create(&path, &good_header()).unwrap();
    for n in 0..3u16 {
        w.write_token(&[n, n + 1, n, n + 2, n + 4], None).unwrap();
    }
    w.finish().unwrap();
    std::fs::read(path).unwrap()
}

/// Header length field of a file.
fn header_len(f: &[u8]) -> usize {
    u32::from_le_bytes(f[12..16].try_into().unwrap()) as usize
}

/// `f` with its header replaced by `hb` (length and CRC fields updated, payload kept).
fn with_header_bytes(f: &[u8], hb: &[u8]) -> Vec<u8> {
    let rest = &f[20 + header_len(f)..];
    let mut out = f[..8 + 4].to_vec();
    out.extend_from_slice(&(hb.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(hb).to_le_bytes());
    out.extend_from_slice(hb);
    out.extend_from_slice(rest);
    out
}

/// The good file with `edit` applied to its header (re-encoded; payload kept).
fn with_header(edit: impl FnOnce(&mut Header)) -> Vec<u8> {
    let mut h = good_header();
    edit(&mut h);
    with_header_bytes(&good_file(), &encode_header(&h).unwrap())
}

/// The good file with the payload id at index `i` (u16 number i of the payload) set to `id`,
/// the payload CRC recomputed so that only the id check can refuse it.
fn with_payload_id(i: usize, id: u16) -> Vec<u8> {
    let mut f = good_file();
    let start = 20 + header_len(&f);
    let end = f.len() - 4;
    f[start + 2 * i..start + 2 * i + 2].copy_from_slice(&id.to_le_bytes());
    let crc = crc32fast::hash(&f[start..end]);
    f[end..].copy_from_slice(&crc.to_le_bytes());
    f
}

/// A reader whose source yields only the first `cut` bytes of `f` while claiming all of it.
fn read_shrunk(f: &[u8], cut: usize) -> Result<(), TraceError> {
    let r = traces::TraceReader::from_reader(&f[..cut], f.len() as u64, "shrunk.bin")?;
    r.into_trace().map(|_| ())
}

fn read(f: &[u8]) -> Result<(), TraceError> {
    traces::read_bytes(f, "case.bin").map(|_| ())
}

/// The variant name of an error, as FORMAT.md's table writes it.
fn variant(e: &TraceError) -> &'static str {
    match e {
        TraceError::Io { .. } => "Io",
        TraceError::BadMagic { .. } => "BadMagic",
        TraceError::UnsupportedVersion { .. } => "UnsupportedVersion",
        TraceError::Truncated { .. } => "Truncated",
        TraceError::HeaderTooLarge { .. } => "HeaderTooLarge",
        TraceError::HeaderChecksum { .. } => "HeaderChecksum",
        TraceError::HeaderDecode { .. } => "HeaderDecode",
        TraceError::Geometry { .. } => "Geometry",
        TraceError::Passes { .. } => "Passes",
        TraceError::PayloadSize { .. } => "PayloadSize",
        TraceError::IdOutOfRange { .. } => "IdOutOfRange",
        TraceError::RepeatedId { .. } => "RepeatedId",
        TraceError::Checksum { .. } => "Checksum",
        TraceError::Invalid { .. } => "Invalid",
        TraceError::Import { .. } => "Import",
        TraceError::NoSpace { .. } => "NoSpace",
        TraceError::NoDirectory { .. } => "NoDirectory",
        TraceError::OutputIsDirectory { .. } => "OutputIsDirectory",
    }
}

/// Each case: the table id, the outcome of reading its bytes, and a phrase its message holds.
fn cases() -> Vec<(&'static str, Result<(), TraceError>, &'static str)> {
    let good = good_file();
    let hl = header_len(&good);
    let mut v = Vec::new();
    let mut push = |id, r, phrase| v.push((id, r, phrase));
    push(
        "magic",
        read(b"PK\x03\x04 a zip file"),
        "not a MoE trace file",
    );
    push("preamble", read(&MAGIC), "preamble");
    let mut f = good.clone();
    f[8] = 4;
    push("version", read(&f), "version 4 is not supported");
    let mut f = good.clone();
    f[12..16].copy_from_slice(&((64u32 << 20) + 1).to_le_bytes());
    push("header-cap", read(&f), "exceeds the 67108864-byte cap");
    push(
        "header-fits",
        read(&good[..20 + hl]),
        "header and payload checksum",
    );
    let mut f = good.clone();
    f[20] ^= 1;
    push("header-crc", read(&f), "header checksum mismatch");
    // The model name's length byte says 9 bytes; make the first one an invalid UTF-8 byte.
    let mut hb = good[20..20 + hl].to_vec();
    hb[1] = 0xff;
    push(
        "header-decode",
        read(&with_header_bytes(&good, &hb)),
        "is not valid UTF-8",
    );
    let mut hb = good[20..20 + hl].to_vec();
    hb.push(0);
    push(
        "header-exact",
        read(&with_header_bytes(&good, &hb)),
        "decodes from",
    );
    let layer = |experts, top_k| LayerSpec {
        experts,
        top_k,
        shared_experts: 0,
    };
    push(
        "layers-cap",
        read(&with_header(|h| h.model.layers = vec![layer(4, 2); 65_537])),
        "65537 layers exceed the 65536",
    );
    push(
        "dense-top-k",
        read(&with_header(|h| h.model.layers[0] = layer(0, 1))),
        "has no experts but top-k 1",
    );
    push(
        "moe-top-k-0",
        read(&{
            // a version-1 file (the good file's preamble) whose header, in the version-1
            // layout, has an unrecorded MoE layer: only version 2 may say that
            let mut h = good_header();
            h.model.layers[1] = layer(4, 0);
            with_header_bytes(
                &good_file(),
                &traces::format::encode_header_as(&h, 1).unwrap(),
            )
        }),
        "top-k 0",
    );
    push(
        "top-k-above-experts",
        read(&with_header(|h| h.model.layers[1] = layer(4, 5))),
        "selects top-5 of only 4 experts",
    );
    push(
        "no-moe-layer",
        read(&with_header(|h| h.model.layers = vec![layer(0, 0); 3])),
        "none with routed experts",
    );
    push(
        "hidden-0",
        read(&with_header(|h| h.model.hidden_size = Some(0))),
        "the hidden size is 0",
    );
    push(
        "ffn-0",
        read(&with_header(|h| h.model.expert_ffn = Some(0))),
        "the expert FFN size is 0",
    );
    // 3 x 2^32-1 x 2^32-1 > 2^64 - 1, while 2 x ... would fit: the factor 3 matters.
    push(
        "params-overflow",
        read(&with_header(|h| {
            h.model.hidden_size = Some(u32::MAX);
            h.model.expert_ffn = Some(u32::MAX);
        })),
        "overflow 64 bits",
    );
    // the one sequence has 3 tokens; passes of 2 and 2 take 4
    let pass = |tokens| traces::Pass {
        runs: vec![traces::PassRun {
            sequence: 0,
            tokens,
        }],
    };
    // a version-3 header (the good file's preamble says 1)
    let mut f = with_header(|h| h.passes = Some(vec![pass(2), pass(2)]));
    f[8] = 3;
    push(
        "passes-cover",
        read(&f),
        "the passes hold 4 tokens of sequence 0",
    );
    let mut f = good.clone();
    f.remove(f.len() - 5);
    push("payload-short", read(&f), "truncated");
    let mut f = good.clone();
    f.push(0);
    push("payload-long", read(&f), "trailing bytes");
    push(
        "id-range",
        read(&with_payload_id(7, 8)),
        "expert id 8 is out of range",
    );
    push(
        "id-repeat",
        read(&with_payload_id(1, 0)),
        "expert id 0 is repeated",
    );
    let mut f = good.clone();
    let last = f.len() - 1;
    f[last] ^= 1;
    push("payload-crc", read(&f), "payload checksum mismatch");
    push(
        "source-shrank",
        read_shrunk(&good, good.len() - 3),
        "truncated",
    );
    v
}

/// The rows of FORMAT.md's refusal table: (id, error variant).
fn documented() -> Vec<(String, String)> {
    let doc = include_str!("../FORMAT.md");
    let start = doc
        .find("<!-- refusals")
        .expect("the refusal table's start marker");
    let end = doc.find("<!-- /refusals -->").expect("its end marker");
    doc[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let unquote = |c: &str| c.trim_matches('`').to_string();
            (unquote(cells[1]), unquote(cells[cells.len() - 2]))
        })
        .collect()
}

#[test]
fn every_documented_refusal_is_refused_with_its_error() {
    let doc = documented();
    let cases = cases();
    let doc_ids: BTreeSet<&str> = doc.iter().map(|(id, _)| id.as_str()).collect();
    let case_ids: BTreeSet<&str> = cases.iter().map(|(id, ..)| *id).collect();
    assert_eq!(doc_ids, case_ids, "FORMAT.md's rows and this file's cases");
    assert_eq!(doc_ids.len(), doc.len(), "an id listed twice in FORMAT.md");
    for (id, want) in &doc {
        let (_, got, phrase) = cases.iter().find(|(c, ..)| c == id).unwrap();
        let e = got
            .as_ref()
            .expect_err(&format!("`{id}`: the file was accepted"));
        assert_eq!(variant(e), want, "`{id}`: {e}");
        assert!(e.to_string().contains(phrase), "`{id}`: {e}");
    }
}

#[test]
fn header_decode_errors_are_words_not_rust_debug_text() {
    // Every single-byte change of the header, CRC recomputed: whatever decoding error it
    // causes, the message must not be bincode's debug form.
    let good = good_file();
    let hl = header_len(&good);
    let mut decode_errors = 0;
    for at in 0..hl {
        for b in [0x00u8, 0x01, 0x7f, 0x80, 0xfb, 0xfc, 0xfd, 0xfe, 0xff] {
            let mut hb = good[20..20 + hl].to_vec();
            hb[at] = b;
            if let Err(e @ TraceError::HeaderDecode { .. }) = read(&with_header_bytes(&good, &hb)) {
                decode_errors += 1;
                let m = e.to_string();
                for debug in ["{", "}", "Utf8Error", "UnexpectedEnd", "InvalidIntegerType"] {
                    assert!(!m.contains(debug), "{m}");
                }
            }
        }
    }
    assert!(decode_errors > 10, "only {decode_errors} decoding errors");
}
