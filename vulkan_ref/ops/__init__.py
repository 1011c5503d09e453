"""Vulkan op implementations, one module per op: each adds nodes to the `ComputeGraph`.

An implementation checks what it can at load (`GraphBuildError`), adds its dispatch nodes
with a `resize_fn` that virtual-resizes its outputs from live input sizes, and pickers that
choose shader and global size at run time, as ExecuTorch's `add_*_node` functions do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from vulkan_ref.ops import (
    activation,
    binary_op,
    embedding_q4gsw,
    linear_q4gsw,
    rms_norm,
    rotary,
    sdpa,
    view,
)

if TYPE_CHECKING:
    from graph_format import OpNode
    from vulkan_ref.graph import ComputeGraph

OpImpl = Callable[["ComputeGraph", "OpNode"], None]

OP_IMPLS: dict[str, OpImpl] = {
    "rms_norm": rms_norm.add_rms_norm_node,
    "add": binary_op.add_binary_op_node,
    "mul": binary_op.add_binary_op_node,
    "sigmoid": activation.add_unary_activation_node,
    "silu": activation.add_unary_activation_node,
    "silu_mul": activation.add_silu_mul_node,
    "embedding_q4gsw": embedding_q4gsw.add_embedding_q4gsw_node,
    "apply_rotary_emb": rotary.add_rotary_emb_node,
    "apply_rotary_emb_hf": rotary.add_rotary_emb_hf_node,
    "view_copy": view.add_view_copy_node,
    "sym_size": view.add_sym_size_node,
    "sdpa_with_kv_cache": sdpa.add_sdpa_with_kv_cache_node,
    "linear_q4gsw": linear_q4gsw.add_linear_q4gsw_node,
}
