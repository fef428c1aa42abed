//! `moe_paging_sim._native`: the Rust side of the Python package `moe_paging_sim` (PyO3,
//! abi3). The Python package (`python/moe_paging_sim/`) wraps it: it turns spec dicts into
//! JSON text and results back into dicts, and adds `to_pandas`.
//!
//! Every function that simulates releases the GIL while it runs. Errors are `SimError`
//! (a `ValueError`) with the simulator's message.

mod cli;
mod error;
mod run;
mod tools;
mod trace;

use error::{to_py, SimError};
use pyo3::prelude::*;
use std::path::PathBuf;
use trace::{Trace, TraceFile};

/// The spec dict, as the JSON text the Python side sends.
fn spec_of(json: &str) -> PyResult<serde_json::Value> {
    serde_json::from_str(json).map_err(|e| SimError::new_err(format!("the spec is not JSON: {e}")))
}

/// The trace arguments of a run: `None` (the bundled trace), one trace or a list of them.
fn traces_of(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<TraceFile>> {
    match obj {
        None => Ok(Vec::new()),
        Some(o) if o.is_none() => Ok(Vec::new()),
        Some(o)
            if o.is_instance_of::<pyo3::types::PyList>()
                || o.is_instance_of::<pyo3::types::PyTuple>() =>
        {
            o.try_iter()?.map(|t| TraceFile::of(&t?)).collect()
        }
        Some(o) => Ok(vec![TraceFile::of(o)?]),
    }
}

/// `sim COMMAND --json` (run, sweep, plan, compare) with the options of `spec_json` on
/// `trace`; the JSON text of its output. The GIL is released while it runs.
#[pyfunction]
#[pyo3(signature = (command, spec_json, trace=None))]
fn command_json(
    py: Python<'_>,
    command: &str,
    spec_json: &str,
    trace: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    if !["run", "sweep", "plan", "compare"].contains(&command) {
        return Err(SimError::new_err(format!(
            "{command:?} is not one of run, sweep, plan, compare"
        )));
    }
    let spec = spec_of(spec_json)?;
    let files = traces_of(trace)?;
    let value = py
        .allow_threads(|| run::command_json(command, &spec, &files))
        .map_err(to_py)?;
    Ok(value.to_string())
}

/// `sim trace import --format FORMAT FILE` with the options of `options_json`.
#[pyfunction]
fn import_trace(
    py: Python<'_>,
    format: &str,
    file: PathBuf,
    options_json: &str,
) -> PyResult<Trace> {
    let options = spec_of(options_json)?;
    let (inner, label) = py
        .allow_threads(|| tools::import(format, &file, &options))
        .map_err(to_py)?;
    Ok(Trace {
        inner,
        path: None,
        label,
    })
}

/// `sim trace gen` with the options of `options_json`.
#[pyfunction]
fn gen(py: Python<'_>, options_json: &str) -> PyResult<Trace> {
    let options = spec_of(options_json)?;
    let inner = py.allow_threads(|| tools::gen(&options)).map_err(to_py)?;
    let label = format!("gen:{}", inner.header.model.name);
    Ok(Trace {
        inner,
        path: None,
        label,
    })
}

/// `sim trace export --format FORMAT TRACE --out OUT` with the options of `options_json`.
#[pyfunction]
fn export(
    py: Python<'_>,
    trace: &Bound<'_, PyAny>,
    format: &str,
    out: PathBuf,
    options_json: &str,
) -> PyResult<()> {
    let options = spec_of(options_json)?;
    let file = TraceFile::of(trace)?;
    py.allow_threads(|| tools::export(&file, format, &out, &options))
        .map_err(to_py)
}

/// `sim trace stats --json --phase PHASE TRACE`, as JSON text.
#[pyfunction]
fn stats(py: Python<'_>, trace: &Bound<'_, PyAny>, phase: &str) -> PyResult<String> {
    let file = TraceFile::of(trace)?;
    let v = py
        .allow_threads(|| tools::stats(&file, phase))
        .map_err(to_py)?;
    Ok(v.to_string())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Trace>()?;
    m.add("SimError", m.py().get_type::<SimError>())?;
    m.add_function(wrap_pyfunction!(command_json, m)?)?;
    m.add_function(wrap_pyfunction!(import_trace, m)?)?;
    m.add_function(wrap_pyfunction!(gen, m)?)?;
    m.add_function(wrap_pyfunction!(export, m)?)?;
    m.add_function(wrap_pyfunction!(stats, m)?)?;
    Ok(())
}
