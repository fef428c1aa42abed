//! The serving-engine importers on small files built here: vLLM's routed experts as NumPy
//! (`.npy`, a directory, `.npz`, written with the `npyz` and `zip` crates), SGLang responses
//! (base64 int32, encoded with the `base64` crate) and llama.cpp `layer,expert` rows. Expected
//! selections are written out by hand next to each input.

use base64::Engine;
use npyz::WriterBuilder;
use std::io::Write;
use std::path::Path;
use traces::import_llama::parse_llama_moe_trace;
use traces::import_sglang::parse_sglang;
use traces::import_vllm::import_vllm_routed_experts;
use traces::{ImportOptions, RowImportOptions, Trace};

/// Write `ids` of `shape` as a `.npy` of dtype `T` in `order`.
fn npy_bytes<T: npyz::AutoSerialize + Copy>(
    shape: [u64; 3],
    ids: &[T],
    order: npyz::Order,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .order(order)
        .writer(&mut out)
        .begin_nd()
        .unwrap();
    w.extend(ids.iter().copied()).unwrap();
    w.finish().unwrap();
    out
}

/// Request `r0`: 3 tokens x 2 layers x top-2 (ids < 6); request `r1`: 2 tokens.
const R0: [i64; 12] = [
    0, 1, 2, 3, /* t1 */ 4, 5, 0, 2, /* t2 */ 1, 3, 5, 4,
];
const R1: [i64; 8] = [5, 4, 3, 2, /* t1 */ 1, 0, 2, 5];

fn as_u16(ids: &[i64]) -> Vec<u16> {
    ids.iter().map(|&x| x as u16).collect()
}

fn vllm_opts(prompt: Option<u64>) -> RowImportOptions {
    RowImportOptions {
        prompt_tokens: prompt,
        ..Default::default()
    }
}

#[test]
fn vllm_npy_files_and_directories_import_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("requests");
    std::fs::create_dir(&d).unwrap();
    // r0 as int64 C order, r1 as int32 Fortran order (the reader reorders it)
    std::fs::write(d.join("r0.npy"), npy_bytes([3, 2, 2], &R0, npyz::Order::C)).unwrap();
    let r1_fortran: Vec<i32> = {
        // element (t, l, k) at t + 2 * l + 4 * k
        let mut v = vec![0i32; 8];
        for t in 0..2 {
            for l in 0..2 {
                for k in 0..2 {
                    v[t + 2 * l + 4 * k] = R1[t * 4 + l * 2 + k] as i32;
                }
            }
        }
        v
    };
    std::fs::write(
        d.join("r1.npy"),
        npy_bytes([2, 2, 2], &r1_fortran, npyz::Order::Fortran),
    )
    .unwrap();
    std::fs::write(d.join("notes.txt"), "ignored").unwrap();
    let t = import_vllm_routed_experts(&d, &vllm_opts(Some(1))).unwrap();
    assert_eq!(t.header.sequences.len(), 2);
    assert_eq!(t.header.sequences[0].name, "r0");
    assert_eq!(
        (
            t.header.sequences[0].prefill_tokens,
            t.header.sequences[0].decode_tokens
        ),
        (1, 2)
    );
    assert_eq!(t.sequences[0].prefill.ids, as_u16(&R0[..4]));
    assert_eq!(t.sequences[0].decode.ids, as_u16(&R0[4..]));
    assert_eq!(t.sequences[1].prefill.ids, as_u16(&R1[..4]));
    assert_eq!(t.sequences[1].decode.ids, as_u16(&R1[4..]));
    let l = &t.header.model.layers;
    assert_eq!((l.len(), l[0].experts, l[0].top_k), (2, 6, 2));
    // one file alone
    let one = import_vllm_routed_experts(&d.join("r0.npy"), &vllm_opts(Some(0))).unwrap();
    assert_eq!(one.sequences[0].decode.ids, as_u16(&R0));
}

#[test]
fn vllm_npz_archives_and_prompt_length_files() {
    let dir = tempfile::tempdir().unwrap();
    let npz = dir.path().join("run.npz");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&npz).unwrap());
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, shape, ids) in [("b", [3, 2, 2], &R0[..]), ("a", [2, 2, 2], &R1[..])] {
        zip.start_file(format!("{name}.npy"), stored).unwrap();
        zip.write_all(&npy_bytes(shape, ids, npyz::Order::C))
            .unwrap();
    }
    zip.finish().unwrap();
    let lengths = dir.path().join("prompts.json");
    std::fs::write(&lengths, r#"{"a": 2, "b": 1}"#).unwrap();
    let o = RowImportOptions {
        prompt_lengths: Some(lengths.clone()),
        ..Default::default()
    };
    let t = import_vllm_routed_experts(&npz, &o).unwrap();
    // archive order, not name order
    let names: Vec<_> = t.header.sequences.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(t.header.sequences[1].prefill_tokens, 2);
    assert_eq!(t.header.sequences[1].decode_tokens, 0);
    std::fs::write(&lengths, "sequence,prompt_tokens\nb,3\na,0\n").unwrap();
    let t = import_vllm_routed_experts(&npz, &o).unwrap();
    assert_eq!(t.header.sequences[0].prefill_tokens, 3);
    std::fs::write(&lengths, "sequence,prompt_tokens\nb,3\n").unwrap();
    let e = import_vllm_routed_experts(&npz, &o)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("a.npy") && e.contains("no prompt length for \"a\""),
        "{e}"
    );
}

