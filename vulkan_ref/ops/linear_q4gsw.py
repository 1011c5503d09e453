"""linear_q4gsw on Vulkan: a GEMM node and a GEMV node that each gate themselves on the live M.

As ExecuTorch's `add_q4gsw_linear_node` does, both dispatch nodes always exist (the GEMV only
when K % 8 == 0 and group_size % 8 == 0) and pick their global size from the live sizes on
every execute: the GEMM's is zero when M == 1 and the GEMV exists, the GEMV's is zero when
M != 1, so exactly one runs. Unlike upstream (docs/design.md §8.9), M is numel(x) / K over all
leading dims (not `sizes[-2]`), the output keeps x's rank, and N need not be a multiple of 4:
the kernels read the uint8 `[N, K_pad/2]` bytes as u32 words directly, with no repack.

In half precision (float16 x, bias and out; scales stay float32) the slots are
`q4gsw_gemm_f16` and `q4gsw_gemv_f16`: f16 loads and stores, f32 arithmetic.

The shaders read M, N and K from the metadata UBOs of x and out; group_size, has_bias and the
GEMV's grid cap are specialization constants (from the values of those names).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from graph_format import FLOAT_DTYPES, InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.ops import register
from vulkan_ref.tensor import VTensor

GEMM_WORKGROUP = 64
GEMM_TILE = (4, 4)  # outputs per invocation: rows, columns
GEMV_WORKGROUP = 64  # lanes per column pair; a power of two
GEMV_MAX_WORKGROUPS = 8192  # column pairs past this many workgroups are grid-strided


@register("linear_q4gsw")
def add_linear_q4gsw_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the GEMM node (and the GEMV node, when it applies) of `node`."""
    x = graph.tensor_arg(node, "x")
    weight = graph.tensor_arg(node, "weight")
    scales = graph.tensor_arg(node, "scales")
    bias = graph.optional_tensor_arg(node, "bias")
    out = graph.output(node, "out")
    dtype, group_size, bits = _check_precision(graph, node, x, weight, scales, bias, out)
    in_features, out_features, scales_width = _check_shapes(
        graph, node, x, weight, scales, bias, out, group_size
    )
    has_gemv = in_features % 8 == 0 and group_size % 8 == 0

    def live_m(g: ComputeGraph) -> int:
        return math.prod(g.sizes_of(x)[:-1])  # every leading dim; 1 for a rank-1 x

    rows, cols = GEMM_TILE
    gemv_workgroups = min(-(-out_features // 2), GEMV_MAX_WORKGROUPS)

    def gemm_values(g: ComputeGraph, slot: str) -> dict[str, int]:
        m = live_m(g)
        skip = has_gemv and m == 1
        tiles = -(-m // rows) * -(-out_features // cols)
        return {"m": m, "workgroups": 0 if skip else -(-tiles // GEMM_WORKGROUP)}

    def gemv_values(g: ComputeGraph, slot: str) -> dict[str, int]:
        m = live_m(g)
        return {"m": m, "workgroups": gemv_workgroups if m == 1 else 0}

    # Without a bias, a 4-byte dummy fills the bias role (read only when has_bias is 1).
    dummy_sizes = (2,) if dtype == "float16" else (1,)
    bias_tensor = (
        bias if bias is not None else graph.create_scratch(node, "no_bias", dtype, dummy_sizes)
    )
    tensors = {"out": out, "x": x, "weight": weight, "scales": scales, "bias": bias_tensor}
    static = {
        "n": out_features,
        "k": in_features,
        "k_words": -(-in_features // 8),
        "group_size": group_size,
        "n_padded": scales_width,
        "has_bias": int(bias is not None),
        "gemv_workgroups": gemv_workgroups,
        "workgroup_size": GEMM_WORKGROUP,
    }
    # accumulate_bits 16: the GEMM accumulating in f16 blocks (the GEMV stays f32-accumulating)
    gemm_slot = "q4gsw_gemm_f16acc" if bits == 16 else graph.dtype_slot(node, "q4gsw_gemm", dtype)
    gemv_slot = graph.dtype_slot(node, "q4gsw_gemv", dtype)
    args = tuple(t.name for t in (out, x, weight, scales)) + ((bias.name,) if bias else ())
    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=args,
            resize_fn=_resize_fn(node.name, x, out, in_features, out_features),
            slots={gemm_slot: gemm_slot},
            tensors=tensors,
            static=static,
            values=gemm_values,
        )
    )
    if has_gemv:
        graph.add_dispatch_node(
            DispatchNode(
                op=node.name,
                args=args,
                slots={gemv_slot: gemv_slot},
                tensors=tensors,
                static={
                    **static,
                    "max_workgroups": GEMV_MAX_WORKGROUPS,
                    "workgroup_size": GEMV_WORKGROUP,
                },
                values=gemv_values,
            )
        )


def _check_precision(
    graph: ComputeGraph,
    node: OpNode,
    x: VTensor,
    weight: VTensor,
    scales: VTensor,
    bias: VTensor | None,
    out: VTensor,
) -> tuple[str, int, int | float]:
    """The op's dtype, group_size and accumulate_bits, each tensor's dtype checked."""
    # x's float type is the op's precision: bias and out follow it, scales stay float32.
    dtype = x.dtype if x.dtype in FLOAT_DTYPES else "float32"
    expected = [(x, dtype), (weight, "uint8"), (scales, "float32")]
    if bias is not None:
        expected.append((bias, dtype))
    expected.append((out, dtype))
    for tensor, dtype in expected:
        if tensor.dtype != dtype:
            raise graph.fail(
                node,
                f"{tensor.name!r} has dtype {tensor.dtype}; linear_q4gsw needs {dtype}",
                tensor=tensor.name,
            )
    group_size = int(graph.scalar_arg(node, "group_size"))
    if group_size <= 0:
        raise graph.fail(node, f"group_size is {group_size}; it must be positive")
    bits = (
        32
        if node.optional_arg("accumulate_bits") is None
        else graph.scalar_arg(node, "accumulate_bits")
    )
    if bits not in (16, 32) or (bits == 16 and dtype != "float16"):
        raise graph.fail(
            node, f"accumulate_bits is {bits}; it must be 32, or 16 with float16 x ({dtype})"
        )
    return dtype, group_size, bits


def _check_shapes(
    graph: ComputeGraph,
    node: OpNode,
    x: VTensor,
    weight: VTensor,
    scales: VTensor,
    bias: VTensor | None,
    out: VTensor,
    group_size: int,
) -> tuple[int, int, int]:
    """K, N and the scales' padded width, each tensor's maximum sizes checked."""
    in_features = x.max_sizes[-1]
    packed_width = (in_features + 7) // 8 * 4
    if len(weight.max_sizes) != 2 or weight.max_sizes[1] != packed_width:
        raise graph.fail(
            node,
            f"packed weight {weight.name!r} is {list(weight.max_sizes)}; K={in_features} needs "
            f"[N, {packed_width}] bytes",
            tensor=weight.name,
        )
    out_features = weight.max_sizes[0]
    scales_width = (out_features + 3) // 4 * 4
    if len(scales.max_sizes) != 2 or scales.max_sizes[1] != scales_width:
        raise graph.fail(
            node,
            f"scales {scales.name!r} is {list(scales.max_sizes)}; N={out_features} needs "
            f"[groups, {scales_width}]",
            tensor=scales.name,
        )
    min_groups = math.ceil(in_features / group_size)
    if scales.max_sizes[0] < min_groups:
        raise graph.fail(
            node,
            f"scales {scales.name!r} has {scales.max_sizes[0]} groups; K={in_features} with "
            f"group_size={group_size} needs {min_groups}",
            tensor=scales.name,
        )
    if bias is not None and bias.max_sizes != (out_features,):
        raise graph.fail(
            node,
            f"bias {bias.name!r} is {list(bias.max_sizes)}; it must be [{out_features}]",
            tensor=bias.name,
        )
    if out.max_sizes != (*x.max_sizes[:-1], out_features):
        raise graph.fail(
            node,
            f"out {out.name!r} is {list(out.max_sizes)}; it must be "
            f"{[*x.max_sizes[:-1], out_features]}",
            tensor=out.name,
        )
    return in_features, out_features, scales_width


def _resize_fn(
    op: str, x: VTensor, out: VTensor, in_features: int, out_features: int
) -> Callable[[ComputeGraph], None]:
    """The GEMM node's resize function: out takes x's leading dims and N."""

    def resize_linear_q4gsw_node(g: ComputeGraph) -> None:
        sizes = g.sizes_of(x)
        if sizes[-1] != in_features:
            raise InputError(
                op,
                "in_features",
                f"vulkan: {op}: live width {sizes[-1]} of {x.name!r} differs from "
                f"in_features {in_features}",
            )
        g.virtual_resize(out, (*sizes[:-1], out_features))

    return resize_linear_q4gsw_node
