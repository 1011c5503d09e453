"""linear_q4gsw on WebGPU: a register-tiled GEMM and a cooperative GEMV, routed by the live M.

Both kernels are recorded at load (the GEMV when K % 8 == 0 and group_size % 8 == 0), each
a slot of its own (`q4gsw_gemm`, `q4gsw_gemv`). The resize hook on x recomputes
M = numel(x) / K over all leading dims, hands both slots their values, giving the route it
takes its workgroup count and the other 0 (skipped), and sets out's live dims to
`x.dims[:-1] + [N]`. Unlike upstream (docs/design.md
§8.3), the route is chosen from the live M on every resize rather than from the max M at
build, and M counts every leading dim. In half precision (float16 x, bias and out; scales
stay float32) the slots are `q4gsw_gemm_f16` and `q4gsw_gemv_f16`: f16 loads and stores,
f32 arithmetic.

The weight (uint8 `[N, K_pad/2]`) is bound as an array of u32 words: its allocation is
rounded up to 4 bytes, and a row of K_pad/2 bytes is a whole number of words.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from graph_format import FLOAT_DTYPES, InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.nodes import Dispatch
from webgpu_backend.ops import register
from webgpu_backend.tensor import WebGPUTensor

TILE = 4  # the GEMM's outputs per invocation: TILE rows × TILE columns
GEMM_WORKGROUP = 64
GEMV_LANES = 64  # a power of two (tree reduction)
GEMV_MAX_WORKGROUPS = 8192


def gemv_supported(k: int, group_size: int) -> bool:
    """The GEMV reads whole words per row and one scale per word."""
    return k % 8 == 0 and group_size % 8 == 0


def choose_route(m: int, has_gemv: bool) -> str:
    """ "gemv" for a single live row when the GEMV was built, else "gemm"."""
    return "gemv" if has_gemv and m == 1 else "gemm"


def gemm_workgroups(m: int, n: int) -> int:
    """One invocation per 4×4 tile of the live [M, N] output."""
    tiles = -(-m // TILE) * -(-n // TILE)
    return -(-tiles // GEMM_WORKGROUP)


def gemv_workgroups(n: int) -> int:
    """One workgroup per column pair, capped (the kernel grid-strides over the rest)."""
    return min(-(-n // 2), GEMV_MAX_WORKGROUPS)


@register("linear_q4gsw")
def build(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the GEMM (and GEMV) dispatch of `node` and its resize hook on x."""
    x = graph.arg_tensor(node, "x")
    weight = graph.arg_tensor(node, "weight")
    scales = graph.arg_tensor(node, "scales")
    bias = graph.optional_tensor(node, "bias")
    out = graph.output(node, "out")
    dtype, group_size, bits = _check_precision(graph, node, x, weight, scales, bias, out)
    k, k_words, n, n_padded = _check_shapes(graph, node, x, weight, scales, bias, out, group_size)

    # Without a bias, a 4-byte dummy fills the bias role (the kernels read it only if has_bias).
    bias_buffer = bias if bias is not None else graph.create_scratch(node, "no_bias", 4)
    tensors = {"out": out, "x": x, "weight": weight, "scales": scales, "bias": bias_buffer}
    pairs_grid = gemv_workgroups(n)
    gemm_static: dict[str, Value] = {
        "n": n,
        "k": k,
        "k_words": k_words,
        "group_size": group_size,
        "n_padded": n_padded,
        "has_bias": int(bias is not None),
        "gemv_workgroups": pairs_grid,
        "workgroup_size": GEMM_WORKGROUP,
    }
    # The GEMV reads the group size as an override (a pipeline per group size, as on Vulkan).
    gemv_static: dict[str, Value] = {
        **gemm_static,
        "max_workgroups": GEMV_MAX_WORKGROUPS,
        "workgroup_size": GEMV_LANES,
    }
    # accumulate_bits 16: the GEMM accumulating in f16 blocks (the GEMV stays f32-accumulating)
    gemm_slot = "q4gsw_gemm_f16acc" if bits == 16 else graph.dtype_slot(node, "q4gsw_gemm", dtype)
    gemv_slot = graph.dtype_slot(node, "q4gsw_gemv", dtype)
    gemm = graph.add_kernel(node, {gemm_slot: gemm_slot}, tensors=tensors, static=gemm_static)
    gemv = (
        graph.add_kernel(node, {gemv_slot: gemv_slot}, tensors=tensors, static=gemv_static)
        if gemv_supported(k, group_size)
        else None
    )

    resize = _resize_fn(graph, node, (x, out), (k, n), (gemm, gemv), pairs_grid)
    graph.add_resize_hook(node, [x.name], resize)