#[test]
fn vllm_refusals_say_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.npy");
    let e = |bytes: Vec<u8>, o: &RowImportOptions| {
        std::fs::write(&p, bytes).unwrap();
        import_vllm_routed_experts(&p, o).unwrap_err().to_string()
    };
    let ok = npy_bytes([3, 2, 2], &R0, npyz::Order::C);
    assert!(e(ok.clone(), &vllm_opts(None)).contains("--prompt-tokens"));
    let f: Vec<f32> = R0.iter().map(|&x| x as f32).collect();
    assert!(e(
        npy_bytes([3, 2, 2], &f, npyz::Order::C),
        &vllm_opts(Some(0))
    )
    .contains("not an integer type"));
    let mut padded = R0;
    padded[5] = -1;
    let msg = e(
        npy_bytes([3, 2, 2], &padded, npyz::Order::C),
        &vllm_opts(Some(0)),
    );
    assert!(
        msg.contains("token 1 layer 0: expert id -1 is out of range"),
        "{msg}"
    );
    // a header that declares far more data than the file holds is refused before reading
    let mut out = Vec::new();
    let w = npyz::WriteOptions::<i64>::new()
        .default_dtype()
        .shape(&[1 << 40, 48, 8])
        .writer(&mut out)
        .begin_nd()
        .unwrap();
    drop(w);
    assert!(e(out, &vllm_opts(Some(0))).contains("needs more bytes than"));
    assert!(e(b"not numpy".to_vec(), &vllm_opts(Some(0))).contains("not a NumPy"));
}

fn sglang_line(id: &str, prompt: u64, ids: &[i64]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!(
        "{{\"text\": \"...\", \"meta_info\": {{\"id\": \"{id}\", \"prompt_tokens\": {prompt}, \
         \"completion_tokens\": 9, \"routed_experts\": \"{b64}\"}}}}\n"
    )
}

fn sglang_opts() -> RowImportOptions {
    RowImportOptions {
        moe_layers: Some(2),
        top_k: Some(2),
        ..Default::default()
    }
}

