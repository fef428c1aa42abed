//! `--drop-warmup`: remove vLLM's profiling dummy batch from imported rows.
//!
//! Before serving, vLLM runs one forward pass of `max_num_batched_tokens` dummy tokens to
//! measure memory (`profile_run` in its model runner). A logger hooked into the router records
//! that pass like any other, and since every dummy token is the same input, every token of the
//! pass selects the same experts in a given layer. The warmup is therefore recognised as the
//! first sequence of the input (by first appearance) when it has at least two tokens and, in
//! every layer, one selection for all of them.

use crate::import_rows::Row;

/// Remove the first sequence's rows when it is a warmup batch, renumbering the others;
/// return how many rows were removed, or say why the first sequence is not a warmup.
pub(crate) fn drop_warmup(rows: &mut Vec<Row>, names: &mut Vec<String>) -> Result<usize, String> {
    let first = names.first().cloned().unwrap_or_default();
    let warmup: Vec<&Row> = rows.iter().filter(|r| r.sequence == 0).collect();
    let tokens = {
        let mut t: Vec<_> = warmup.iter().map(|r| (r.phase, r.token)).collect();
        t.sort_unstable();
        t.dedup();
        t.len()
    };
    if tokens < 2 {
        return Err(format!(
            "--drop-warmup: the first sequence {first:?} has {tokens} token(s), but vLLM's \
             profiling batch has many tokens with one selection; leave out --drop-warmup"
        ));
    }
    let mut per_layer: std::collections::HashMap<usize, &Row> = Default::default();
    for r in &warmup {
        let r0 = *per_layer.entry(r.layer).or_insert(r);
        if r0.experts != r.experts {
            return Err(format!(
                "--drop-warmup: the first sequence {first:?} is not a profiling batch: in layer \
                 {}, line {} selects {:?} but line {} selects {:?}; if the log's position field \
                 restarts at each forward pass, map it (--map token=FIELD) so that warm-up is \
                 found by pass, else leave out --drop-warmup",
                r.layer, r0.line, r0.experts, r.line, r.experts
            ));
        }
    }
    if names.len() == 1 {
        return Err(format!(
            "--drop-warmup: the only sequence {first:?} looks like the profiling batch; \
             nothing would be left"
        ));
    }
    let before = rows.len();
    rows.retain(|r| r.sequence != 0);
    for r in rows.iter_mut() {
        r.sequence -= 1;
    }
    names.remove(0);
    Ok(before - rows.len())
}
