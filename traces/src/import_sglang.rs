//! Importer for SGLang's routed experts (`--format sglang-routed-experts`).
//!
//! An SGLang server started with `--enable-return-routed-experts` answers a request sent with
//! `"return_routed_experts": true` with `meta_info.routed_experts`: the base64 encoding of the
//! int32 little-endian array [tokens, MoE layers, top_k], flat (SGLang's own decoding is
//! `np.frombuffer(base64.b64decode(s), np.int32).reshape(-1, layers, top_k)`). The input holds
//! one response per line (a line may also hold a JSON array of responses, as a batched
//! `/generate` returns). The array has no shape, so `--moe-layers` and `--top-k` give it; the
//! prompt length is `meta_info.prompt_tokens` (or `--prompt-tokens`); a response is named by
//! `meta_info.id`, else by its line (`line-3`, `line-3.1` inside an array).

use crate::error::TraceError;
use crate::import_arrays::{build_from_requests, RequestRouting};
use crate::import_rows::RowImportOptions;
use crate::trace::Trace;
use base64::Engine;
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;

/// Import a JSON Lines file of SGLang responses.
pub fn import_sglang_routed_experts(
    path: &Path,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| TraceError::io(&file, "opening", e))?;
    parse_sglang(std::io::BufReader::new(f), &file, opts)
}

/// Import SGLang responses from any buffered reader; `file` names it in errors.
pub fn parse_sglang(
    input: impl BufRead,
    file: &str,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    let err = |location: String, detail: String| TraceError::Import {
        file: file.to_string(),
        location,
        detail,
    };
    let (Some(layers), Some(top_k)) = (opts.moe_layers, opts.top_k) else {
        return Err(err(
            "options".into(),
            "SGLang's routed experts are a flat array: give its shape with --moe-layers L \
             (the model's MoE layers, e.g. 48 for Qwen3-30B-A3B) and --top-k K (e.g. 8)"
                .into(),
        ));
    };
    let mut requests = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let at = format!("line {}", i + 1);
        let text = line.map_err(|e| TraceError::io(file, "reading", e))?;
        let text = if i == 0 {
            text.trim_start_matches('\u{feff}')
        } else {
            &text
        };
        if text.trim().is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(text).map_err(|e| err(at.clone(), format!("not JSON: {e}")))?;
        let responses: Vec<(String, &Value)> = match &value {
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(j, v)| (format!("{at}.{j}"), v))
                .collect(),
            v => vec![(at.clone(), v)],
        };
        for (location, response) in responses {
            let r = request(response, &location, [layers, top_k as usize], opts)
                .map_err(|d| err(location.clone(), d))?;
            requests.push(r);
        }
    }
    build_from_requests(requests, file, "sglang-routed-experts", None, opts)
}

/// One response's routing.
fn request(
    response: &Value,
    location: &str,
    [layers, top_k]: [usize; 2],
    opts: &RowImportOptions,
) -> Result<RequestRouting, String> {
    let meta = response
        .get("meta_info")
        .ok_or("no `meta_info`: not an SGLang response")?;
    let encoded = meta
        .get("routed_experts")
        .and_then(Value::as_str)
        .ok_or("no `meta_info.routed_experts` string: send the request with \"return_routed_experts\": true to a server started with --enable-return-routed-experts")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("`meta_info.routed_experts` is not base64: {e}"))?;
    let per_token = layers * top_k * 4;
    if per_token == 0 || bytes.len() % per_token != 0 {
        return Err(format!(
            "`meta_info.routed_experts` holds {} bytes, not a whole number of tokens of \
             {layers} layers x top-{top_k} x 4 bytes: check --moe-layers and --top-k",
            bytes.len()
        ));
    }
    let ids: Vec<i64> = bytes
        .chunks_exact(4)
        .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    let tokens = bytes.len() / per_token;
    let prompt_tokens = match opts.prompt_tokens {
        Some(n) => n,
        None => meta
            .get("prompt_tokens")
            .and_then(Value::as_u64)
            .ok_or("no `meta_info.prompt_tokens`: give --prompt-tokens")?,
    };
    let name = match meta.get("id") {
        Some(Value::String(s)) => s.clone(),
        _ => location.replace(' ', "-"),
    };
    Ok(RequestRouting {
        name,
        location: location.to_string(),
        prompt_tokens,
        shape: [tokens, layers, top_k],
        ids,
    })
}
