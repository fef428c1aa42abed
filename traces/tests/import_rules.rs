//! The rules CSV and JSON Lines imports share (traces/FORMAT.md, "Rules shared by CSV and
//! JSON Lines"): each case is tried in both formats and must come out the same.

use traces::import_rows::{parse_csv, parse_jsonl};
use traces::{FieldMap, RowFilter, RowImportOptions, Trace, TraceError};

fn opts() -> RowImportOptions {
    RowImportOptions::default()
}

fn csv(text: &str, o: &RowImportOptions) -> Result<Trace, TraceError> {
    parse_csv(text.as_bytes(), "t.csv", o)
}

fn jsonl(text: &str, o: &RowImportOptions) -> Result<Trace, TraceError> {
    parse_jsonl(text.as_bytes(), "t.jsonl", o)
}

/// Two tokens of sequence `a`, one MoE layer, top-2: ids [3 1] then [0 1].
const CSV: &str = "sequence,phase,token,layer,experts\na,decode,0,0,3 1\na,decode,1,0,0 1\n";
const JSONL: &str = "{\"sequence\":\"a\",\"token\":0,\"layer\":0,\"experts\":[3,1]}\n\
                     {\"sequence\":\"a\",\"token\":1,\"layer\":0,\"experts\":[0,1]}\n";

fn ids(t: &Trace) -> Vec<u16> {
    t.sequences[0].decode.ids.clone()
}

#[test]
fn a_bom_is_accepted_in_both() {
    let o = opts();
    assert_eq!(
        ids(&csv(&format!("\u{feff}{CSV}"), &o).unwrap()),
        [3, 1, 0, 1]
    );
    assert_eq!(
        ids(&jsonl(&format!("\u{feff}{JSONL}"), &o).unwrap()),
        [3, 1, 0, 1]
    );
}

#[test]
fn unknown_fields_are_ignored_in_both() {
    let o = opts();
    let c = "ts,sequence,token,layer,experts,extra\n9,a,0,0,3 1,x\n9,a,1,0,0 1,y\n";
    assert_eq!(ids(&csv(c, &o).unwrap()), [3, 1, 0, 1]);
    let j = "{\"sequence\":\"a\",\"token\":0,\"layer\":0,\"experts\":[3,1],\"ts\":9,\"extra\":{\"k\":[1]}}\n\
             {\"sequence\":\"a\",\"token\":1,\"layer\":0,\"experts\":[0,1],\"ts\":9}\n";
    assert_eq!(ids(&jsonl(j, &o).unwrap()), [3, 1, 0, 1]);
}

#[test]
fn empty_or_control_character_sequence_names_are_refused_in_both() {
    let o = opts();
    for name in ["", "a\u{0}b"] {
        let c = csv(
            &format!("sequence,token,layer,experts\n\"{name}\",0,0,1\n"),
            &o,
        );
        let j = jsonl(
            &format!("{{\"sequence\":{name:?},\"token\":0,\"layer\":0,\"experts\":[1]}}\n")
                .replace("\\0", "\\u0000"),
            &o,
        );
        for e in [c.unwrap_err().to_string(), j.unwrap_err().to_string()] {
            assert!(e.contains("line 2") || e.contains("line 1"), "{e}");
            assert!(e.contains("sequence name"), "{name:?}: {e}");
        }
    }
}

#[test]
fn signed_integers_are_refused_in_both() {
    let o = opts();
    let e = csv("sequence,token,layer,experts\na,0,0,+1\n", &o)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 2") && e.contains("\"+1\" is not a valid number"),
        "{e}"
    );
    let e = csv("sequence,token,layer,experts\na,+0,0,1\n", &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("token \"+0\" is not a valid number"), "{e}");
    // JSON has no `+` in numbers: the line does not parse.
    let e = jsonl(
        "{\"sequence\":\"a\",\"token\":0,\"layer\":0,\"experts\":[+1]}\n",
        &o,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("line 1"), "{e}");
}

#[test]
fn a_repeated_expert_id_names_its_line_in_both() {
    let o = opts();
    let c = format!("{CSV}a,decode,2,0,4 4\n");
    let e = csv(&c, &o).unwrap_err().to_string();
    assert!(e.contains("line 4: expert id 4 is repeated"), "{e}");
    let j = format!("{JSONL}{{\"sequence\":\"a\",\"token\":2,\"layer\":0,\"experts\":[4,4]}}\n");
    let e = jsonl(&j, &o).unwrap_err().to_string();
    assert!(e.contains("line 3: expert id 4 is repeated"), "{e}");
}