#[test]
fn sglang_responses_import_with_their_prompt_lengths() {
    let text = format!("{}{}", sglang_line("x1", 2, &R0), sglang_line("x2", 0, &R1));
    let t = parse_sglang(text.as_bytes(), "s.jsonl", &sglang_opts()).unwrap();
    assert_eq!(t.header.sequences[0].name, "x1");
    assert_eq!(
        (
            t.header.sequences[0].prefill_tokens,
            t.header.sequences[0].decode_tokens
        ),
        (2, 1)
    );
    assert_eq!(t.sequences[0].prefill.ids, as_u16(&R0[..8]));
    assert_eq!(t.sequences[1].decode.ids, as_u16(&R1));
    // a batched response: an array on one line
    let batch = format!(
        "[{}, {}]\n",
        sglang_line("x1", 2, &R0).trim(),
        sglang_line("x2", 0, &R1).trim()
    );
    let tb = parse_sglang(batch.as_bytes(), "s.jsonl", &sglang_opts()).unwrap();
    assert_eq!(tb.sequences, t.sequences);
    // the shape must be given and must divide the data
    let e = parse_sglang(text.as_bytes(), "s.jsonl", &Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("--moe-layers") && e.contains("--top-k"), "{e}");
    let o = RowImportOptions {
        moe_layers: Some(5),
        ..sglang_opts()
    };
    let e = parse_sglang(text.as_bytes(), "s.jsonl", &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 1") && e.contains("48 bytes"), "{e}");
    let e = parse_sglang(
        "{\"meta_info\": {}}\n".as_bytes(),
        "s.jsonl",
        &sglang_opts(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("return_routed_experts"), "{e}");
}

#[test]
fn llama_rows_rebuild_tokens_from_layer_order() {
    // MoE layers 1 and 3 (0 and 2 dense), top-2. A prompt of 2 tokens (runs of 4 rows),
    // then 2 decode steps (runs of 2), then a second prompt of 4 tokens evaluated in two
    // micro-batches of 2 tokens.
    let rows = "layer,expert\n\
                1,0\n1,1\n1,2\n1,3\n3,4\n3,5\n3,0\n3,1\n\
                1,4\n1,5\n3,2\n3,3\n\
                1,1\n1,0\n3,3\n3,2\n\
                1,5\n1,4\n1,3\n1,2\n3,1\n3,0\n3,5\n3,4\n\
                1,0\n1,2\n1,4\n1,1\n3,0\n3,2\n3,4\n3,1\n";
    let o = RowImportOptions {
        top_k: Some(2),
        ..Default::default()
    };
    let t: Trace = parse_llama_moe_trace(rows.as_bytes(), "l.csv", &o).unwrap();
    let l = &t.header.model.layers;
    assert_eq!(l.len(), 4);
    assert!(!l[0].is_moe() && l[1].is_moe() && !l[2].is_moe() && l[3].is_moe());
    assert_eq!(t.header.sequences.len(), 2);
    let s0 = &t.header.sequences[0];
    assert_eq!((s0.prefill_tokens, s0.decode_tokens), (2, 2));
    // token 0: layer 1 [0 1], layer 3 [4 5]; token 1: [2 3], [0 1]
    assert_eq!(t.sequences[0].prefill.ids, [0, 1, 4, 5, 2, 3, 0, 1]);
    assert_eq!(t.sequences[0].decode.ids, [4, 5, 2, 3, 1, 0, 3, 2]);
    // two prefill passes in a row are one prompt of 4 tokens
    let s1 = &t.header.sequences[1];
    assert_eq!((s1.prefill_tokens, s1.decode_tokens), (4, 0));
    assert_eq!(t.sequences[1].prefill.ids[..4], [5, 4, 1, 0]);
    // the passes as llama.cpp evaluated them: (sequence, tokens) of each
    let passes: Vec<Vec<(u32, u32)>> = t
        .header
        .passes
        .as_ref()
        .expect("llama.cpp passes are recorded")
        .iter()
        .map(|p| p.runs.iter().map(|r| (r.sequence, r.tokens)).collect())
        .collect();
    assert_eq!(
        passes,
        [
            vec![(0, 2)],
            vec![(0, 1)],
            vec![(0, 1)],
            vec![(1, 2)],
            vec![(1, 2)]
        ]
    );
    // one MoE layer: passes cannot be told apart, so none is recorded
    let one = parse_llama_moe_trace("1,0\n1,1\n1,2\n1,3\n".as_bytes(), "l.csv", &o).unwrap();
    assert!(one.header.passes.is_none());
    let e = parse_llama_moe_trace(rows.as_bytes(), "l.csv", &Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("--top-k"), "{e}");
    let o3 = RowImportOptions {
        top_k: Some(3),
        ..o.clone()
    };
    let e = parse_llama_moe_trace(rows.as_bytes(), "l.csv", &o3)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 2") && e.contains("not a multiple of top-3"),
        "{e}"
    );
    let e = parse_llama_moe_trace("1,0\n1,1\n3,+2\n".as_bytes(), "l.csv", &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 3") && e.contains("\"+2\""), "{e}");
}

#[test]
fn model_flags_reach_the_header_and_version_2_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r0.npy");
    std::fs::write(&p, npy_bytes([3, 2, 2], &R0, npyz::Order::C)).unwrap();
    let o = RowImportOptions {
        common: ImportOptions {
            shared_experts: Some(1),
            expert_matrices: Some(2),
            unrecorded_layers: vec![2, 3],
            hidden_size: Some(64),
            expert_ffn: Some(32),
            ..Default::default()
        },
        prompt_tokens: Some(0),
        ..Default::default()
    };
    let t = import_vllm_routed_experts(&p, &o).unwrap();
    let m = &t.header.model;
    assert_eq!(m.layers.len(), 4);
    assert!(m.layers[2].is_unrecorded_moe() && m.layers[3].is_unrecorded_moe());
    assert_eq!((m.layers[2].experts, m.layers[2].top_k), (6, 0));
    assert!(m.layers.iter().all(|l| l.shared_experts == 1));
    assert_eq!(m.expert_params(), Some(2 * 64 * 32));
    assert_eq!(traces::format::version_for(&t.header), 2);
    let out = dir.path().join("t.bin");
    traces::write_file(&out, &t).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 2);
    assert_eq!(traces::read_file(&out).unwrap(), t);
    // without the new fields the same import is version 1
    let plain = import_vllm_routed_experts(&p, &vllm_opts(Some(0))).unwrap();
    assert_eq!(traces::format::version_for(&plain.header), 1);
    // listing a recorded layer as unrecorded is refused
    let bad = RowImportOptions {
        common: ImportOptions {
            unrecorded_layers: vec![1],
            ..Default::default()
        },
        prompt_tokens: Some(0),
        ..Default::default()
    };
    let e = import_vllm_routed_experts(Path::new(&p), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--unrecorded-layers names layer 1"), "{e}");
}
