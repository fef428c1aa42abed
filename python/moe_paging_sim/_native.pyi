"""Type stubs of the Rust extension module (python/src/lib.rs). Use the wrappers in
moe_paging_sim, which take and return dicts; these take and return JSON text."""

import os
from typing import Any, Optional, Sequence, Union, final

import numpy as np
import numpy.typing as npt

_Path = Union[str, "os.PathLike[str]"]

__all__ = ["SimError", "Trace", "command_json", "import_trace", "gen", "export", "stats"]

class SimError(ValueError):
    """Bad input or a failed run, with the simulator's message."""

@final
class Trace:
    """A router trace held in memory: per sequence (request), the experts each MoE layer
    selected for each prompt (prefill) and generated (decode) token."""

    @staticmethod
    def load(path: _Path) -> "Trace":
        """Read a trace file (the `sim trace` binary format); runs read it from there."""
    def save(self, path: _Path) -> None:
        """Write the trace to `path` in the `sim trace` binary format (atomically)."""
    @staticmethod
    def from_arrays(
        arrays: Sequence[npt.NDArray[np.integer[Any]]],
        prompt_lengths: Sequence[int],
        *,
        names: Optional[Sequence[str]] = None,
        format: str = "vllm-routed-experts",
        num_experts: Optional[int] = None,
        model_name: Optional[str] = None,
        hidden_size: Optional[int] = None,
        expert_ffn: Optional[int] = None,
        source: Optional[str] = None,
    ) -> "Trace":
        """A trace from per-request routing arrays as vLLM (`routed_experts`) and SGLang
        (`meta_info.routed_experts`, decoded) return them.

        arrays: one integer array per request, shape [tokens, MoE layers, top_k] (prompt
            tokens first, then generated ones); any integer dtype, C or Fortran order.
        prompt_lengths: tokens of each request's prompt (its first rows are prefill).
        names: sequence names (default request-0, request-1, ...), unique.
        format: "vllm-routed-experts" or "sglang-routed-experts" (recorded as provenance).
        num_experts: routed experts per MoE layer (default: the largest id + 1).
        model_name, hidden_size, expert_ffn: the model's name and sizes (elements), from its
            config.json; with hidden_size and expert_ffn runs size experts from the header
            (3 x hidden x expert FFN parameters), without them give `expert_mib` in the spec.
        source: what results call the trace (default "arrays").

        Raises SimError naming the array and what is wrong: dtype not integer, not 3
        dimensions, ids out of range or repeated in one top-k, ragged layers or top-k across
        requests, a prompt longer than its array, duplicate names.
        """
    def header_json(self) -> str:
        """The header (model geometry, provenance, sequences) as JSON text."""
    @property
    def path(self) -> Optional["os.PathLike[str]"]:
        """The file the trace was loaded from (a pathlib.Path), or None."""
    @property
    def label(self) -> str:
        """What results name the trace (inputs.trace)."""
    @property
    def model(self) -> str:
        """The model name in the header."""
    @property
    def sequences(self) -> list[str]:
        """Sequence names, in order."""
    def routed_experts(self, index: int, phase: str) -> npt.NDArray[np.uint16]:
        """Sequence `index`'s experts in phase "prefill" or "decode", shape
        [tokens, MoE layers, top_k], uint16: the inverse of from_arrays."""

def command_json(command: str, spec_json: str, trace: Any = None) -> str: ...
def import_trace(format: str, file: _Path, options_json: str) -> Trace: ...
def gen(options_json: str) -> Trace: ...
def export(trace: Any, format: str, out: _Path, options_json: str) -> None: ...
def stats(trace: Any, phase: str) -> str: ...
