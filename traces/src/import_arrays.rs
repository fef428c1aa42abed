//! Building a trace from per-request routing arrays of shape [tokens, layers, top_k], the
//! form in which serving engines return routed experts (vLLM's `routed_experts`, SGLang's
//! `meta_info.routed_experts`): the layers axis counts the model's MoE layers in order, the
//! tokens axis covers the prompt and then the generated tokens.

use crate::error::TraceError;
use crate::import_fields::check_sequence_name;
use crate::import_rows::RowImportOptions;
use crate::model::{Header, LayerSpec, SequenceInfo};
use crate::trace::{SequenceData, TokenBlock, Trace};

/// One request's routing, as read from the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RequestRouting {
    /// Sequence name (a request id, a file stem, an archive entry).
    pub(crate) name: String,
    /// Where in the input the request is, for messages (e.g. `req0.npy`, `line 3`).
    pub(crate) location: String,
    /// Prompt tokens of the request; the first this many rows of the tokens axis are prefill.
    pub(crate) prompt_tokens: u64,
    /// Axis lengths: tokens, MoE layers, top-k.
    pub(crate) shape: [usize; 3],
    /// Expert ids, `shape` in C order (top-k fastest), as signed integers so that negative
    /// padding values can be named in messages.
    pub(crate) ids: Vec<i64>,
}

/// Assemble requests into one trace (sequences in the given order); `format` names the
/// importer in the provenance. `placement`, when given, is the model layer number of each
/// entry of the layers axis (increasing, below [`crate::format::MAX_LAYERS`]; the layers in
/// between are dense); without it the layers axis is the model's layers 0, 1, ...
pub(crate) fn build_from_requests(
    requests: Vec<RequestRouting>,
    file: &str,
    format: &str,
    placement: Option<&[usize]>,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    let at = |location: &str, detail: String| TraceError::Import {
        file: file.to_string(),
        location: location.to_string(),
        detail,
    };
    let Some(first) = requests.first() else {
        return Err(at("input", "no requests".into()));
    };
    let [_, layers, top_k] = first.shape;
    let experts = experts(&requests, file, opts)?;
    let mut names = std::collections::HashSet::new();
    let (mut infos, mut datas) = (Vec::new(), Vec::new());
    for r in &requests {
        check_request(r, first, &mut names, experts).map_err(|d| at(&r.location, d))?;
        let tokens = r.shape[0] as u64;
        let ids: Vec<u16> = r.ids.iter().map(|&x| x as u16).collect();
        let split = (r.prompt_tokens as usize) * layers * top_k;
        infos.push(SequenceInfo {
            name: r.name.clone(),
            prefill_tokens: r.prompt_tokens,
            decode_tokens: tokens - r.prompt_tokens,
        });
        datas.push(SequenceData {
            prefill: TokenBlock {
                ids: ids[..split].to_vec(),
                weights: None,
            },
            decode: TokenBlock {
                ids: ids[split..].to_vec(),
                weights: None,
            },
        });
    }
    let k = u16::try_from(top_k).map_err(|_| at("input", format!("top-k {top_k} above 65535")))?;
    let moe = LayerSpec {
        experts,
        top_k: k,
        shared_experts: 0,
    };
    let model_layers = match placement {
        None => vec![moe; layers],
        Some(p) => {
            let mut v = vec![LayerSpec::dense(); p.last().map_or(0, |&l| l + 1)];
            for &l in p {
                v[l] = moe.clone();
            }
            v
        }
    };
    let model = opts
        .common
        .model("unknown", model_layers)
        .map_err(|d| at("options", d))?;
    crate::format::validate_geometry(&model, file)?;
    let labels = infos.iter().map(|i| i.name.clone()).collect();
    Ok(Trace {
        header: Header {
            model,
            provenance: opts.common.provenance(file, format, labels),
            sequences: infos,
            has_weights: false,
            passes: None,
        },
        sequences: datas,
    })
}

