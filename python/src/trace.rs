//! The `Trace` class: a router trace held in memory (`traces::Trace`), built from NumPy
//! arrays, loaded from a trace file or made by an importer or the generator; and the trace
//! argument of the run functions (a `Trace`, a path, or `None` for the bundled prose trace).

use crate::error::{to_py, SimError};
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use std::path::{Path, PathBuf};
use traces::import_memory::{import_routed_arrays, RoutedArray};

/// A router trace: for every sequence (request), which experts each MoE layer selected for
/// each prompt (prefill) and generated (decode) token.
#[pyclass(frozen, module = "moe_paging_sim._native")]
pub struct Trace {
    pub(crate) inner: traces::Trace,
    /// The file it was loaded from, unchanged since: runs read it from there and name it
    /// as the CLI does.
    pub(crate) path: Option<PathBuf>,
    /// What results call the trace when it has no file (`inputs.trace`).
    pub(crate) label: String,
}

/// Where a run reads the trace: a path, or a `Trace` written to a temporary file that is
/// removed when this is dropped (`label` then replaces its path in the results).
pub struct TraceFile {
    pub path: PathBuf,
    pub label: Option<String>,
    _temp: Option<tempfile::TempPath>,
}

impl TraceFile {
    /// The trace argument of a run function: a `Trace`, or a path (`str` or `os.PathLike`).
    pub fn of(obj: &Bound<'_, PyAny>) -> PyResult<TraceFile> {
        if let Ok(t) = obj.downcast::<Trace>() {
            return t.get().file();
        }
        let path: PathBuf = obj.extract().map_err(|_| {
            SimError::new_err(
                "trace must be a Trace, a path to a trace file, or None (the bundled prose trace)",
            )
        })?;
        Ok(TraceFile {
            path,
            label: None,
            _temp: None,
        })
    }
}

impl Trace {
    /// The file a run reads: the one it came from, or a temporary copy.
    pub(crate) fn file(&self) -> PyResult<TraceFile> {
        if let Some(p) = &self.path {
            return Ok(TraceFile {
                path: p.clone(),
                label: None,
                _temp: None,
            });
        }
        let temp = tempfile::Builder::new()
            .prefix("moe-paging-sim-")
            .suffix(".bin")
            .tempfile()
            .map_err(|e| {
                SimError::new_err(format!(
                    "creating a temporary trace file (set TMPDIR to a writable directory): {e}"
                ))
            })?
            .into_temp_path();
        traces::write_file(&temp, &self.inner).map_err(to_py)?;
        Ok(TraceFile {
            path: temp.to_path_buf(),
            label: Some(self.label.clone()),
            _temp: Some(temp),
        })
    }

    /// A trace read from `path` (kept as its file).
    pub(crate) fn read(path: &Path, keep_path: bool) -> PyResult<Trace> {
        sim::runner::require_trace_file(path).map_err(to_py)?;
        let inner = traces::read_file(path).map_err(to_py)?;
        Ok(Trace {
            inner,
            path: keep_path.then(|| path.to_path_buf()),
            label: path.display().to_string(),
        })
    }
}

#[pymethods]
impl Trace {
    /// Read a trace file (the `sim trace` binary format).
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Trace> {
        Trace::read(&path, true)
    }

    /// Write the trace to `path` in the `sim trace` binary format (atomically).
    fn save(&self, path: PathBuf) -> PyResult<()> {
        traces::write_file(&path, &self.inner).map_err(to_py)
    }

