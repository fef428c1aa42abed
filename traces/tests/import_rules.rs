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
    // layer 1 rows come before layer 0 rows of the same token: numbering is per layer
    let c = "sequence,layer,experts\na,1,5\na,0,3\na,0,2\na,1,4\nb,0,1\nb,1,0\n";
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
