//! Importer for vLLM's routed experts (`--format vllm-routed-experts`).
//!
//! With `enable_return_routed_experts=True` (vLLM PR #28284, "rollout router replay"), each
//! `RequestOutput` carries `routed_experts`: an integer array of shape
//! [tokens, MoE layers, top_k] covering the prompt and the generated tokens. Saved with
//! `numpy.save` it is one `.npy` per request; the input is one such file, a directory of them
//! (sorted by file name) or one `.npz` (`numpy.savez`, entries in archive order). Each request
//! becomes a sequence named after the file stem or the entry name. The prompt length, which
//! the array does not carry, comes from `--prompt-tokens` (every request) or from
//! `--prompt-lengths FILE` (a JSON object `{"name": tokens}` or a CSV with the columns
//! `sequence,prompt_tokens`).
//!
//! NumPy files are read with the `npyz` crate and `.npz` archives with `zip`; any integer
//! dtype, either byte order and C or Fortran order are accepted.

use crate::error::TraceError;
use crate::import_arrays::{build_from_requests, RequestRouting};
use crate::import_rows::RowImportOptions;
use crate::trace::Trace;
use npyz::{DType, NpyFile, TypeChar};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// Elements reserved up front at most (16 Mi ids, 128 MiB as i64): beyond that the buffer
/// grows with the data actually read, so a header declaring a huge shape cannot make the
/// reader allocate it. (A design choice, not a measurement.)
const MAX_RESERVED_IDS: u64 = 1 << 24;

/// Import a `.npy` file, a directory of `.npy` files or a `.npz` archive.
pub fn import_vllm_routed_experts(
    path: &Path,
    opts: &RowImportOptions,
) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let arrays = read_arrays(path, &file)?;
    let lengths = PromptLengths::from_options(opts, &file)?;
    let mut requests = Vec::with_capacity(arrays.len());
    for (name, location, (shape, ids)) in arrays {
        let prompt_tokens = lengths.of(&name).map_err(|d| TraceError::Import {
            file: file.clone(),
            location: location.clone(),
            detail: d,
        })?;
        requests.push(RequestRouting {
            name,
            location,
            prompt_tokens,
            shape,
            ids,
        });
    }
    build_from_requests(requests, &file, "vllm-routed-experts", None, opts)
}

/// One array: (sequence name, location for messages, (shape, ids in C order)).
type NamedArray = (String, String, ([usize; 3], Vec<i64>));

fn read_arrays(path: &Path, file: &str) -> Result<Vec<NamedArray>, TraceError> {
    let import_err = |location: String, detail: String| TraceError::Import {
        file: file.to_string(),
        location,
        detail,
    };
    let open = |p: &Path| {
        std::fs::File::open(p).map_err(|e| TraceError::io(&p.display().to_string(), "opening", e))
    };
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| TraceError::io(file, "listing", e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "npy"))
            .collect();
        entries.sort();
        if entries.is_empty() {
            return Err(import_err("directory".into(), "holds no .npy file".into()));
        }
        let mut out = Vec::with_capacity(entries.len());
        for p in entries {
            let name = stem(&p);
            let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(u64::MAX);
            let array = read_npy(open(&p)?, len).map_err(|d| import_err(name.clone(), d))?;
            out.push((name.clone(), format!("{name}.npy"), array));
        }
        return Ok(out);
    }
    if path.extension().is_some_and(|x| x == "npz") {
        return read_npz(open(path)?, file);
    }
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(u64::MAX);
    let name = stem(path);
    let array = read_npy(open(path)?, len).map_err(|d| import_err("array".into(), d))?;
    Ok(vec![(name.clone(), format!("{name}.npy"), array)])
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Every `.npy` entry of an `.npz` archive, in archive order.
fn read_npz(f: std::fs::File, file: &str) -> Result<Vec<NamedArray>, TraceError> {
    let err = |location: String, detail: String| TraceError::Import {
        file: file.to_string(),
        location,
        detail,
    };
    let mut zip = zip::ZipArchive::new(f).map_err(|e| {
        err(
            "archive".into(),
            format!("not a readable .npz (zip) archive: {e}"),
        )
    })?;
    let mut out = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let entry = zip
            .by_index(i)
            .map_err(|e| err(format!("archive entry {i}"), e.to_string()))?;
        let full = entry.name().map(|n| n.into_owned()).unwrap_or_default();
        let Some(name) = full.strip_suffix(".npy").map(String::from) else {
            continue;
        };
        let size = entry.size();
        let array = read_npy(entry, size).map_err(|d| err(full.clone(), d))?;
        out.push((name, full, array));
    }
    if out.is_empty() {
        return Err(err("archive".into(), "holds no .npy entry".into()));
    }
    Ok(out)
}

/// Read one `.npy` stream of at most `available` bytes: a 3-dimensional integer array.
fn read_npy(reader: impl Read, available: u64) -> Result<([usize; 3], Vec<i64>), String> {
    let npy = NpyFile::new(reader).map_err(|e| format!("not a NumPy .npy array: {e}"))?;
    let shape: [u64; 3] = npy.shape().try_into().map_err(|_| {
        format!(
            "shape {:?} is not [tokens, layers, top_k] (3 dimensions)",
            npy.shape()
        )
    })?;
    let DType::Plain(ty) = npy.dtype() else {
        return Err(format!(
            "dtype {} is not an integer type",
            npy.dtype().descr()
        ));
    };
    let elements = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    let bytes = elements.and_then(|n| n.checked_mul(ty.size_field()));
    match bytes {
        Some(b) if b <= available => {}
        _ => {
            return Err(format!(
                "shape {shape:?} of {ty} needs more bytes than the {available} the file holds"
            ))
        }
    }
    let elements = elements.expect("checked above");
    let strides: Vec<u64> = npy.strides().to_vec();
    let flat = read_ints(npy, &ty, elements)?;
    let shape_us = shape.map(|d| d as usize);
    Ok((shape_us, c_order(&flat, shape_us, &strides)))
}

