import os
from typing import Any, Mapping, Optional, Sequence, Union

import pandas

from ._native import SimError as SimError, Trace as Trace

_Path = Union[str, "os.PathLike[str]"]
TraceArg = Union[Trace, _Path, None]

__all__ = ["SimError", "Trace", "run", "sweep", "plan", "compare", "import_trace", "gen",
           "export", "stats", "to_pandas"]
_Spec = Optional[Mapping[str, Any]]

def run(spec: _Spec = None, trace: TraceArg = None) -> dict[str, Any]:
    """`sim run --json`: inputs echo; streaming (MiB per MoE layer per step); with evict and
    budget, cache (page-ins, miss rate); with hw, timing (tokens/s, step times in us)."""
def sweep(spec: _Spec = None, trace: Union[TraceArg, Sequence[TraceArg]] = None) -> list[dict[str, Any]]:
    """`sim sweep --json`: one dict per mechanism x policy x budget row."""
def plan(spec: _Spec = None, trace: TraceArg = None) -> Any:
    """`sim plan --json`: per mechanism and policy the fastest budget that fits the GPU."""
def compare(spec: _Spec = None, traces: Union[TraceArg, Sequence[TraceArg]] = None) -> dict[str, Any]:
    """`sim compare`'s results.json: the grid and one entry per run."""
def import_trace(file: _Path, format: str, **options: Any) -> Trace:
    """`sim trace import --format FORMAT FILE` with its flags as options."""
def gen(**options: Any) -> Trace:
    """`sim trace gen` with its flags as options (preset, tokens, sequences, seed, ...)."""
def export(trace: TraceArg, format: str, out: _Path, **options: Any) -> None:
    """`sim trace export`: csv or oracle-general to `out`."""
def stats(trace: TraceArg, phase: str = "decode") -> dict[str, Any]:
    """`sim trace stats --json` over decode, prefill or all tokens."""
def to_pandas(result: Any) -> pandas.DataFrame:
    """One row per sweep row (nested blocks as block.field columns), or one for a run."""
