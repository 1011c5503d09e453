"""embedding_q4gsw on WebGPU: one invocation per output element, hook on the indices.

Token ids are checked against the vocabulary on the host (`add_input_check`), before
anything changes, so the kernel never reads a row that does not exist; that is why the
indices must be a graph input. Any even D (the kernel reads bytes out of u32 words). The
nibble order picks the slot at load: `embedding_q4gsw` (is_linear_weight 1 or left out: the
even element in a byte's low nibble) or `embedding_q4gsw_even_high` (0: in the high nibble).
"""

from __future__ import annotations

import math

import numpy as np

from graph_format import FLOAT_DTYPES, InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import register
from webgpu_backend.tensor import WebGPUTensor

WORKGROUP_SIZE = 64


@register("embedding_q4gsw")
def build(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the embedding dispatch of `node`, its host check and its hook on the indices."""
    layout_name = node.optional_arg("is_linear_weight")
    linear_layout = 1 if layout_name is None else int(graph.graph.scalar(layout_name))
    if linear_layout not in (0, 1):
        raise graph.fail(node, f"is_linear_weight must be 0 or 1, got {linear_layout}")
    slot = "embedding_q4gsw" if linear_layout else "embedding_q4gsw_even_high"
    weight = graph.arg_tensor(node, "weight")
    scales = graph.arg_tensor(node, "scales")
    indices = graph.arg_tensor(node, "indices")
    out = graph.output(node, "out")
    group_size = int(graph.arg_scalar(node, "group_size"))
    vocab, dim, groups = _check_build(graph, node, (weight, scales, indices, out), group_size)

    def check_ids(ids: np.ndarray) -> None:
        bad = np.flatnonzero((ids < 0) | (ids >= vocab))
        if bad.size:
            where = [int(i) for i in np.unravel_index(int(bad[0]), ids.shape)]
            raise InputError(
                node.name,
                "index_range",
                f"webgpu: op {node.name!r}: token id {int(ids.flat[bad[0]])} at {where} of "
                f"{indices.name!r} is outside the vocabulary [0, {vocab})",
            )

    graph.add_input_check(node, indices, check_ids)
    static: dict[str, Value] = {
        "embed_dim": dim,
        "group_size": group_size,
        "groups_per_row": groups,
        "vocab": vocab,
        "workgroup_size": WORKGROUP_SIZE,
    }
    slot = graph.dtype_slot(node, slot, out.dtype)  # f16 out: the nibble order's _f16 kernel
    dispatch = graph.add_kernel(
        node,
        {slot: slot},
        tensors={"out": out, "indices": indices, "weight": weight, "scales": scales},
        static=static,
    )

    def resize() -> None:
        dims = (*indices.cur_dims, dim)
        graph.set_cur_dims(out, dims)
        numel = math.prod(dims)
        dispatch.set({"numel": numel, "workgroups": -(-numel // WORKGROUP_SIZE)})

    graph.add_resize_hook(node, [indices.name], resize)


def _check_build(
    graph: WebGPUGraph,
    node: OpNode,
    tensors: tuple[WebGPUTensor, WebGPUTensor, WebGPUTensor, WebGPUTensor],
    group_size: int,
) -> tuple[int, int, int]:
    """Check (weight, scales, indices, out) at load; returns the vocabulary, the embedding
    dim and the groups per row."""
    weight, scales, indices, out = tensors
    if weight.dtype != "uint8" or len(weight.dims) != 2:
        raise graph.fail(
            node,
            f"weight must be uint8 [vocab, D/2], got {weight.dtype} {list(weight.dims)}",
            tensor=weight.name,
        )
    if scales.dtype != "float32":
        raise graph.fail(node, f"scales must be float32, got {scales.dtype}", tensor=scales.name)
    if indices.dtype != "int32":
        raise graph.fail(node, f"indices must be int32, got {indices.dtype}", tensor=indices.name)
    if out.dtype not in FLOAT_DTYPES:
        raise graph.fail(node, f"out must be float32 or float16, got {out.dtype}", out.name)
    vocab, dim = weight.dims[0], 2 * weight.dims[1]
    if group_size <= 0 or dim % group_size:
        raise graph.fail(node, f"group_size {group_size} must divide the embedding dim {dim}")
    groups = dim // group_size
    if scales.dims != (vocab, groups):
        raise graph.fail(
            node, f"scales must be [{vocab}, {groups}], got {list(scales.dims)}", scales.name
        )
    if indices.name not in graph.graph.inputs:
        raise graph.fail(
            node, "indices must be a graph input: token ids are checked on the host", indices.name
        )
    if out.dims != (*indices.dims, dim):
        raise graph.fail(
            node, f"out must be {[*indices.dims, dim]}, got {list(out.dims)}", tensor=out.name
        )
    return vocab, dim, groups
