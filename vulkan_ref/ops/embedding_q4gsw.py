"""embedding_q4gsw on Vulkan: one dispatch node, one invocation per output element.

The weight stays in its uint8 `[vocab, D/2]` bytes (no repack: the shader reads bytes out of
32-bit words), the group size is a specialization constant (`GROUP_SIZE`, from the value
`group_size`) and the shader reads D and the vocabulary from the metadata UBOs. Token ids
are checked on the host before any resize (`add_input_check`); upstream reads an
out-of-range row unchecked. `is_linear_weight` (1 when left out) picks the shader at load, as
upstream's IS_LINEAR_WEIGHT variant: `embedding_q4gsw` (even element in the low nibble) or
`embedding_q4gsw_even_high` (0: in the high nibble).
"""

from __future__ import annotations

import numpy as np

from graph_format import FLOAT_DTYPES, InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.ops import register
from vulkan_ref.ops.activation import elementwise_values
from vulkan_ref.tensor import VTensor

WORKGROUP = 64


def _nibble_slot(graph: ComputeGraph, node: OpNode) -> str:
    """The kernel slot `is_linear_weight` picks (1, the default: even element in the low nibble)."""
    has_flag = node.optional_arg("is_linear_weight") is not None
    linear = int(graph.scalar_arg(node, "is_linear_weight")) if has_flag else 1
    if linear not in (0, 1):
        raise graph.fail(node, f"is_linear_weight is a bool (0 or 1), not {linear}")
    return "embedding_q4gsw" if linear == 1 else "embedding_q4gsw_even_high"


def _check_dtypes(
    graph: ComputeGraph,
    node: OpNode,
    weight: VTensor,
    scales: VTensor,
    indices: VTensor,
    out: VTensor,
) -> None:
    """Refuse arguments of the wrong dtype (and a weight that is not two-dimensional)."""
    if weight.dtype != "uint8" or len(weight.max_sizes) != 2:
        raise graph.fail(node, "weight must be uint8 [vocab, D/2]", tensor=weight.name)
    if scales.dtype != "float32":
        raise graph.fail(node, f"scales must be float32, not {scales.dtype}", scales.name)
    if indices.dtype != "int32":
        raise graph.fail(node, f"indices must be int32, not {indices.dtype}", indices.name)
    if out.dtype not in FLOAT_DTYPES:
        raise graph.fail(node, f"out must be float32 or float16, not {out.dtype}", out.name)


def _check_shapes(
    graph: ComputeGraph,
    node: OpNode,
    group_size: int,
    scales: VTensor,
    indices: VTensor,
    out: VTensor,
    vocab: int,
    dim: int,
) -> None:
    """Refuse a group size, scales, indices or out that do not fit the weight's [vocab, D/2]."""
    if group_size <= 0 or dim % group_size:
        raise graph.fail(node, f"group_size {group_size} does not divide D = {dim}")
    if scales.max_sizes != (vocab, dim // group_size):
        raise graph.fail(
            node,
            f"scales {list(scales.max_sizes)} must be [{vocab}, {dim // group_size}]",
            scales.name,
        )
    if indices.name not in graph.graph.inputs:
        raise graph.fail(
            node, "indices must be a graph input (ids are checked on the host)", indices.name
        )
    if out.max_sizes != (*indices.max_sizes, dim):
        raise graph.fail(
            node, f"out must be {[*indices.max_sizes, dim]}, got {list(out.max_sizes)}", out.name
        )


@register("embedding_q4gsw")
def add_embedding_q4gsw_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the embedding dispatch node of `node` and its host-side token id check."""
    slot = _nibble_slot(graph, node)
    weight = graph.tensor_arg(node, "weight")
    scales = graph.tensor_arg(node, "scales")
    indices = graph.tensor_arg(node, "indices")
    out = graph.output(node, "out")
    group_size = int(graph.scalar_arg(node, "group_size"))
    _check_dtypes(graph, node, weight, scales, indices, out)
    vocab, dim = weight.max_sizes[0], 2 * weight.max_sizes[1]
    _check_shapes(graph, node, group_size, scales, indices, out, vocab, dim)

    def check_token_ids(ids: np.ndarray) -> None:
        outside = (ids < 0) | (ids >= vocab)
        if outside.any():
            first = np.argwhere(outside)[0]
            raise InputError(
                node.name,
                "index_range",
                f"vulkan: {node.name}: {indices.name}{list(map(int, first))} = "
                f"{int(ids[tuple(first)])} is not a token id of the vocabulary [0, {vocab})",
            )

    graph.add_input_check(node, indices, check_token_ids)

    def resize_embedding_node(g: ComputeGraph) -> None:
        g.virtual_resize(out, (*g.sizes_of(indices), dim))

    slot = graph.dtype_slot(node, slot, out.dtype)  # f16 out: the nibble order's _f16 kernel
    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(out.name, indices.name),
            resize_fn=resize_embedding_node,
            slots={slot: slot},
            tensors={"out": out, "indices": indices, "weight": weight, "scales": scales},
            static={
                "embed_dim": dim,
                "group_size": group_size,
                "groups_per_row": -(-dim // group_size),
                "vocab": vocab,
                "workgroup_size": WORKGROUP,
            },
            values=elementwise_values(out, WORKGROUP),
        )
    )
