"""moe_paging_sim: the MoE expert-paging simulator from Python.

Run, sweep, plan and compare paging mechanisms and retention policies on router traces,
including NumPy arrays straight from vLLM (``routed_experts``) and SGLang
(``meta_info.routed_experts``). A *spec* is a dict of the options of the ``sim`` command of
the same name (``{"policy": "e2", "evict": "lru", "budget": "50%"}`` is
``--policy e2 --evict lru --budget 50%``: underscores for dashes, ``True`` for a bare flag, a
list to repeat a flag); results are the dicts that command prints with ``--json``.

Errors are :class:`SimError` (a ``ValueError``) with the simulator's message. Runs release
the GIL. See docs/guide/python.md.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional, Sequence, Union

from . import _native
from ._native import SimError, Trace

__all__ = [
    "SimError",
    "Trace",
    "run",
    "sweep",
    "plan",
    "compare",
    "import_trace",
    "gen",
    "export",
    "stats",
    "to_pandas",
]

TraceArg = Union[Trace, str, "os.PathLike[str]", None]


def _spec(spec: Optional[Mapping[str, Any]]) -> str:
    if spec is None:
        return "{}"
    if not isinstance(spec, Mapping):
        raise SimError(f"the spec must be a dict of options, not {type(spec).__name__}")
    return json.dumps(dict(spec))


def _path(p: Any) -> Any:
    return os.fspath(p) if isinstance(p, os.PathLike) else p


def _traces(trace: Any) -> Any:
    if isinstance(trace, (list, tuple)):
        return [_path(t) for t in trace]
    return _path(trace)


def run(spec: Optional[Mapping[str, Any]] = None, trace: TraceArg = None) -> dict:
    """One mechanism on one trace: ``sim run --json``.

    spec: options of ``sim run`` (policy, evict, budget, hw, batch, ...).
    trace: a :class:`Trace`, a trace file path, or None for the bundled granite prose trace.
    Returns the ``--json`` object: ``inputs``, ``streaming`` (MiB per MoE layer per step),
    and ``cache`` (page-ins, miss rate), ``timing`` (tokens/s, step times in microseconds)
    blocks when the spec asks for them.
    """
    return json.loads(_native.command_json("run", _spec(spec), _traces(trace)))


def sweep(spec: Optional[Mapping[str, Any]] = None, trace: Union[TraceArg, Sequence[TraceArg]] = None) -> list:
    """Many mechanisms / policies / budgets: ``sim sweep --json``, one dict per row.

    spec: options of ``sim sweep`` (policies, evict, budgets, hw, ...); ``trace`` may be a
    list (one set of rows per trace).
    """
    return json.loads(_native.command_json("sweep", _spec(spec), _traces(trace)))


def plan(spec: Optional[Mapping[str, Any]] = None, trace: TraceArg = None) -> Any:
    """The best expert budget per mechanism and policy that fits the GPU: ``sim plan --json``.

    spec: options of ``sim plan`` (hw, model_config or preset, batch, context, ...).
    """
    return json.loads(_native.command_json("plan", _spec(spec), _traces(trace)))


def compare(spec: Optional[Mapping[str, Any]] = None, traces: Union[TraceArg, Sequence[TraceArg]] = None) -> dict:
    """A grid of mechanisms and policies on traces: ``sim compare``'s ``results.json``."""
    return json.loads(_native.command_json("compare", _spec(spec), _traces(traces)))


def import_trace(file: Union[str, "os.PathLike[str]"], format: str, **options: Any) -> Trace:
    """Convert a log (``sim trace import --format FORMAT FILE``; options are its flags,
    e.g. ``prompt_tokens=16``, ``hidden_size=1024``) into a :class:`Trace`, without a file."""
    return _native.import_trace(format, _path(file), _spec(options))


def gen(**options: Any) -> Trace:
    """A synthetic trace: ``sim trace gen`` with these options (``preset``, ``tokens``,
    ``sequences``, ``zipf``, ``seed``, ``fit_to``, ...)."""
    return _native.gen(_spec(options))


def export(trace: TraceArg, format: str, out: Union[str, "os.PathLike[str]"], **options: Any) -> None:
    """Write ``trace`` to ``out`` as CSV rows or libCacheSim oracleGeneral
    (``sim trace export``; options: ``phase``, ``object_size``, ``dtype``)."""
    _native.export(_path(trace), format, _path(out), _spec(options))


def stats(trace: TraceArg, phase: str = "decode") -> dict:
    """Trace statistics (``sim trace stats --json``): popularity skew, concentration,
    always-on keys, temporal reuse, next-layer predictability. phase: decode, prefill, all."""
    return json.loads(_native.stats(_path(trace), phase))


def to_pandas(result: Any):
    """A pandas DataFrame of a result: one row per sweep row (nested blocks flattened to
    ``block.field`` columns), or one row for a single run. Needs pandas."""
    try:
        import pandas as pd
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("to_pandas needs pandas: pip install pandas") from e
    rows = result if isinstance(result, list) else [result]
    return pd.json_normalize(rows, sep=".")