/// The array's elements in storage order, as i64 (unsigned values above i64::MAX saturate,
/// which is out of any id range anyway).
fn read_ints<R: Read>(npy: NpyFile<R>, ty: &npyz::TypeStr, n: u64) -> Result<Vec<i64>, String> {
    fn collect<T: npyz::Deserialize, R: Read>(
        npy: NpyFile<R>,
        n: u64,
        conv: fn(T) -> i64,
    ) -> Result<Vec<i64>, String> {
        let mut out = Vec::with_capacity(n.min(MAX_RESERVED_IDS) as usize);
        for x in npy.data::<T>().map_err(|e| e.to_string())? {
            out.push(conv(x.map_err(|e| format!("reading the array data: {e}"))?));
        }
        Ok(out)
    }
    match (ty.type_char(), ty.size_field()) {
        (TypeChar::Int, 1) => collect::<i8, R>(npy, n, i64::from),
        (TypeChar::Int, 2) => collect::<i16, R>(npy, n, i64::from),
        (TypeChar::Int, 4) => collect::<i32, R>(npy, n, i64::from),
        (TypeChar::Int, 8) => collect::<i64, R>(npy, n, |x| x),
        (TypeChar::Uint, 1) => collect::<u8, R>(npy, n, i64::from),
        (TypeChar::Uint, 2) => collect::<u16, R>(npy, n, i64::from),
        (TypeChar::Uint, 4) => collect::<u32, R>(npy, n, i64::from),
        (TypeChar::Uint, 8) => collect::<u64, R>(npy, n, |x| i64::try_from(x).unwrap_or(i64::MAX)),
        _ => Err(format!(
            "dtype {ty} is not an integer type; save the expert ids as integers"
        )),
    }
}

/// Reorder elements stored with `strides` (in elements) into C order.
fn c_order(flat: &[i64], shape: [usize; 3], strides: &[u64]) -> Vec<i64> {
    let c = [(shape[1] * shape[2]) as u64, shape[2] as u64, 1];
    if strides == c {
        return flat.to_vec();
    }
    let mut out = Vec::with_capacity(flat.len());
    for t in 0..shape[0] as u64 {
        for l in 0..shape[1] as u64 {
            for k in 0..shape[2] as u64 {
                out.push(flat[(t * strides[0] + l * strides[1] + k * strides[2]) as usize]);
            }
        }
    }
    out
}

/// Where prompt lengths come from.
pub(crate) enum PromptLengths {
    /// The same for every request (`--prompt-tokens`).
    All(u64),
    /// Per request name (`--prompt-lengths FILE`), with the file for messages.
    ByName(HashMap<String, u64>, String),
}

impl PromptLengths {
    fn from_options(opts: &RowImportOptions, file: &str) -> Result<Self, TraceError> {
        match (&opts.prompt_lengths, opts.prompt_tokens) {
            (Some(p), _) => read_prompt_lengths(p),
            (None, Some(n)) => Ok(PromptLengths::All(n)),
            (None, None) => Err(TraceError::Import {
                file: file.to_string(),
                location: "options".into(),
                detail: "the arrays do not say where the prompt ends: give --prompt-tokens N \
                         (every request) or --prompt-lengths FILE (JSON {\"name\": tokens} or \
                         CSV sequence,prompt_tokens); --prompt-tokens 0 counts every token as \
                         decode"
                    .into(),
            }),
        }
    }

    fn of(&self, name: &str) -> Result<u64, String> {
        match self {
            PromptLengths::All(n) => Ok(*n),
            PromptLengths::ByName(m, f) => m.get(name).copied().ok_or_else(|| {
                format!("{f} (--prompt-lengths) gives no prompt length for {name:?}")
            }),
        }
    }
}

/// Read a `--prompt-lengths` file: a JSON object of integers, or CSV `sequence,prompt_tokens`.
pub(crate) fn read_prompt_lengths(path: &Path) -> Result<PromptLengths, TraceError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TraceError::io(&file, "reading", e))?;
    let text = text.trim_start_matches('\u{feff}');
    let err = |location: String, detail: String| TraceError::Import {
        file: file.clone(),
        location,
        detail,
    };
    let mut map = HashMap::new();
    if text.trim_start().starts_with('{') {
        let obj: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| {
                err(
                    format!("line {}", e.line()),
                    format!("not a JSON object: {e}"),
                )
            })?;
        for (k, v) in obj {
            let n = v.as_u64().ok_or_else(|| {
                err(
                    format!("{k:?}"),
                    format!("prompt length {v} is not an integer >= 0"),
                )
            })?;
            map.insert(k, n);
        }
    } else {
        let mut rdr = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        #[derive(serde::Deserialize)]
        struct Line {
            sequence: String,
            prompt_tokens: String,
        }
        for rec in rdr.deserialize::<Line>() {
            let rec = rec.map_err(|e| {
                err(
                    "csv".into(),
                    format!("{e} (expected columns sequence,prompt_tokens)"),
                )
            })?;
            let n = crate::import_fields::parse_uint(
                &rec.prompt_tokens,
                "prompt_tokens",
                "an integer >= 0",
            )
            .map_err(|d| err(format!("{:?}", rec.sequence), d))?;
            map.insert(rec.sequence, n);
        }
    }
    Ok(PromptLengths::ByName(map, file))
}
