//! Building a trace from routing arrays already in memory (a Python process's NumPy arrays,
//! as vLLM's `routed_experts` and SGLang's decoded `meta_info.routed_experts` give them),
//! with the checks and the interpretation of the file importers (`import_vllm`,
//! `import_sglang`): each array is one request of shape [tokens, MoE layers, top_k], its
//! first `prompt_tokens` rows are prefill and the rest decode.

use crate::error::TraceError;
use crate::import_arrays::{build_from_requests, RequestRouting};
use crate::import_rows::RowImportOptions;
use crate::trace::Trace;

/// One request's routed experts, held in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutedArray {
    /// Sequence name (a request id); must be unique within the trace.
    pub name: String,
    /// Prompt tokens: the first this many rows of the tokens axis are prefill.
    pub prompt_tokens: u64,
    /// Axis lengths: tokens, MoE layers, top-k.
    pub shape: [usize; 3],
    /// Expert ids, `shape` in C order (top-k fastest); negative values (padding) are refused
    /// by name.
    pub ids: Vec<i64>,
}

/// The importer names a trace built from arrays may record as its format: the engines whose
/// routed experts have this shape.
pub const ARRAY_FORMATS: [&str; 2] = ["vllm-routed-experts", "sglang-routed-experts"];

/// Assemble `arrays` into one trace, sequences in the given order. `source` names the input in
/// messages and in the provenance (unless `opts` gives one); `format` is one of
/// [`ARRAY_FORMATS`]. Errors name the request by index and name: ragged layers or top-k across
/// requests, ids out of range or repeated in one selection, a prompt longer than its array,
/// duplicate names.
pub fn import_routed_arrays(
    arrays: Vec<RoutedArray>,
    source: &str,
    format: &str,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    if !ARRAY_FORMATS.contains(&format) {
        return Err(TraceError::Import {
            file: source.to_string(),
            location: "options".into(),
            detail: format!(
                "format {format:?} is not one of {}",
                ARRAY_FORMATS.join(", ")
            ),
        });
    }
    let requests = arrays
        .into_iter()
        .enumerate()
        .map(|(i, a)| RequestRouting {
            location: format!("request {i} ({:?})", a.name),
            name: a.name,
            prompt_tokens: a.prompt_tokens,
            shape: a.shape,
            ids: a.ids,
        })
        .collect();
    build_from_requests(requests, source, format, None, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(name: &str, prompt: u64, shape: [usize; 3], ids: Vec<i64>) -> RoutedArray {
        RoutedArray {
            name: name.into(),
            prompt_tokens: prompt,
            shape,
            ids,
        }
    }

    #[test]
    fn arrays_become_sequences_split_at_their_prompts() {
        // request a: 3 tokens x 2 layers x top-1, prompt 2; request b: 1 token, prompt 0
        let arrays = vec![
            array("a", 2, [3, 2, 1], vec![0, 1, 2, 3, 4, 5]),
            array("b", 0, [1, 2, 1], vec![6, 0]),
        ];
        let opts = Default::default();
        let t = import_routed_arrays(arrays, "arrays", "vllm-routed-experts", &opts).unwrap();
        assert_eq!(t.header.sequences.len(), 2);
        assert_eq!(t.header.sequences[0].prefill_tokens, 2);
        assert_eq!(t.header.sequences[0].decode_tokens, 1);
        assert_eq!(t.sequences[0].prefill.ids, [0, 1, 2, 3]);
        assert_eq!(t.sequences[0].decode.ids, [4, 5]);
        assert_eq!(t.sequences[1].decode.ids, [6, 0]);
        // experts: the largest id + 1
        assert_eq!(t.header.model.layers[0].experts, 7);
        assert!(t
            .header
            .provenance
            .tool
            .contains("(vllm-routed-experts importer)"));
    }

    #[test]
    fn bad_arrays_name_the_request() {
        let opts = Default::default();
        let e = |a: Vec<RoutedArray>, f: &str| {
            import_routed_arrays(a, "arrays", f, &opts)
                .unwrap_err()
                .to_string()
        };
        let ragged = vec![
            array("a", 0, [1, 2, 1], vec![0, 1]),
            array("b", 0, [1, 3, 1], vec![0, 1, 2]),
        ];
        assert!(e(ragged.clone(), "vllm-routed-experts").contains("request 1 (\"b\")"));
        assert!(e(ragged, "vllm-routed-experts").contains("same layers and top-k"));
        let negative = vec![array("a", 0, [1, 1, 1], vec![-1])];
        assert!(e(negative, "vllm-routed-experts").contains("expert id -1 is out of range"));
        let ok = vec![array("a", 0, [1, 1, 1], vec![0])];
        assert!(e(ok, "csv").contains("is not one of vllm-routed-experts"));
    }
}
