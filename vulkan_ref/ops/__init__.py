"""Vulkan op implementations, one module per op: each adds nodes to the `ComputeGraph`.

An implementation checks what it can at load (`GraphBuildError`), adds its dispatch nodes
with a `resize_fn` that virtual-resizes its outputs from live input sizes, and pickers that
choose shader and global size at run time, as ExecuTorch's `add_*_node` functions do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from vulkan_ref.ops import binary_op, linear_q4gsw, rms_norm

if TYPE_CHECKING:
    from graph_format import OpNode
    from vulkan_ref.graph import ComputeGraph

OpImpl = Callable[["ComputeGraph", "OpNode"], None]

OP_IMPLS: dict[str, OpImpl] = {
    "rms_norm": rms_norm.add_rms_norm_node,
    "add": binary_op.add_binary_op_node,
    "mul": binary_op.add_binary_op_node,
    "linear_q4gsw": linear_q4gsw.add_linear_q4gsw_node,
}
