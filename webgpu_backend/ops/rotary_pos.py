"""apply_rotary_emb_pos on WebGPU: one dispatch rotating q and k by angles the kernel
computes from int32 positions and theta.

One invocation per rotated pair, q's pairs first, as apply_rotary_emb's (webgpu_backend/ops/
rotary.py): the count covers (numel(xq) + numel(xk)) / 2 live pairs. The kernel binds the
positions tensor and, when the graph has them, the frequency factors (else a 4-byte dummy it
does not read: `has_freq_factors` 0); theta_base and freq_scale are fixed at load.
The hook follows xq, xk and positions, whose live length must be S.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from graph_format import FLOAT_DTYPES, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.nodes import Dispatch, ScratchBuffer
from webgpu_backend.ops import register
from webgpu_backend.ops.rotary import check_live_qk, check_qk_build, refusal
from webgpu_backend.tensor import WebGPUTensor

WORKGROUP_SIZE = 64


def _check_dtypes(
    graph: WebGPUGraph,
    node: OpNode,
    rotated: tuple[WebGPUTensor, ...],
    positions: WebGPUTensor,
    factors: WebGPUTensor | None,
) -> None:
    """q, k and the outputs (`rotated`) all float32 or all float16 (the `_f16` slot), as
    xq's type says; int32 positions; float32 factors."""
    dtype = rotated[0].dtype if rotated[0].dtype in FLOAT_DTYPES else "float32"
    for tensor in rotated:
        if tensor.dtype != dtype:
            raise graph.fail(
                node, f"{tensor.name!r} must be {dtype}, got {tensor.dtype}", tensor=tensor.name
            )
    if positions.dtype != "int32":
        raise graph.fail(node, f"positions must be int32, got {positions.dtype}", positions.name)
    if factors is not None and factors.dtype != "float32":
        raise graph.fail(node, f"freq_factors must be float32, got {factors.dtype}", factors.name)


def _check_build(graph: WebGPUGraph, node: OpNode) -> tuple[int, float, float]:
    """Check dtypes and dims at load; returns D, theta_base and freq_scale."""
    xq, xk = graph.arg_tensor(node, "xq"), graph.arg_tensor(node, "xk")
    positions = graph.arg_tensor(node, "positions")
    factors = graph.optional_tensor(node, "freq_factors")
    xq_out, xk_out = graph.output(node, "xq_out"), graph.output(node, "xk_out")
    _check_dtypes(graph, node, (xq, xk, xq_out, xk_out), positions, factors)
    dim = check_qk_build(graph, node, xq, xk)
    if positions.dims != (xq.dims[1],):
        raise graph.fail(
            node, f"positions must be [{xq.dims[1]}], got {list(positions.dims)}", positions.name
        )
    if factors is not None and factors.dims != (dim // 2,):
        raise graph.fail(
            node, f"freq_factors must be [{dim // 2}], got {list(factors.dims)}", factors.name
        )
    base = float(graph.arg_scalar(node, "theta_base"))
    scale = float(graph.arg_scalar(node, "freq_scale"))
    if not (math.isfinite(base) and base > 0) or not math.isfinite(scale):
        raise graph.fail(
            node, f"theta_base must be finite and > 0 ({base}), freq_scale finite ({scale})"
        )
    if xq_out.dims != xq.dims:
        raise graph.fail(node, f"xq_out must be {list(xq.dims)}", tensor=xq_out.name)
    if xk_out.dims != xk.dims:
        raise graph.fail(node, f"xk_out must be {list(xk.dims)}", tensor=xk_out.name)
    return dim, base, scale


@register("apply_rotary_emb_pos")
def build_rotary_emb_pos(graph: WebGPUGraph, node: OpNode) -> None:
    """Record apply_rotary_emb_pos (pair-interleaved, angles from positions and theta)."""
    xq, xk = graph.arg_tensor(node, "xq"), graph.arg_tensor(node, "xk")
    positions = graph.arg_tensor(node, "positions")
    factors = graph.optional_tensor(node, "freq_factors")
    xq_out, xk_out = graph.output(node, "xq_out"), graph.output(node, "xk_out")
    dim, base, scale = _check_build(graph, node)

    slot = graph.dtype_slot(node, "rotary_emb_pos", xq.dtype)
    # Without factors, a 4-byte dummy fills the role (the kernels read it only if has_...).
    factor_buffer = factors if factors is not None else graph.create_scratch(node, "no_ff", 4)
    tensors: dict[str, WebGPUTensor | ScratchBuffer] = {
        "xq_out": xq_out,
        "xk_out": xk_out,
        "xq": xq,
        "xk": xk,
        "positions": positions,
        "freq_factors": factor_buffer,
    }
    static: dict[str, Value] = {
        "half_dim": dim // 2,
        "head_dim": dim,
        "theta_base": base,
        "freq_scale": scale,
        "has_freq_factors": int(factors is not None),
        "workgroup_size": WORKGROUP_SIZE,
    }
    dispatch = graph.add_kernel(node, {slot: slot}, tensors=tensors, static=static)

    resize = _resize_fn(graph, node, (xq, xk, positions, xq_out, xk_out), dispatch)
    graph.add_resize_hook(node, [xq.name, xk.name, positions.name], resize)


def _resize_fn(
    graph: WebGPUGraph,
    node: OpNode,
    tensors: tuple[WebGPUTensor, WebGPUTensor, WebGPUTensor, WebGPUTensor, WebGPUTensor],
    dispatch: Dispatch,
) -> Callable[[], None]:
    """The resize hook of a position rope of (xq, xk, positions, xq_out, xk_out)."""
    xq, xk, positions, xq_out, xk_out = tensors

    def resize() -> None:
        q, k = check_live_qk(node, xq, xk)
        if positions.cur_dims != (q[1],):
            raise refusal(
                node,
                "positions_shape",
                f"live positions {list(positions.cur_dims)} must be [{q[1]}], one per token",
            )
        graph.set_cur_dims(xq_out, q)
        graph.set_cur_dims(xk_out, k)
        q_pairs = xq.cur_numel // 2
        total = q_pairs + xk.cur_numel // 2
        dispatch.set(
            {
                "q_pairs": q_pairs,
                "total_pairs": total,
                "seq": q[1],
                "q_heads": q[2],
                "k_heads": k[2],
                "workgroups": -(-total // WORKGROUP_SIZE),
            }
        )

    return resize
