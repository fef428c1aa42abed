//! The one exception the package raises for bad input or a failed run: `SimError`, a
//! `ValueError`, carrying the simulator's own message (what was wrong and how to fix it).

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::PyErr;

create_exception!(
    _native,
    SimError,
    PyValueError,
    "Bad input or a failed run, with the simulator's message."
);

/// A library error as a `SimError` with its message (every cause, as the CLI prints it).
pub fn to_py(e: impl Into<anyhow::Error>) -> PyErr {
    let e: anyhow::Error = e.into();
    SimError::new_err(sim::cmd::errors::message(&e))
}