#[test]
fn a_field_map_reads_the_inputs_own_names() {
    let o = RowImportOptions {
        map: FieldMap::parse(
            "sequence=req_id,token=token_idx,experts=topk_ids,weights=topk_weights",
        )
        .unwrap(),
        ..opts()
    };
    let c =
        "req_id,token_idx,layer,topk_ids,topk_weights\nr,0,0,3 1,0.75 0.25\nr,1,0,0 1,0.5 0.5\n";
    let t = csv(c, &o).unwrap();
    assert_eq!(ids(&t), [3, 1, 0, 1]);
    assert_eq!(
        t.sequences[0].decode.weights.as_deref(),
        Some(&[0.75, 0.25, 0.5, 0.5][..])
    );
    let j = "{\"req_id\":\"r\",\"token_idx\":0,\"layer\":0,\"topk_ids\":[3,1],\"topk_weights\":[0.75,0.25]}\n\
             {\"req_id\":\"r\",\"token_idx\":1,\"layer\":0,\"topk_ids\":[0,1],\"topk_weights\":[0.5,0.5]}\n";
    let tj = jsonl(j, &o).unwrap();
    assert_eq!(
        (&tj.sequences, &tj.header.sequences),
        (&t.sequences, &t.header.sequences)
    );
    // the default name is no longer read once renamed
    let e = csv(CSV, &o).unwrap_err().to_string();
    assert!(
        e.contains("no field `req_id` (the sequence field, by --map)"),
        "{e}"
    );
}

#[test]
fn where_filters_keep_only_matching_rows() {
    let o = RowImportOptions {
        filters: vec![RowFilter::parse("type=route").unwrap()],
        ..opts()
    };
    let c = "type,sequence,token,layer,experts\nroute,a,0,0,3 1\nstats,a,9,0,7\nroute,a,1,0,0 1\n";
    assert_eq!(ids(&csv(c, &o).unwrap()), [3, 1, 0, 1]);
    let j = "{\"type\":\"route\",\"sequence\":\"a\",\"token\":0,\"layer\":0,\"experts\":[3,1]}\n\
             {\"type\":\"stats\",\"gpu_mib\":812}\n\
             {\"sequence\":\"a\",\"note\":\"no type: skipped\"}\n\
             {\"type\":\"route\",\"sequence\":\"a\",\"token\":1,\"layer\":0,\"experts\":[0,1]}\n";
    assert_eq!(ids(&jsonl(j, &o).unwrap()), [3, 1, 0, 1]);
    let none = RowImportOptions {
        filters: vec![RowFilter::parse("type=rout").unwrap()],
        ..opts()
    };
    let e = jsonl(j, &none).unwrap_err().to_string();
    assert!(
        e.contains("no rows: --where type=rout skipped every one of the 4 rows"),
        "{e}"
    );
}

#[test]
fn without_a_token_field_tokens_follow_row_order_per_layer() {
    let o = opts();
    // layer 1 rows come before layer 0 rows of the same token: numbering is per layer (the
    // rows of a sequence cycle through its layers in one order: a log that switched order
    // mid-way would leave a layer short of rows at a round, refused below)
    let c = "sequence,layer,experts\na,1,5\na,0,3\na,1,4\na,0,2\nb,0,1\nb,1,0\n";
    let t = csv(c, &o).unwrap();
    assert_eq!(t.header.sequences[0].decode_tokens, 2);
    assert_eq!(ids(&t), [3, 5, 2, 4]);
    assert_eq!(t.sequences[1].decode.ids, [1, 0]);
    let e = csv("sequence,layer,token,experts\na,0,0,1\na,0,,2\n", &o)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 3") && e.contains("on every row or on none"),
        "{e}"
    );
}

#[test]
fn drop_warmup_removes_the_profiling_batch() {
    let o = RowImportOptions {
        drop_warmup: true,
        ..opts()
    };
    let warm = "sequence,token,layer,experts\nw,0,0,5 6\nw,0,1,1 2\nw,1,0,5 6\nw,1,1,1 2\nw,2,0,5 6\nw,2,1,1 2\n";
    let t = csv(&format!("{warm}a,0,0,3 1\na,0,1,0 1\n"), &o).unwrap();
    assert_eq!(t.header.sequences.len(), 1);
    assert_eq!(t.header.sequences[0].name, "a");
    assert_eq!(ids(&t), [3, 1, 0, 1]);
    // a first sequence whose tokens differ is not a warmup: refused, naming the flag
    let e = csv(
        "sequence,token,layer,experts\na,0,0,3 1\na,1,0,0 1\nb,0,0,1 2\n",
        &o,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--drop-warmup") && e.contains("line 2") && e.contains("line 3"),
        "{e}"
    );
}