/// Routed experts per MoE layer: `--num-experts`, else the largest id seen + 1.
fn experts(
    requests: &[RequestRouting],
    file: &str,
    opts: &RowImportOptions,
) -> Result<u16, TraceError> {
    if let Some(n) = opts.num_experts {
        return Ok(n);
    }
    let max = requests
        .iter()
        .flat_map(|r| r.ids.iter().copied())
        .max()
        .unwrap_or(0)
        .max(0);
    match u16::try_from(max) {
        Ok(m) if m < u16::MAX => Ok(m + 1),
        _ => {
            let r = requests
                .iter()
                .find(|r| r.ids.contains(&max))
                .expect("max is an id");
            Err(TraceError::Import {
                file: file.to_string(),
                location: r.location.clone(),
                detail: format!(
                    "expert id {max} needs more than the 65,535 experts a layer may have"
                ),
            })
        }
    }
}

/// Check one request against the first one's geometry: same layers and top-k, a usable
/// unique name, a prompt within the tokens, and every selection's ids in range and distinct.
fn check_request(
    r: &RequestRouting,
    first: &RequestRouting,
    names: &mut std::collections::HashSet<String>,
    experts: u16,
) -> Result<(), String> {
    let [tokens, layers, top_k] = r.shape;
    if [layers, top_k] != [first.shape[1], first.shape[2]] {
        return Err(format!(
            "shape [{tokens}, {layers}, {top_k}] differs from [_, {}, {}] of {}: every request \
             must have the same layers and top-k",
            first.shape[1], first.shape[2], first.location
        ));
    }
    if layers == 0 || top_k == 0 {
        return Err(format!(
            "shape [{tokens}, {layers}, {top_k}] has no selections"
        ));
    }
    check_sequence_name(&r.name)?;
    if !names.insert(r.name.clone()) {
        return Err(format!("a second request is named {:?}", r.name));
    }
    if r.prompt_tokens > tokens as u64 {
        return Err(format!(
            "the prompt length {} exceeds the {tokens} tokens recorded",
            r.prompt_tokens
        ));
    }
    for (s, sel) in r.ids.chunks_exact(top_k).enumerate() {
        let (t, l) = (s / layers, s % layers);
        for (i, &id) in sel.iter().enumerate() {
            if id < 0 || id >= i64::from(experts) {
                return Err(format!(
                    "token {t} layer {l}: expert id {id} is out of range: ids run from 0 to {}",
                    experts - 1
                ));
            }
            if sel[..i].contains(&id) {
                return Err(format!(
                    "token {t} layer {l}: expert id {id} is repeated inside one top-k selection"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(name: &str, prompt: u64, shape: [usize; 3], ids: Vec<i64>) -> RequestRouting {
        RequestRouting {
            name: name.into(),
            location: format!("{name}.npy"),
            prompt_tokens: prompt,
            shape,
            ids,
        }
    }

    #[test]
    fn requests_split_at_the_prompt_length() {
        let r = req("a", 1, [2, 2, 1], vec![3, 0, 1, 2]);
        let t = build_from_requests(vec![r], "x", "vllm", None, &Default::default()).unwrap();
        assert_eq!(t.header.sequences[0].prefill_tokens, 1);
        assert_eq!(t.header.sequences[0].decode_tokens, 1);
        assert_eq!(t.sequences[0].prefill.ids, [3, 0]);
        assert_eq!(t.sequences[0].decode.ids, [1, 2]);
        assert_eq!(t.header.model.layers.len(), 2);
        assert_eq!(t.header.model.layers[0].experts, 4);
    }

    #[test]
    fn bad_requests_name_where() {
        let o = Default::default();
        let e = |r: Vec<RequestRouting>| {
            build_from_requests(r, "x", "v", None, &o)
                .unwrap_err()
                .to_string()
        };
        assert!(e(vec![req("a", 0, [1, 1, 2], vec![1, 1])])
            .contains("a.npy: token 0 layer 0: expert id 1 is repeated"));
        assert!(e(vec![req("a", 0, [1, 1, 1], vec![-1])]).contains("expert id -1 is out of range"));
        assert!(e(vec![req("a", 3, [1, 1, 1], vec![0])]).contains("prompt length 3 exceeds"));
        let two = vec![
            req("a", 0, [1, 1, 1], vec![0]),
            req("a", 0, [1, 1, 1], vec![0]),
        ];
        assert!(e(two).contains("second request is named \"a\""));
        let two = vec![
            req("a", 0, [1, 1, 1], vec![0]),
            req("b", 0, [1, 2, 1], vec![0, 1]),
        ];
        assert!(e(two).contains("same layers and top-k"));
        assert!(e(vec![req("a", 0, [1, 1, 1], vec![70000])]).contains("65,535"));
    }
}