def _check_precision(
    graph: WebGPUGraph,
    node: OpNode,
    x: WebGPUTensor,
    weight: WebGPUTensor,
    scales: WebGPUTensor,
    bias: WebGPUTensor | None,
    out: WebGPUTensor,
) -> tuple[str, int, int]:
    """The op's dtype, group_size and accumulate_bits, each tensor's dtype checked."""
    # x's float type is the op's precision: bias and out follow it, scales stay float32.
    dtype = x.dtype if x.dtype in FLOAT_DTYPES else "float32"
    wanted = [(x, dtype), (weight, "uint8"), (scales, "float32")]
    wanted += [(bias, dtype)] if bias is not None else []
    wanted += [(out, dtype)]
    for tensor, dtype in wanted:
        if tensor.dtype != dtype:
            raise graph.fail(
                node, f"{tensor.name!r} must be {dtype}, got {tensor.dtype}", tensor=tensor.name
            )
    group_size = int(graph.arg_scalar(node, "group_size"))
    if group_size <= 0:
        raise graph.fail(node, f"group_size must be > 0, got {group_size}")
    has_bits = node.optional_arg("accumulate_bits") is not None
    bits = int(graph.arg_scalar(node, "accumulate_bits")) if has_bits else 32
    if bits not in (16, 32) or (bits == 16 and dtype != "float16"):
        raise graph.fail(
            node, f"accumulate_bits must be 32, or 16 with float16 x (x is {dtype}), got {bits}"
        )
    return dtype, group_size, bits


def _check_shapes(
    graph: WebGPUGraph,
    node: OpNode,
    x: WebGPUTensor,
    weight: WebGPUTensor,
    scales: WebGPUTensor,
    bias: WebGPUTensor | None,
    out: WebGPUTensor,
    group_size: int,
) -> tuple[int, int, int, int]:
    """K, its u32 words, N and the scales' padded width, each tensor's dims checked."""
    k = x.dims[-1]
    k_words = -(-k // 8)
    if len(weight.dims) != 2 or weight.dims[1] != 4 * k_words:
        raise graph.fail(
            node,
            f"weight {weight.name!r} must be [N, {4 * k_words}] (x's K={k} padded to "
            f"{8 * k_words}, two nibbles a byte), got {list(weight.dims)}",
            tensor=weight.name,
        )
    n = weight.dims[0]
    n_padded = -(-n // 4) * 4
    if len(scales.dims) != 2 or scales.dims[1] != n_padded:
        raise graph.fail(
            node,
            f"scales {scales.name!r} must be [groups, {n_padded}] (N={n} padded to 4), got "
            f"{list(scales.dims)}",
            tensor=scales.name,
        )
    groups = -(-k // group_size)
    if scales.dims[0] < groups:
        raise graph.fail(
            node,
            f"scales {scales.name!r} must have at least {groups} groups (K={k}, group_size="
            f"{group_size}), got {scales.dims[0]}",
            tensor=scales.name,
        )
    if bias is not None and bias.dims != (n,):
        raise graph.fail(
            node, f"bias {bias.name!r} must be [{n}], got {list(bias.dims)}", tensor=bias.name
        )
    if out.dims != (*x.dims[:-1], n):
        raise graph.fail(
            node,
            f"out {out.name!r} must be {[*x.dims[:-1], n]}, got {list(out.dims)}",
            tensor=out.name,
        )
    return k, k_words, n, n_padded


def _resize_fn(
    graph: WebGPUGraph,
    node: OpNode,
    tensors: tuple[WebGPUTensor, WebGPUTensor],
    features: tuple[int, int],
    dispatches: tuple[Dispatch, Dispatch | None],
    pairs_grid: int,
) -> Callable[[], None]:
    """The resize hook on x of (x, out) with (K, N): the route from the live M, out's dims."""
    x, out = tensors
    k, n = features
    gemm, gemv = dispatches

    def resize() -> None:
        dims = x.cur_dims
        if dims[-1] != k:
            raise InputError(
                node.name,
                "in_features",
                f"webgpu: op {node.name!r}: x's live last dim must stay {k} (in_features), "
                f"got {dims[-1]}",
            )
        m = math.prod(dims[:-1])
        route = choose_route(m, gemv is not None)
        gemm.set({"m": m, "workgroups": gemm_workgroups(m, n) if route == "gemm" else 0})
        if gemv is not None:
            gemv.set({"m": m, "workgroups": pairs_grid if route == "gemv" else 0})
        graph.set_cur_dims(out, (*dims[:-1], n))

    return resize