// ---- silent corruption refused (issue 41) ------------------------------------------------

/// JSON Lines rows of sequence `a` without a token field: (layer, ids) in order.
fn token_less(rows: &[(usize, [u16; 2])]) -> (String, String) {
    let mut csv = "sequence,layer,experts\n".to_string();
    let mut jsonl = String::new();
    for (layer, [x, y]) in rows {
        csv += &format!("a,{layer},{x} {y}\n");
        jsonl += &format!("{{\"sequence\":\"a\",\"layer\":{layer},\"experts\":[{x},{y}]}}\n");
    }
    (csv, jsonl)
}

/// Both formats refuse; each message holds every piece (CSV lines are one later: its header).
fn refused_in_both(csv_text: &str, jsonl_text: &str, o: &RowImportOptions, pieces: &[&str]) {
    for (e, shift) in [
        (csv(csv_text, o).unwrap_err(), 1),
        (jsonl(jsonl_text, o).unwrap_err(), 0),
    ] {
        let m = e.to_string();
        for p in pieces {
            let p = shift_lines(p, shift);
            assert!(m.contains(&p), "{m:?} lacks {p:?}");
        }
    }
}

/// `line N` in `p` becomes `line N + shift`.
fn shift_lines(p: &str, shift: u64) -> String {
    match p.strip_prefix("line ") {
        Some(n) => format!("line {}", n.parse::<u64>().unwrap() + shift),
        None => p.to_string(),
    }
}

#[test]
fn a_duplicated_row_without_tokens_is_refused_at_the_next_round() {
    // Layers 0 and 1, three tokens; line 5 repeats line 4 (layer 1 of token 1). At line 6,
    // where layer 0 starts the next token, layer 1 has 3 rows and layer 0 has 2.
    let (c, j) = token_less(&[
        (0, [0, 1]),
        (1, [2, 3]),
        (0, [1, 2]),
        (1, [3, 0]),
        (1, [3, 0]),
        (0, [2, 3]),
        (1, [0, 1]),
    ]);
    refused_in_both(
        &c,
        &j,
        &opts(),
        &["line 6", "layer 1 has 3 rows", "line 5", "layer 0 has 2"],
    );
}

#[test]
fn a_lost_row_and_a_duplicated_one_are_refused_though_the_counts_end_equal() {
    // Four tokens: layer 1 of token 0 lost, layer 1 of token 2 given twice. Both layers end
    // with 4 rows (before, layer 1 was silently shifted by one token for tokens 0-1); at
    // line 4, the second return to layer 0, layer 1 has 1 row (line 3) and layer 0 has 2.
    let (c, j) = token_less(&[
        (0, [0, 1]),
        (0, [1, 2]),
        (1, [3, 0]),
        (0, [2, 3]),
        (1, [0, 1]),
        (1, [0, 1]),
        (0, [3, 0]),
        (1, [1, 2]),
    ]);
    refused_in_both(
        &c,
        &j,
        &opts(),
        &["line 4", "layer 1 has 1 rows", "line 3", "layer 0 has 2"],
    );
}

#[test]
fn even_rows_without_tokens_still_import_in_token_and_pass_order() {
    // Token after token, and a pass of two tokens layer after layer: the same trace.
    let (c, j) = token_less(&[(0, [0, 1]), (1, [2, 3]), (0, [1, 2]), (1, [3, 0])]);
    let (pc, pj) = token_less(&[(0, [0, 1]), (0, [1, 2]), (1, [2, 3]), (1, [3, 0])]);
    for t in [
        csv(&c, &opts()),
        jsonl(&j, &opts()),
        csv(&pc, &opts()),
        jsonl(&pj, &opts()),
    ] {
        assert_eq!(ids(&t.unwrap()), [0, 1, 2, 3, 1, 2, 3, 0]);
    }
}

