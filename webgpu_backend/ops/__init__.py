"""WebGPU op builders, one module per op: each records dispatches and registers resize hooks.

A builder validates what it can at load (dtypes, ranks, formats: `GraphBuildError`), records
its dispatch slots with `WebGPUGraph.add_dispatch` and registers a hook on every value it
reads, which recomputes params, workgroup counts and its outputs' `cur_dims`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from webgpu_backend.ops import (
    activation,
    binary,
    embedding_q4gsw,
    linear_q4gsw,
    rms_norm,
    rotary,
    sdpa,
    view,
)

if TYPE_CHECKING:
    from graph_format import OpNode
    from webgpu_backend.graph import WebGPUGraph

OpBuilder = Callable[["WebGPUGraph", "OpNode"], None]

OP_BUILDERS: dict[str, OpBuilder] = {
    "rms_norm": rms_norm.build,
    "add": binary.build,
    "mul": binary.build,
    "sigmoid": activation.build_unary,
    "silu": activation.build_unary,
    "silu_mul": activation.build_silu_mul,
    "embedding_q4gsw": embedding_q4gsw.build,
    "apply_rotary_emb": rotary.build_llama,
    "apply_rotary_emb_hf": rotary.build_hf,
    "view_copy": view.build_view_copy,
    "sym_size": view.build_sym_size,
    "sdpa_with_kv_cache": sdpa.build,
    "linear_q4gsw": linear_q4gsw.build,
}
