"""apply_rotary_emb_pos on Vulkan: one dispatch node rotating q and k by angles the shader
computes from int32 positions and theta.

One invocation per rotated pair (q's, then k's), (numel(xq) + numel(xk)) / 2 from live sizes,
as apply_rotary_emb's node (vulkan_ref/ops/rotary.py). The shader reads D, H and S from the
metadata of xq and xk, the positions and (when the graph has them) the frequency factors from
their buffers (else a one-float dummy it does not read), theta_base, freq_scale and
has_freq_factors from push constants. The resize function refuses live positions whose
length is not S before anything is recorded.
"""

from __future__ import annotations

import math

from graph_format import FLOAT_DTYPES, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.ops import register
from vulkan_ref.ops.rotary import check_live_qk, check_qk_build, refusal
from vulkan_ref.tensor import VTensor

WORKGROUP = 64


def _check_dtypes(
    graph: ComputeGraph,
    node: OpNode,
    rotated: tuple[VTensor, ...],
    positions: VTensor,
    factors: VTensor | None,
) -> None:
    """q, k and the outputs (`rotated`) all float32 or all float16 (the `_f16` slot), as
    xq's type says; int32 positions; float32 factors."""
    dtype = rotated[0].dtype if rotated[0].dtype in FLOAT_DTYPES else "float32"
    for tensor in rotated:
        if tensor.dtype != dtype:
            raise graph.fail(
                node,
                f"{node.op} takes {dtype} q and k; {tensor.name!r} is {tensor.dtype}",
                tensor.name,
            )
    if positions.dtype != "int32":
        raise graph.fail(node, f"positions {positions.name!r} is not int32", positions.name)
    if factors is not None and factors.dtype != "float32":
        raise graph.fail(node, f"freq_factors {factors.name!r} is not float32", factors.name)


def _check_build(graph: ComputeGraph, node: OpNode) -> tuple[int, float, float]:
    """Check dtypes and maximum sizes at load; returns D, theta_base and freq_scale."""
    xq, xk = graph.tensor_arg(node, "xq"), graph.tensor_arg(node, "xk")
    positions = graph.tensor_arg(node, "positions")
    factors = graph.optional_tensor_arg(node, "freq_factors")
    xq_out, xk_out = graph.output(node, "xq_out"), graph.output(node, "xk_out")
    _check_dtypes(graph, node, (xq, xk, xq_out, xk_out), positions, factors)
    dim = check_qk_build(graph, node, xq, xk)
    seq_max = xq.max_sizes[1]
    if positions.max_sizes != (seq_max,):
        raise graph.fail(
            node, f"positions {list(positions.max_sizes)} must be [{seq_max}]", positions.name
        )
    if factors is not None and factors.max_sizes != (dim // 2,):
        raise graph.fail(
            node, f"freq_factors {list(factors.max_sizes)} must be [{dim // 2}]", factors.name
        )
    base = float(graph.scalar_arg(node, "theta_base"))
    scale = float(graph.scalar_arg(node, "freq_scale"))
    if not (math.isfinite(base) and base > 0 and math.isfinite(scale)):
        raise graph.fail(node, f"theta_base {base} must be finite, > 0; freq_scale {scale} finite")
    if xq_out.max_sizes != xq.max_sizes:
        raise graph.fail(node, f"xq_out must be {list(xq.max_sizes)}", tensor=xq_out.name)
    if xk_out.max_sizes != xk.max_sizes:
        raise graph.fail(node, f"xk_out must be {list(xk.max_sizes)}", tensor=xk_out.name)
    return dim, base, scale


@register("apply_rotary_emb_pos")
def add_rotary_emb_pos_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the position rope node of `node`: angles from positions [S] and theta."""
    xq, xk = graph.tensor_arg(node, "xq"), graph.tensor_arg(node, "xk")
    positions = graph.tensor_arg(node, "positions")
    factors = graph.optional_tensor_arg(node, "freq_factors")
    xq_out, xk_out = graph.output(node, "xq_out"), graph.output(node, "xk_out")
    dim, base, scale = _check_build(graph, node)

    slot = graph.dtype_slot(node, "rotary_emb_pos", xq.dtype)
    # Without factors, a one-float dummy fills the role (read only when has_freq_factors is 1).
    factor_tensor = (
        factors if factors is not None else graph.create_scratch(node, "no_ff", "float32", (1,))
    )

    def resize_rotary_emb_pos_node(g: ComputeGraph) -> None:
        check_live_qk(g, node, xq, xk)
        q, k = g.sizes_of(xq), g.sizes_of(xk)
        if g.sizes_of(positions) != (q[1],):
            raise refusal(
                node,
                "positions_shape",
                f"positions {list(g.sizes_of(positions))} must hold one per token: [{q[1]}]",
            )
        g.virtual_resize(xq_out, q)
        g.virtual_resize(xk_out, k)

    def values(g: ComputeGraph, slot: str) -> dict[str, int]:
        q, k = g.sizes_of(xq), g.sizes_of(xk)
        q_pairs = xq.numel // 2
        total = q_pairs + xk.numel // 2
        return {
            "q_pairs": q_pairs,
            "total_pairs": total,
            "seq": q[1],
            "q_heads": q[2],
            "k_heads": k[2],
            "workgroups": -(-total // WORKGROUP),
        }

    factor_args = (factors.name,) if factors is not None else ()
    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(xq_out.name, xk_out.name, xq.name, xk.name, positions.name, *factor_args),
            resize_fn=resize_rotary_emb_pos_node,
            slots={slot: slot},
            tensors={
                "xq_out": xq_out,
                "xk_out": xk_out,
                "xq": xq,
                "xk": xk,
                "positions": positions,
                "freq_factors": factor_tensor,
            },
            static={
                "half_dim": dim // 2,
                "head_dim": dim,
                "theta_base": base,
                "freq_scale": scale,
                "has_freq_factors": int(factors is not None),
                "workgroup_size": WORKGROUP,
            },
            values=values,
        )
    )