    /// A trace from per-request routing arrays, as vLLM (`routed_experts`) and SGLang
    /// (`meta_info.routed_experts`, decoded) return them: each array an integer array of
    /// shape [tokens, MoE layers, top_k] covering the prompt and then the generated tokens;
    /// `prompt_lengths[i]` of array i's rows are its prompt (prefill).
    #[staticmethod]
    #[pyo3(signature = (arrays, prompt_lengths, *, names=None, format="vllm-routed-experts",
                        num_experts=None, model_name=None, hidden_size=None, expert_ffn=None,
                        source=None))]
    #[allow(clippy::too_many_arguments)]
    fn from_arrays(
        arrays: Vec<Bound<'_, PyAny>>,
        prompt_lengths: Vec<i64>,
        names: Option<Vec<String>>,
        format: &str,
        num_experts: Option<u16>,
        model_name: Option<String>,
        hidden_size: Option<u32>,
        expert_ffn: Option<u32>,
        source: Option<String>,
    ) -> PyResult<Trace> {
        if prompt_lengths.len() != arrays.len() {
            return Err(SimError::new_err(format!(
                "{} arrays but {} prompt lengths: give one prompt length per array",
                arrays.len(),
                prompt_lengths.len()
            )));
        }
        let names = match names {
            Some(n) if n.len() != arrays.len() => {
                return Err(SimError::new_err(format!(
                    "{} arrays but {} names: give one name per array",
                    arrays.len(),
                    n.len()
                )))
            }
            Some(n) => n,
            None => (0..arrays.len()).map(|i| format!("request-{i}")).collect(),
        };
        let mut routed = Vec::with_capacity(arrays.len());
        for (i, ((a, &prompt), name)) in arrays.iter().zip(&prompt_lengths).zip(names).enumerate() {
            let at = |d: String| SimError::new_err(format!("array {i} ({name:?}): {d}"));
            let (shape, ids) = ids_of(a).map_err(at)?;
            let prompt_tokens = u64::try_from(prompt)
                .map_err(|_| at(format!("prompt length {prompt} is negative")))?;
            routed.push(RoutedArray {
                name,
                prompt_tokens,
                shape,
                ids,
            });
        }
        let label = source.clone().unwrap_or_else(|| "arrays".to_string());
        let opts = traces::RowImportOptions {
            common: traces::ImportOptions {
                model_name,
                hidden_size,
                expert_ffn,
                source,
                ..Default::default()
            },
            num_experts,
            ..Default::default()
        };
        let inner = import_routed_arrays(routed, &label, format, &opts).map_err(to_py)?;
        Ok(Trace {
            inner,
            path: None,
            label,
        })
    }

    /// The header (model geometry, provenance, sequences) as JSON text.
    fn header_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.inner.header).map_err(|e| SimError::new_err(e.to_string()))
    }

    /// The file the trace was loaded from, or None.
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.path.clone()
    }

    /// What results name the trace: its path, or the source given when it was built.
    #[getter]
    fn label(&self) -> String {
        self.label.clone()
    }

    /// The model name recorded in the header.
    #[getter]
    fn model(&self) -> String {
        self.inner.header.model.name.clone()
    }

    /// The sequence names, in order.
    #[getter]
    fn sequences(&self) -> Vec<String> {
        self.inner
            .header
            .sequences
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    /// The routed experts of sequence `index` in `phase` ("prefill" or "decode") as an
    /// array of shape [tokens, MoE layers, top_k] (uint16), the inverse of `from_arrays`.
    fn routed_experts<'py>(
        &self,
        py: Python<'py>,
        index: usize,
        phase: &str,
    ) -> PyResult<Bound<'py, PyArrayDyn<u16>>> {
        let Some(seq) = self.inner.sequences.get(index) else {
            return Err(SimError::new_err(format!(
                "sequence {index} is out of range: the trace has {}",
                self.inner.sequences.len()
            )));
        };
        let block = match phase {
            "prefill" => &seq.prefill,
            "decode" => &seq.decode,
            _ => {
                return Err(SimError::new_err(format!(
                    "phase {phase:?} is not prefill or decode"
                )))
            }
        };
        let moe: Vec<_> = self
            .inner
            .header
            .model
            .layers
            .iter()
            .filter(|l| l.top_k > 0)
            .collect();
        let top_k = moe.first().map_or(0, |l| usize::from(l.top_k));
        if moe.iter().any(|l| usize::from(l.top_k) != top_k) {
            return Err(SimError::new_err(
                "the MoE layers select different top-k: no one array shape holds them",
            ));
        }
        let per_token = moe.len() * top_k;
        let tokens = block.ids.len().checked_div(per_token).unwrap_or(0);
        let a = numpy::ndarray::Array::from_shape_vec(
            vec![tokens, moe.len(), top_k],
            block.ids.clone(),
        )
        .map_err(|e| SimError::new_err(e.to_string()))?;
        Ok(numpy::PyArray::from_owned_array(py, a))
    }

    fn __repr__(&self) -> String {
        let h = &self.inner.header;
        let moe = h.model.layers.iter().filter(|l| l.top_k > 0).count();
        let decode: u64 = h.sequences.iter().map(|s| s.decode_tokens).sum();
        let prefill: u64 = h.sequences.iter().map(|s| s.prefill_tokens).sum();
        format!(
            "Trace({:?}, model {:?}, {moe} MoE layers, {} sequences, {prefill} prefill + {decode} decode tokens)",
            self.label,
            h.model.name,
            h.sequences.len()
        )
    }
}

/// The shape and the ids (C order) of a 3-dimensional NumPy integer array; an error naming
/// the dimension count or the dtype otherwise.
fn ids_of(a: &Bound<'_, PyAny>) -> Result<([usize; 3], Vec<i64>), String> {
    let untyped = a
        .downcast::<PyUntypedArray>()
        .map_err(|_| "not a NumPy array (give numpy.ndarray of integers)".to_string())?;
    let shape: [usize; 3] = untyped.shape().try_into().map_err(|_| {
        format!(
            "shape {:?} is not [tokens, layers, top_k] (3 dimensions)",
            untyped.shape()
        )
    })?;
    macro_rules! try_types {
        ($($t:ty),*) => {$(
            if let Ok(typed) = a.downcast::<PyArrayDyn<$t>>() {
                let ro = typed.try_readonly().map_err(|e| format!("cannot read the array: {e}"))?;
                let ids = ro.as_array().iter().map(|&x| i64::try_from(x).unwrap_or(i64::MAX)).collect();
                return Ok((shape, ids));
            }
        )*};
    }
    try_types!(i64, i32, i16, i8, u64, u32, u16, u8);
    Err(format!("dtype {} is not an integer type", untyped.dtype()))
}