#[test]
fn an_id_equal_to_the_expert_count_is_refused_with_its_line() {
    let o = RowImportOptions {
        num_experts: Some(4),
        ..opts()
    };
    let (c, j) = token_less(&[(0, [0, 1]), (0, [4, 2])]);
    refused_in_both(&c, &j, &o, &["line 2", "expert id 4 >= 4 experts"]);
    // Without --num-experts the bank is inferred as 5 (the CLI says it was inferred).
    assert_eq!(csv(&c, &opts()).unwrap().header.model.layers[0].experts, 5);
}

#[test]
fn a_layer_index_that_leaves_most_layers_empty_needs_num_layers() {
    // Layers 0 and 1 on every token, then a corrupt 60000 with a token field (so that the
    // rows are otherwise complete): 60,001 layers of which 3 have rows.
    let c = "sequence,token,layer,experts\na,0,0,0 1\na,0,1,1 2\na,0,60000,2 3\n";
    let j = "{\"sequence\":\"a\",\"token\":0,\"layer\":0,\"experts\":[0,1]}\n\
             {\"sequence\":\"a\",\"token\":0,\"layer\":1,\"experts\":[1,2]}\n\
             {\"sequence\":\"a\",\"token\":0,\"layer\":60000,\"experts\":[2,3]}\n";
    refused_in_both(
        c,
        j,
        &opts(),
        &[
            "line 3",
            "60001 layers",
            "only 3 have rows",
            "--num-layers 60001",
        ],
    );
    let short = RowImportOptions {
        num_layers: Some(24),
        ..opts()
    };
    refused_in_both(c, j, &short, &["line 3", "beyond the 24 layers"]);
    let told = RowImportOptions {
        num_layers: Some(60_001),
        ..opts()
    };
    assert_eq!(csv(c, &told).unwrap().header.model.layers.len(), 60_001);
    // Without tokens the index is named as such, not as a layer short of rows.
    let (c, j) = token_less(&[(0, [0, 1]), (1, [1, 2]), (60_000, [2, 3])]);
    refused_in_both(&c, &j, &opts(), &["line 3", "--num-layers 60001"]);
}

#[test]
fn half_the_layers_empty_is_a_switch_model_and_imports() {
    // Switch Transformers route every other layer: layers 1 and 3 of 4.
    let (c, _) = token_less(&[(1, [0, 1]), (3, [1, 2])]);
    let t = csv(&c, &opts()).unwrap();
    let moe: Vec<bool> = t.header.model.layers.iter().map(|l| l.is_moe()).collect();
    assert_eq!(moe, [false, true, false, true]);
}

#[test]
fn a_nul_tail_is_refused_at_the_line_limit() {
    // 5 MiB of NUL after two rows: the line limit (4 MiB) stops the read at line 3 (JSONL;
    // line 4 of the CSV, after its header).
    let tail = vec![0u8; 5 << 20];
    let (c, j) = token_less(&[(0, [0, 1]), (0, [1, 2])]);
    for (text, name, line) in [(c, "csv", 4), (j, "jsonl", 3)] {
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(&tail);
        let e = if name == "csv" {
            parse_csv(&bytes[..], "t.csv", &opts())
        } else {
            parse_jsonl(&bytes[..], "t.jsonl", &opts())
        }
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&format!("line {line} runs past 4 MiB"))
                && e.contains("line limit of the row importers"),
            "{name}: {e}"
        );
    }
}

#[test]
fn the_largest_layer_index_is_refused_not_overflowed() {
    // u64::MAX as a layer: one past it does not exist, so the span check must refuse it
    // rather than add one (a fuzz-found overflow).
    let (c, j) = token_less(&[(0, [0, 1]), (usize::MAX, [1, 2])]);
    refused_in_both(
        &c,
        &j,
        &opts(),
        &["line 2", "18446744073709551615 is not a layer index"],
    );
}

#[test]
fn comma_separated_ids_are_refused_with_the_separators_named() {
    let c = "sequence,layer,experts\na,0,\"0,1\"\n";
    let m = csv(c, &opts()).unwrap_err().to_string();
    assert!(m.contains("\"0,1\" is not a valid number"), "{m}");
    assert!(m.contains("separated by spaces or `;`, not commas"), "{m}");
    // Without a comma the hint would mislead, so it is absent.
    let m = csv("sequence,layer,experts\na,0,0 x\n", &opts())
        .unwrap_err()
        .to_string();
    assert!(!m.contains("not commas"), "{m}");
}
